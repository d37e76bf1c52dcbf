"""Training of the transfer scorer, and the pooled sources it is trained and judged on.

Not imported by the package at run time (only by this command, the benchmark and tests).
The shipped weights are made by::

    python -m tiered_router.scoring._transfer_fit ../shared/data

(``--out`` defaults to ``tiered_router/scoring/data/transfer_default.json``; the evaluation
rows drawn for the bundled sample, BFCL's drawn rows included, are left out unless
``--include-sample``.)

**Sources** (:data:`SOURCE_PAIRS`): every source of the shared data folder with the pairs
of a cheaper and a stronger model it holds: RouteLLM MMLU and GSM8K (Mixtral-8x7B ->
GPT-4-1106), RouterBench ARC-Challenge, MBPP and Winogrande (gpt-3.5-turbo-1106 and
Mixtral-8x7B-chat, each -> GPT-4-1106), BFCL (gpt-4o-mini -> gpt-4o, function calling) and
AlpacaEval 2 (gpt-3.5-turbo-1106 -> GPT-4-Turbo, judge preference).

**Model.** Per block (``choice`` / ``open``, :mod:`tiered_router.scoring.transfer`) a
logistic regression of the soft label ``(q_strong - q_weak + 1) / 2`` (1: only the
frontier model is right, 0: only the fast one, 1/2: no difference) on the standardised
features, with one unpenalised offset per (source, pair): the offsets absorb how much a
source gains on average, so the weights learn only what ranks turns *within* a source,
which is what carries to a source never seen. Each (source, pair) weighs the same in
total. The saved bias is the mean offset. Minimised by the learned scorer's L-BFGS
(``minimise``); deterministic.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tiered_router.evaluation.sources import load_data
from tiered_router.scoring.features import focus_text, request_chars, sigmoid
from tiered_router.scoring.learned._train import _log1pexp, minimise
from tiered_router.scoring.transfer import (
    FEATURES,
    TRANSFER_BLOCKS,
    TransferModel,
    _choice_features,
)
from tiered_router.turn import Turn

__all__ = [
    "SOURCE_PAIRS",
    "Example",
    "features_of",
    "fit_transfer",
    "load_examples",
    "main",
    "sample_rows",
]

SOURCE_PAIRS: tuple[tuple[str, str], ...] = (
    ("mmlu", "mmlu"),
    ("gsm8k", "gsm8k"),
    ("arc_challenge", "arc_challenge"),
    ("arc_challenge", "arc_challenge:mistralai/mixtral-8x7b-chat"),
    ("mbpp", "mbpp"),
    ("mbpp", "mbpp:mistralai/mixtral-8x7b-chat"),
    ("winogrande", "winogrande"),
    ("winogrande", "winogrande:mistralai/mixtral-8x7b-chat"),
    ("bfcl", "bfcl"),
    ("alpacaeval", "alpacaeval"),
)
"""(source, data spec) of every pair judged and trained on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    """One row of one pair: the turn and both models' quality.

    Attributes:
        id: The row id within its source.
        source: The source (``mmlu``, ``bfcl``, ...).
        pair: ``source`` plus the pair (``arc_challenge:mistralai/mixtral-8x7b-chat``).
        group: MMLU subject (else the source).
        turn: The request.
        strong: Quality of the frontier model's answer, in [0, 1].
        weak: Quality of the fast model's answer, in [0, 1].
    """

    id: str
    source: str
    pair: str
    group: str
    turn: Turn
    strong: float
    weak: float


def load_examples(
    data_dir: str | Path, *, pairs: Sequence[tuple[str, str]] = SOURCE_PAIRS
) -> list[Example]:
    """Read every pair's rows from the shared data folder.

    Raises:
        DatasetError: When a source is missing.
    """
    out: list[Example] = []
    for source, spec in pairs:
        dataset = load_data(spec, data_dir=data_dir)
        fast, frontier = dataset.fast_model, dataset.frontier_model
        assert fast and frontier
        for row in dataset.rows:
            subject = row.turn.metadata.get("subject")
            out.append(
                Example(
                    id=row.id,
                    source=source,
                    pair=spec,
                    group=str(subject) if subject else source,
                    turn=row.turn,
                    strong=float(row.outcomes[frontier].quality),
                    weak=float(row.outcomes[fast].quality),
                )
            )
    return out


def sample_rows(data_dir: str | os.PathLike[str]) -> frozenset[tuple[str, str]]:
    """``(source, row id)`` of every evaluation row drawn for the sample.

    That is the bundled sample's rows and the BFCL rows drawn with them, which the package
    does not ship (``tiered_router/evaluation/_sample.py``).
    """
    from tiered_router.evaluation._sample import drawn_ids

    return drawn_ids(Path(data_dir))


def features_of(turn: Turn) -> tuple[int, tuple[float, ...]]:
    """Block index and feature values (in :data:`FEATURES` order) of a turn."""
    block, overlap, overlap_max = _choice_features(focus_text(turn))
    return block, (math.log1p(request_chars(turn)), overlap, overlap_max)


