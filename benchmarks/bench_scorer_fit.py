"""The learned scorer fitted on each source's own rows (what ``fit-scorer`` does), cross-validated.

    cd /work/main && PYTHONPATH=. python benchmarks/bench_scorer_fit.py [--json]
        [--data-dir DIR] [--folds 5] [--bootstrap 200] [--seed 0] [--no-curve]
        [--hash-buckets 0] [--l2 0.01]

``bench_scorer_quality.py`` asks what a scorer trained on *other* sources does on a new
one; this asks what a deployment gets by fitting the learned scorer on its *own* labelled
traffic, as ``tiered-router fit-scorer`` does. Protocol, per (source, model pair) of
``tiered_router.scoring._transfer_fit.SOURCE_PAIRS``:

- **In-source cross-validation.** The pair's rows are dealt into ``--folds`` folds
  (``tiered_router.evaluation.scorer_fit.fold_of``, seeded); each row is scored by a
  learned model (``fit_model``, the shipped settings) fitted on the other folds of the same
  pair only (``cross_validated_scores``). No row is scored by a model that saw it.
- ``mmlu (subjects held out)``: MMLU's rows dealt by subject instead (all of a subject in
  one fold): the fitted model has never seen the subjects it scores, as when a
  deployment's traffic moves to new topics.
- Compared on the same rows: prompt length, random (mean of 20 seeds) and ``transfer
  (other sources)``, the default scorer fitted on every other source
  (``bench_scorer_quality.held_out_scores``): what you get without fitting.
- APGR of a score-threshold router, 95 % percentile bootstrap intervals over rows
  (``--bootstrap`` resamples) and the paired interval of ``fitted - prompt length``.

``--hash-buckets`` and ``--l2`` change the fit's settings (``fit_model``'s; the defaults are
the shipped ones, which ``fit-scorer`` uses). The learning curve (``--no-curve`` skips it)
refits each fold's model on at most N rows of the other folds (a seeded random subset): how
many labelled turns a deployment needs.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from bench_scorer_quality import (
    _interval,
    _random_scores,
    apgr_of,
    held_out_scores,
    resampled_apgr,
)

from tiered_router.evaluation import find_data_dir
from tiered_router.evaluation.scorer_fit import cross_validated_scores, fold_of
from tiered_router.scoring._transfer_fit import Example, load_examples

CURVE = (100, 250, 500, 1000, 2000)
SEEDS = 20


def _sets(examples: list[Example]) -> dict[str, tuple[list[Example], list[str]]]:
    """Each evaluated set: its rows and each row's fold group."""
    out: dict[str, tuple[list[Example], list[str]]] = {}
    for pair in dict.fromkeys(e.pair for e in examples):
        rows = [e for e in examples if e.pair == pair]
        out[pair] = (rows, [f"{e.source}:{e.id}" for e in rows])
        if pair == "mmlu":
            out["mmlu (subjects held out)"] = (rows, [e.group for e in rows])
    return out


