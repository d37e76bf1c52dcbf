"""Build the bundled sample (``data/sample.jsonl.gz``) and the data its policy is calibrated on.

The evaluation rows are a seeded draw from three sources of the shared data folder
(:data:`DRAW_SIZES`): 300 MMLU and 200 GSM8K rows of RouteLLM's evaluation data
(Mixtral-8x7B-Instruct -> GPT-4-1106-preview; Apache-2.0) and 200 BFCL v1 function-calling
rows (gpt-4o-mini-2024-07-18-FC -> gpt-4o-2024-08-06-FC). The package ships only what it
may redistribute (``data/ATTRIBUTION.md``, checked by ``tests/test_bundled_data.py``): the
:data:`BUNDLED` sources. BFCL's recorded tool calls come from a repository without a licence
file, so its drawn rows stay in the shared data folder: left out of the calibration rows and
of the transfer scorer's training (:func:`drawn_ids`) as before, never copied into the
package.

Each bundled row carries the two recorded outcomes under the keys :data:`FAST_KEY` and
:data:`FRONTIER_KEY`, each priced at its own model's list price (stored as the outcome's
``cost``). Recorded latencies are dropped, so every turn is timed by the policy's latency
models.

The **calibration data** is every other development row of the three sources (never a
drawn row), in the same form; it is not bundled. Rebuild both, then calibrate::

    python -m tiered_router.evaluation._sample ../shared/data --calibration /tmp/calib.jsonl.gz
    tiered-router calibrate tiered_router/evaluation/data/default_policy.yaml
        --data /tmp/calib.jsonl.gz --target-quality-retained 0.95 --write   # one line
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from tiered_router.evaluation.dataset import Dataset, EvalRow, Outcome, write_dataset
from tiered_router.evaluation.sources import load_bfcl, load_routellm
from tiered_router.pricing import cost_of
from tiered_router.turn import Completion

__all__ = ["BUNDLED", "DRAW_SIZES", "FAST_KEY", "FRONTIER_KEY", "build_sample", "drawn_ids"]

DRAW_SIZES = {"mmlu": 300, "gsm8k": 200, "bfcl": 200}
"""Evaluation rows drawn from each source (none of them is calibrated or trained on)."""

BUNDLED = ("mmlu", "gsm8k")
"""The sources whose drawn rows the package ships (RouteLLM's, Apache-2.0)."""

FAST_KEY = "Mixtral-8x7B-Instruct"
"""Outcome key of the fast tier (Mixtral-8x7B-Instruct; on BFCL rows, gpt-4o-mini)."""
FRONTIER_KEY = "gpt-4-1106-preview"
"""Outcome key of the frontier tier (GPT-4-Turbo; on BFCL rows, gpt-4o)."""

_SEED = 20240810


def _priced(outcome: Outcome, source: Dataset, model: str) -> Outcome:
    cost = outcome.cost
    if cost is None:
        price = source.prices.get(model)
        usage = outcome.usage or Completion(text=outcome.text or "").usage
        cost = cost_of(usage, price) if price is not None else None
    return replace(outcome, cost=cost, latency_s=None)


def _convert(row: EvalRow, source: Dataset, name: str) -> EvalRow:
    fast, frontier = source.fast_model, source.frontier_model
    assert fast and frontier
    meta = {"source": name}
    if "category" in row.turn.metadata:
        meta["category"] = str(row.turn.metadata["category"])
    if "subject" in row.turn.metadata:
        meta["subject"] = str(row.turn.metadata["subject"])
    outcomes = {
        FAST_KEY: _priced(row.outcomes[fast], source, fast),
        FRONTIER_KEY: _priced(row.outcomes[frontier], source, frontier),
    }
    return EvalRow.build(
        row.id,
        [dict(m) for m in row.turn.messages],
        outcomes,
        tools=[t.to_openai() for t in row.turn.tools] if row.turn.tools else None,
        metadata=meta,
    )


def _header(rows: list[EvalRow], name: str, notes: tuple[str, ...], source: str) -> Dataset:
    return Dataset(
        name=name,
        rows=tuple(rows),
        fast_model=FAST_KEY,
        frontier_model=FRONTIER_KEY,
        source=source,
        license="see tiered_router/evaluation/data/ATTRIBUTION.md",
        notes=notes,
    )


def _draw(data_dir: str | Path) -> Iterator[tuple[str, EvalRow, bool]]:
    """Every development row of the three sources: ``(source, row, drawn)``, seeded."""
    rng = random.Random(_SEED)
    for name, size in DRAW_SIZES.items():
        source = load_bfcl(data_dir) if name == "bfcl" else load_routellm(data_dir, name)
        if name == "bfcl":
            source = source.with_pair(*_bfcl_pair())
        picked = set(rng.sample(range(len(source.rows)), size))
        for i, row in enumerate(source.rows):
            yield name, _convert(row, source, name), i in picked


def drawn_ids(data_dir: str | Path) -> frozenset[tuple[str, str]]:
    """``(source, row id)`` of every drawn evaluation row, bundled or not."""
    return frozenset((name, row.id) for name, row, drawn in _draw(data_dir) if drawn)


def build_sample(
    data_dir: str | Path, out: str | Path, *, calibration: str | Path | None = None
) -> Dataset:
    """Draw the evaluation rows, write the bundled part (and the calibration rows).

    Args:
        data_dir: The shared data folder.
        out: Where to write the sample (the drawn rows of the :data:`BUNDLED` sources).
        calibration: Where to write every row that was not drawn (optional).

    Returns:
        The sample.
    """
    bundled: list[EvalRow] = []
    rest: list[EvalRow] = []
    for name, row, drawn in _draw(data_dir):
        if not drawn:
            rest.append(row)
        elif name in BUNDLED:
            bundled.append(row)
    sizes = DRAW_SIZES
    sample = _header(
        bundled,
        "sample",
        (
            f"seeded random sample: RouteLLM MMLU ({sizes['mmlu']}) and GSM8K ({sizes['gsm8k']}), "
            "Mixtral-8x7B-Instruct -> GPT-4-Turbo",
            "MMLU keeps no responses: the gate passes those drafts without checks",
            "exam-row token counts estimated from text length (~4 characters per token)",
        ),
        "lm-sys/RouteLLM@0b64fdaf (MMLU, GSM8K)",
    )
    write_dataset(sample, out)
    if calibration is not None:
        source = (
            "lm-sys/RouteLLM@0b64fdaf (MMLU, GSM8K); ShishirPatil/gorilla@de8307b4 and "
            "HuanzhiMao/BFCL-Result@b4adfc9b (BFCL v1)"
        )
        notes = ("development rows not drawn for evaluation",)
        write_dataset(_header(rest, "calibration", notes, source), calibration)
    return sample


def _bfcl_pair() -> tuple[str, str]:
    from tiered_router.evaluation.sources import _PAIRS

    return _PAIRS["bfcl"]


def main(argv: list[str] | None = None) -> int:
    """Rebuild the bundled sample (and optionally write the calibration rows)."""
    parser = argparse.ArgumentParser(description="Build the bundled evaluation sample.")
    parser.add_argument("data_dir", nargs="?", default="../shared/data")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "data" / "sample.jsonl.gz"
    )
    parser.add_argument("--calibration", type=Path, default=None)
    args = parser.parse_args(argv)
    built = build_sample(args.data_dir, args.out, calibration=args.calibration)
    sys.stdout.write(f"wrote {len(built)} rows to {args.out}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - a maintenance script
    sys.exit(main())