def _fit_block(
    xs: list[tuple[float, ...]],
    labels: list[float],
    pairs: list[str],
    *,
    l2: float,
    min_length_weight: float,
) -> tuple[float, dict[str, float]]:
    n = len(xs)
    k = len(FEATURES)
    names = sorted(set(pairs))
    pair_index = [names.index(p) for p in pairs]
    counts = [pair_index.count(j) for j in range(len(names))]
    weights = [n / (len(names) * counts[j]) for j in pair_index]
    total = math.fsum(weights)
    means = [math.fsum(x[j] for x in xs) / n for j in range(k)]
    scales = []
    for j in range(k):
        var = math.fsum((x[j] - means[j]) ** 2 for x in xs) / n
        scales.append(math.sqrt(var) if var > 1e-18 else 0.0)
    live = [j for j in range(k) if scales[j] > 0.0]
    cols = [[(x[j] - means[j]) / scales[j] for x in xs] if scales[j] else [] for j in range(k)]
    m = len(names)

    def f_and_grad(theta: list[float]) -> tuple[float, list[float]]:
        offsets, w = theta[:m], theta[m:]
        z = [offsets[pair_index[i]] for i in range(n)]
        for j in live:
            c = w[j]
            z = [zi + c * v for zi, v in zip(z, cols[j], strict=True)]
        loss = math.fsum(
            s * (_log1pexp(zi) - y * zi) for s, zi, y in zip(weights, z, labels, strict=True)
        )
        err = [s * (sigmoid(zi) - y) / total for s, zi, y in zip(weights, z, labels, strict=True)]
        grad = [0.0] * (m + k)
        for i, e in enumerate(err):
            grad[pair_index[i]] += e
        for j in live:
            grad[m + j] = math.fsum(e * v for e, v in zip(err, cols[j], strict=True)) + l2 * w[j]
        return loss / total + 0.5 * l2 * math.fsum(w[j] * w[j] for j in live), grad

    theta = minimise(f_and_grad, [0.0] * (m + k))
    bias = math.fsum(theta[:m]) / m
    out: dict[str, float] = {}
    for j in live:
        weight = theta[m + j] / scales[j]
        if FEATURES[j] == "length" and weight < min_length_weight:
            weight = min_length_weight
        bias -= weight * means[j]
        out[FEATURES[j]] = weight
    return bias, out


def fit_transfer(
    examples: Sequence[Example], *, l2: float = 0.01, min_length_weight: float = 0.05
) -> TransferModel:
    """Train transfer-scorer weights on pooled examples (module docstring).

    Args:
        examples: Training rows, any mix of sources and pairs.
        l2: L2 strength on the standardised features (the offsets are not penalised).
        min_length_weight: Floor of the ``length`` weight (per unit of ``ln(1 + chars)``):
            the prior that a longer request is not easier. Pooled sources disagree on the
            sign (longer AlpacaEval and Winogrande prompts are slightly easier for the fast
            model, longer MMLU, GSM8K and BFCL prompts harder); without the floor a block
            fitted mostly on the former ranks the latter backwards.

    Returns:
        The weights; a block without rows gets bias 0 and no weights.
    """
    per_block: dict[int, tuple[list[tuple[float, ...]], list[float], list[str]]] = {
        0: ([], [], []),
        1: ([], [], []),
    }
    for ex in examples:
        block, x = features_of(ex.turn)
        xs, ys, ps = per_block[block]
        xs.append(x)
        ys.append(min(1.0, max(0.0, (ex.strong - ex.weak + 1.0) / 2.0)))
        ps.append(ex.pair)
    blocks: dict[str, tuple[float, MappingProxyType[str, float]]] = {}
    rows: dict[str, int] = {}
    for index, name in enumerate(TRANSFER_BLOCKS):
        xs, ys, ps = per_block[index]
        rows[name] = len(xs)
        if len(xs) < 10:
            blocks[name] = (0.0, MappingProxyType({}))
            continue
        bias, weights = _fit_block(xs, ys, ps, l2=l2, min_length_weight=min_length_weight)
        blocks[name] = (bias, MappingProxyType(weights))
    meta = {
        "examples": len(examples),
        "rows_per_block": rows,
        "pairs": sorted({ex.pair for ex in examples}),
        "l2": l2,
        "min_length_weight": min_length_weight,
        "label": "(q_strong - q_weak + 1) / 2, offsets per (source, pair), pairs weigh equal",
    }
    return TransferModel(blocks=MappingProxyType(blocks), meta=MappingProxyType(meta))


def main(argv: list[str] | None = None) -> int:
    """Train on every source of the shared data folder and write the weights file."""
    parser = argparse.ArgumentParser(description="Train the transfer scorer's weights.")
    parser.add_argument("data_dir", type=Path, help="the shared data folder")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "data" / "transfer_default.json",
    )
    parser.add_argument("--l2", type=float, default=0.01)
    parser.add_argument(
        "--include-sample",
        action="store_true",
        help="also train on the rows of the bundled sample (left out by default, so that "
        "`tiered-router eval` never scores rows the shipped weights were fitted on)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    examples = load_examples(args.data_dir)
    if not args.include_sample:
        skip = sample_rows(args.data_dir)
        examples = [e for e in examples if (e.source, e.id) not in skip]
    model = fit_transfer(examples, l2=args.l2)
    model.save(args.out)
    rows = model.meta["rows_per_block"]
    sys.stdout.write(
        f"trained on {len(examples)} rows (choice: {rows['choice']}, open: {rows['open']}), "
        f"{time.perf_counter() - started:.1f} s -> {args.out}\n"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover - the training command
    sys.exit(main())
