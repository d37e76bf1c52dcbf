"""Scorer quality on RouteLLM MMLU and GSM8K, held out: heuristic vs learned vs baselines.

    cd /work/main && PYTHONPATH=. python benchmarks/bench_scorer_quality.py [--json]
        [--data-dir DIR] [--folds 7] [--seed 0] [--target gain] [--l2 0.01]
        [--hash-buckets 0] [--word-pairs]

Protocol (no row is scored by a model that trained on it):

- MMLU: group k-fold by subject. The 49 subjects of the development data are shuffled
  (``random.Random(seed)``) and dealt round-robin into ``--folds`` groups (7 by default:
  about 7 subjects per fold, like the 8 subjects of the held-out part).
- GSM8K: the rows are shuffled the same way and split in two halves.
- Fold by fold, the learned scorer is trained (``fit_model`` with the command's settings,
  the shipped defaults unless changed) on every development row outside the fold (both
  benchmarks) and scores the fold's rows.

Reported per benchmark and router (plain score-threshold routers, Mixtral-8x7B-Instruct ->
GPT-4-1106-preview, decontaminated rows; metric code from ``tiered_router.evaluation``):

- ``APGR held-out``: APGR within each fold (one model ranks the fold's rows, as the
  independent check does on its held-out subjects), averaged over folds weighted by rows,
  with the lowest and highest fold (over all repeats);
- ``APGR pooled``: APGR of all out-of-fold scores ranked together;
- ``CPT(50%)``: within each fold, averaged like APGR;
- with ``--repeats R`` every figure is the mean over R fold assignments (seeds);
- ``AUC``: pooled out-of-fold ROC AUC of the score for "the frontier model is right and
  the fast model wrong" (the rows where routing up pays).

The same per-fold computation is applied to the untrained routers (heuristic, prompt
length, random with 20 seeds, oracle). The shipped weights scored on their own training
rows are shown last, marked in-sample (optimistic; not a held-out figure).

``--latency`` instead times one ``score(turn)`` call of each scorer on every 20th row (CPU
time of this thread, the fastest of 5 calls per turn): ``cold`` with the text-analysis
caches cleared before each call (a request never seen), ``warm`` right after (an agent
re-sending its conversation); medians and 90th percentiles in microseconds.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tiered_router.evaluation import find_data_dir, load_data
from tiered_router.evaluation.metrics import apgr, cpt, oracle_curve, threshold_curve
from tiered_router.scoring import HeuristicScorer, LearnedScorer
from tiered_router.scoring.learned import fit_model
from tiered_router.turn import Turn, message_text

SEEDS = 20


class Rows:
    """Decontaminated rows of one benchmark with both outcomes and a fold label."""

    def __init__(
        self, name: str, turns: list[Turn], strong: list[float], weak: list[float], folds: list[int]
    ) -> None:
        self.name = name
        self.turns = turns
        self.strong = strong
        self.weak = weak
        self.folds = folds


def load(data_dir: Path, *, n_folds: int, seed: int) -> list[Rows]:
    out = []
    for name in ("mmlu", "gsm8k"):
        dataset = load_data(name, data_dir=data_dir)
        fast, frontier = dataset.fast_model, dataset.frontier_model
        assert fast and frontier
        turns = [r.turn for r in dataset.rows]
        strong = [r.outcomes[frontier].quality for r in dataset.rows]
        weak = [r.outcomes[fast].quality for r in dataset.rows]
        if name == "mmlu":
            subjects = sorted({str(t.metadata["subject"]) for t in turns})
            random.Random(seed).shuffle(subjects)
            group = {s: i % n_folds for i, s in enumerate(subjects)}
            folds = [group[str(t.metadata["subject"])] for t in turns]
        else:
            order = list(range(len(turns)))
            random.Random(seed).shuffle(order)
            half = set(order[: len(order) // 2])
            folds = [0 if i in half else 1 for i in range(len(turns))]
        out.append(Rows(name, turns, strong, weak, folds))
    return out


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """ROC AUC with ties counted half (Mann-Whitney U)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    n_pos = sum(positive)
    n_neg = len(positive) - n_pos
    rank_sum = sum(r for r, p in zip(ranks, positive, strict=True) if p)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _subset(values: Sequence[float], idx: Sequence[int]) -> list[float]:
    return [values[i] for i in idx]


