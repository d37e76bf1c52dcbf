"""The ``alpacaeval`` data source: AlpacaEval 2 judge preferences against GPT-4-Turbo."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from tiered_router.evaluation._source_files import read_jsonl, user_turn
from tiered_router.evaluation.dataset import (
    Dataset,
    EvalRow,
    Outcome,
    estimate_tokens,
)
from tiered_router.policy._schema import Price
from tiered_router.turn import Usage

__all__ = ["ALPACAEVAL_PAIR", "load_alpacaeval"]

ALPACAEVAL_PAIR = ("gpt-3.5-turbo-1106", "gpt4_1106_preview")
"""The default (fast, frontier) models of the source."""

_ALPACA_PRICES = {
    "gpt4_1106_preview": Price(input_per_mtok=10.0, output_per_mtok=30.0),
    "claude-instant-1.2": Price(input_per_mtok=0.8, output_per_mtok=2.4),
}


def load_alpacaeval(data_dir: str | os.PathLike[str]) -> Dataset:
    """Load AlpacaEval 2 per-prompt preferences against ``gpt4_1106_preview``.

    The quality of a cheaper model on a prompt is the judge's probability that its answer
    beats GPT-4-Turbo's (``preference - 1``); GPT-4-Turbo itself scores 0.5 (itself against
    itself). Answers are kept for the three models whose outputs are in the data.

    Raises:
        DatasetError: When the files are missing.

    """
    folder = Path(data_dir) / "alpacaeval2_pairwise"
    instructions = {int(r["idx"]): r for r in read_jsonl(folder / "instructions.jsonl")}
    texts: dict[tuple[int, str], str] = {}
    if (folder / "outputs.jsonl").is_file():
        for r in read_jsonl(folder / "outputs.jsonl"):
            texts[(int(r["idx"]), str(r["model"]))] = str(r["output"])
    outcomes: dict[int, dict[str, Outcome]] = defaultdict(dict)
    for r in read_jsonl(folder / "preferences_vs_gpt4_1106_preview.jsonl"):
        idx, model, base = int(r["idx"]), str(r["model"]), str(r["baseline"])
        if idx not in instructions:
            continue
        prompt_tokens = estimate_tokens(str(instructions[idx]["instruction"]))
        outcomes[idx][model] = Outcome(
            quality=min(max(float(r["preference"]) - 1.0, 0.0), 1.0),
            text=texts.get((idx, model)),
            usage=Usage(
                input_tokens=prompt_tokens,
                output_tokens=max(1, int(r.get("model_output_chars") or 0) // 4),
            ),
            usage_estimated=True,
        )
        outcomes[idx].setdefault(
            base,
            Outcome(
                quality=0.5,
                text=texts.get((idx, base)),
                usage=Usage(
                    input_tokens=prompt_tokens,
                    output_tokens=max(1, int(r.get("baseline_output_chars") or 0) // 4),
                ),
                usage_estimated=True,
            ),
        )
    rows = [
        EvalRow.build(
            f"alpacaeval.{idx}",
            user_turn(str(instructions[idx]["instruction"])),
            outs,
            metadata={"source": "alpacaeval2", "dataset": instructions[idx].get("dataset")},
        )
        for idx, outs in sorted(outcomes.items())
    ]
    fast, frontier = ALPACAEVAL_PAIR
    return Dataset(
        name="alpacaeval",
        rows=tuple(rows),
        fast_model=fast,
        frontier_model=frontier,
        prices=dict(_ALPACA_PRICES),
        source="tatsu-lab/alpaca_eval@cd543a14 results/*/weighted_alpaca_eval_gpt4_turbo",
        license="CC BY-NC 4.0: internal evaluation only",
        notes=(
            "quality = judge's P(answer beats GPT-4-Turbo); GPT-4-Turbo scores 0.5",
            "judged without length control; tokens estimated from output length",
        ),
    )