def run(
    examples: list[Example],
    *,
    folds: int,
    bootstrap: int,
    seed: int,
    curve: bool,
    fit: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One result row per evaluated set."""
    transfer = held_out_scores(examples, groups=1, seed=seed, use_learned=False)["transfer"]
    results = []
    for name, (rows, groups) in _sets(examples).items():
        turns = [e.turn for e in rows]
        weak = [e.weak for e in rows]
        strong = [e.strong for e in rows]
        fold = fold_of(groups, folds=folds, seed=seed)
        routers = {
            "fitted": cross_validated_scores(
                turns, strong=strong, weak=weak, fold=fold, seed=seed, **(fit or {})
            ),
            "prompt length": [float(t.prompt_chars) for t in turns],
            "transfer (other sources)": transfer[rows[0].pair],
        }
        n = len(rows)
        rng = random.Random(seed)
        samples = [[rng.randrange(n) for _ in range(n)] for _ in range(bootstrap)]
        row: dict[str, Any] = {"data": name, "n": n}
        boots = {}
        for router, scores in routers.items():
            row[router] = apgr_of(scores, weak, strong)
            boots[router] = resampled_apgr(scores, weak, strong, samples)
            row[f"{router} ci"] = _interval(boots[router])
        row["fitted - length"] = row["fitted"] - row["prompt length"]
        row["fitted - length ci"] = _interval(
            [a - b for a, b in zip(boots["fitted"], boots["prompt length"], strict=True)]
        )
        runs = [apgr_of(_random_scores(len(rows), s), weak, strong) for s in range(SEEDS)]
        row["random"] = sum(runs) / SEEDS
        if curve:
            train_size = n - n // folds
            for size in CURVE:
                if size >= train_size:
                    break
                scores = cross_validated_scores(
                    turns,
                    strong=strong,
                    weak=weak,
                    fold=fold,
                    train_rows=size,
                    seed=seed,
                    **(fit or {}),
                )
                row[f"fitted on {size}"] = apgr_of(scores, weak, strong)
        results.append(row)
        print(f"done: {name}", file=sys.stderr, flush=True)
    return results


def _f(x: float) -> str:
    return "n/a" if x != x else f"{x:.3f}"


def _ci(row: dict[str, Any], key: str) -> str:
    low, high = row[f"{key} ci"]
    return f"{_f(row[key])} [{_f(low)}, {_f(high)}]"


def print_markdown(results: list[dict[str, Any]], curve: bool) -> None:
    """The tables of docs/scoring.md."""
    print(
        "| rows (n) | fitted on the source, out of fold | prompt length | transfer (other "
        "sources) | random | fitted - length |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['data']} ({r['n']}) | {_ci(r, 'fitted')} | {_ci(r, 'prompt length')} | "
            f"{_ci(r, 'transfer (other sources)')} | {_f(r['random'])} | "
            f"{_ci(r, 'fitted - length')} |"
        )
    pairs = [r for r in results if r["data"] != "mmlu (subjects held out)"]
    defined = [r for r in pairs if not math.isnan(r["fitted"])]
    print(f"\nmean over the {len(defined)} pairs with APGR defined:")
    for key in ("fitted", "prompt length", "transfer (other sources)", "random"):
        print(f"  {key}: {sum(r[key] for r in defined) / len(defined):.3f}")
    beats = [r["data"] for r in defined if r["fitted - length ci"][0] > 0]
    print(f"  fitted above prompt length (paired interval > 0): {len(beats)} of {len(defined)}")
    below = [r["data"] for r in defined if r["fitted"] < r["random"]]
    print(f"  fitted below random: {', '.join(below) or 'none'}")
    if not curve:
        return
    sizes = [s for s in CURVE if any(f"fitted on {s}" in r for r in results)]
    print("\n| rows (n) | " + " | ".join(f"fitted on {s}" for s in sizes) + " | all folds |")
    print("| --- " * (len(sizes) + 2) + "|")
    for r in results:
        cells = [_f(r[f"fitted on {s}"]) if f"fitted on {s}" in r else "" for s in sizes]
        print(f"| {r['data']} ({r['n']}) | " + " | ".join(cells) + f" | {_f(r['fitted'])} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-curve", action="store_true")
    parser.add_argument("--hash-buckets", type=int, default=0)
    parser.add_argument("--l2", type=float, default=0.01)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args(argv)
    data_dir = opts.data_dir or find_data_dir()
    if data_dir is None:
        print("skipped: no shared data folder (../shared/data)")
        return 0
    examples = load_examples(Path(data_dir))
    results = run(
        examples,
        folds=opts.folds,
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        curve=not opts.no_curve,
        fit={"hash_buckets": opts.hash_buckets, "l2": opts.l2},
    )
    if opts.json:
        print(json.dumps(results, indent=1))
    else:
        print_markdown(results, curve=not opts.no_curve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