def metrics(rows: Rows, scores: Sequence[float]) -> dict[str, Any]:
    per_fold = []
    for f in sorted(set(rows.folds)):
        idx = [i for i, g in enumerate(rows.folds) if g == f]
        w, s = _subset(rows.weak, idx), _subset(rows.strong, idx)
        q_w, q_s = sum(w) / len(w), sum(s) / len(s)
        curve = threshold_curve(_subset(scores, idx), w, s)
        per_fold.append(
            (
                len(idx),
                apgr(curve, q_weak=q_w, q_strong=q_s),
                cpt(curve, 0.5, q_weak=q_w, q_strong=q_s),
            )
        )
    n = sum(k for k, _, _ in per_fold)
    q_w, q_s = sum(rows.weak) / len(rows.weak), sum(rows.strong) / len(rows.strong)
    pooled = threshold_curve(scores, rows.weak, rows.strong)
    cpts = [c for _, _, c in per_fold]
    return {
        "apgr_heldout": sum(k * a for k, a, _ in per_fold) / n,
        "apgr_fold_min": min(a for _, a, _ in per_fold),
        "apgr_fold_max": max(a for _, a, _ in per_fold),
        "apgr_pooled": apgr(pooled, q_weak=q_w, q_strong=q_s),
        "cpt50": (None if None in cpts else sum(k * (c or 0.0) for k, _, c in per_fold) / n),
        "auc": auc(scores, [s > w for s, w in zip(rows.strong, rows.weak, strict=True)]),
    }


def out_of_fold(
    benchmarks: list[Rows], train: Callable[[list[Turn], list[float], list[float]], LearnedScorer]
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for rows in benchmarks:
        scores = [0.0] * len(rows.turns)
        for f in sorted(set(rows.folds)):
            turns: list[Turn] = []
            strong: list[float] = []
            weak: list[float] = []
            for other in benchmarks:
                for i, g in enumerate(other.folds):
                    if other is rows and g == f:
                        continue
                    turns.append(other.turns[i])
                    strong.append(other.strong[i])
                    weak.append(other.weak[i])
            scorer = train(turns, strong, weak)
            for i, g in enumerate(rows.folds):
                if g == f:
                    scores[i] = scorer.score(rows.turns[i]).value
        out[rows.name] = scores
    return out


def _mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, float):
            got = [r[key] for r in rows]
            if None in got:
                out[key] = None
            elif key == "apgr_fold_min":
                out[key] = min(got)
            elif key == "apgr_fold_max":
                out[key] = max(got)
            else:
                out[key] = sum(got) / len(got)
    return out


def run(data_dir: Path, args: argparse.Namespace, *, seed: int) -> list[dict[str, Any]]:
    benchmarks = load(data_dir, n_folds=args.folds, seed=seed)

    def train(turns: list[Turn], strong: list[float], weak: list[float]) -> LearnedScorer:
        model = fit_model(
            turns,
            strong=strong,
            weak=weak,
            target=args.target,
            l2=args.l2,
            hash_buckets=args.hash_buckets,
            word_pairs=args.word_pairs,
        )
        return LearnedScorer(model)

    learned = out_of_fold(benchmarks, train)
    heuristic = HeuristicScorer()
    shipped = LearnedScorer.default()
    results = []
    for rows in benchmarks:
        length = [float(sum(len(message_text(m)) for m in t.messages)) for t in rows.turns]
        routers: dict[str, dict[str, Any]] = {
            "learned (held-out folds)": metrics(rows, learned[rows.name]),
            "heuristic": metrics(rows, [heuristic.score(t).value for t in rows.turns]),
            "prompt length": metrics(rows, length),
        }
        runs = []
        for seed in range(SEEDS):
            rng = random.Random(seed)
            runs.append(metrics(rows, [rng.random() for _ in rows.turns]))
        routers[f"random (mean of {SEEDS} seeds)"] = {
            key: sum(r[key] for r in runs) / SEEDS for key in runs[0]
        }
        q_w = sum(rows.weak) / len(rows.weak)
        q_s = sum(rows.strong) / len(rows.strong)
        oracle = oracle_curve(rows.weak, rows.strong, steps=1000)
        routers["oracle"] = {
            "apgr_pooled": apgr(oracle, q_weak=q_w, q_strong=q_s),
            "cpt50": cpt(oracle, 0.5, q_weak=q_w, q_strong=q_s),
        }
        routers["shipped weights, in-sample (optimistic)"] = metrics(
            rows, [shipped.score(t).value for t in rows.turns]
        )
        for router, m in routers.items():
            results.append({"data": rows.name, "n": len(rows.turns), "router": router, **m})
    return results


def latency(data_dir: Path) -> list[dict[str, Any]]:
    from tiered_router.scoring import _text
    from tiered_router.scoring.learned import _features

    def clear() -> None:
        _text.text_signals.cache_clear()
        _features._structure.cache_clear()
        _features.hashed_words.cache_clear()

    turns = [t for rows in load(data_dir, n_folds=7, seed=0) for t in rows.turns[::20]]
    out = []
    for name, scorer in (("heuristic", HeuristicScorer()), ("learned", LearnedScorer.default())):
        cold: list[float] = []
        warm: list[float] = []
        for t in turns:
            best_cold = best_warm = float("inf")
            for _ in range(5):
                clear()
                started = time.thread_time_ns()
                scorer.score(t)
                best_cold = min(best_cold, time.thread_time_ns() - started)
                started = time.thread_time_ns()
                scorer.score(t)
                best_warm = min(best_warm, time.thread_time_ns() - started)
            cold.append(best_cold / 1000)
            warm.append(best_warm / 1000)
        cold.sort()
        warm.sort()
        out.append(
            {
                "scorer": name,
                "turns": len(turns),
                "cold_median_us": cold[len(cold) // 2],
                "cold_p90_us": cold[int(0.9 * len(cold))],
                "warm_median_us": warm[len(warm) // 2],
                "warm_p90_us": warm[int(0.9 * len(warm))],
            }
        )
    return out


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--folds", type=int, default=7, help="MMLU subject groups")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=1, help="fold assignments (seeds seed, seed+1, ...)"
    )
    parser.add_argument("--target", default="gain")
    parser.add_argument("--l2", type=float, default=0.01)
    parser.add_argument("--hash-buckets", type=int, default=0)
    parser.add_argument("--word-pairs", action="store_true")
    parser.add_argument("--latency", action="store_true", help="time score() instead")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or find_data_dir()
    if data_dir is None:
        print("skipped: the shared data folder was not found (set TIERED_ROUTER_DATA_DIR)")
        return 0
    if args.latency:
        timings = latency(data_dir)
        if args.json:
            print(json.dumps(timings, indent=2))
            return 0
        print("| scorer | turns | cold median | cold p90 | warm median | warm p90 |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in timings:
            print(
                f"| {r['scorer']} | {r['turns']} | {r['cold_median_us']:.1f} us | "
                f"{r['cold_p90_us']:.1f} us | {r['warm_median_us']:.1f} us | "
                f"{r['warm_p90_us']:.1f} us |"
            )
        return 0
    started = time.perf_counter()
    repeats = [run(data_dir, args, seed=args.seed + r) for r in range(args.repeats)]
    results = [_mean_row([rep[i] for rep in repeats]) for i in range(len(repeats[0]))]
    elapsed = time.perf_counter() - started
    if args.json:
        print(
            json.dumps(
                {"results": results, "seconds": elapsed, "settings": vars(args)},
                indent=2,
                default=str,
            )
        )
        return 0
    print("| data | router | APGR held-out (fold min-max) | APGR pooled | CPT(50%) | AUC |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        spread = (
            f" ({r['apgr_fold_min']:.3f}-{r['apgr_fold_max']:.3f})" if "apgr_fold_min" in r else ""
        )
        print(
            f"| {r['data']} (n={r['n']}) | {r['router']} | {_f(r.get('apgr_heldout'))}{spread} | "
            f"{_f(r.get('apgr_pooled'))} | {_pct(r.get('cpt50'))} | {_f(r.get('auc'))} |"
        )
    print(f"\n({elapsed:.0f} s; settings: {vars(args)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
