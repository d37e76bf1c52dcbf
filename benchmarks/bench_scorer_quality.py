"""Scorer quality on sources never trained on: leave-one-source-out over the shared data.

    cd /work/main && PYTHONPATH=. python benchmarks/bench_scorer_quality.py [--json]
        [--data-dir DIR] [--bootstrap 200] [--groups 7] [--seed 0] [--no-learned]
    cd /work/main && PYTHONPATH=. python benchmarks/bench_scorer_quality.py --latency

Protocol (no figure is computed on rows a model was fitted or tuned on):

- **Leave one source out.** The sources and pairs are those of
  ``tiered_router.scoring._transfer_fit.SOURCE_PAIRS`` (MMLU, GSM8K, ARC-Challenge x2,
  MBPP x2, Winogrande x2, BFCL, AlpacaEval). For each source, the trained scorers are
  fitted on every row of every *other* source (all their pairs pooled) and score the
  held-out source's rows: ``transfer`` (``fit_transfer``, the shipped settings) and
  ``learned`` (``fit_model``, target ``gain``, the shipped settings).
- **Leave a subject group out (MMLU).** MMLU's 49 subjects are shuffled
  (``random.Random(seed)``) and dealt into ``--groups`` groups; each group is scored by
  scorers fitted on every other source plus MMLU's other groups (the held-out part of the
  data has other subjects of the same source). The out-of-group scores are ranked together.
- Untrained routers on the same rows: ``heuristic`` (hand-set weights), ``prompt length``
  (characters of the messages), ``random`` (mean of 20 seeds).

Reported per source and pair: APGR (plain score-threshold router, metric code of
``tiered_router.evaluation.metrics``) with a 95 % percentile bootstrap interval over rows
(``--bootstrap`` resamples, seeded), and the paired bootstrap interval of
``transfer - prompt length``. The summary gives each router's mean over the pairs and the
targets of issue 8.

``--tool-signals`` instead prints, for each BFCL pair of the shared data, how many requests
fire each up-front signal of the transfer scorer and both models' accuracy on the requests
that fire it and on the others; then the cascade (every turn drafted fast, the bundled
default policy's gate, escalation on failure) without and with the signals: accuracy and
cost as % of the frontier model's, and the share of turns that called it.

``--latency`` times one ``score(turn)`` call of each scorer on every 20th row of every
source (CPU time of this thread, fastest of 5 calls per turn): ``cold`` with the text
caches cleared before each call, ``warm`` right after; median, p90 and p99 in microseconds.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered_router.evaluation import find_data_dir
from tiered_router.evaluation.scorer_fit import _apgr as apgr_of
from tiered_router.evaluation.scorer_fit import _interval
from tiered_router.evaluation.scorer_fit import _resampled as resampled_apgr
from tiered_router.scoring import HeuristicScorer, LearnedScorer
from tiered_router.scoring._transfer_fit import SOURCE_PAIRS, Example, fit_transfer, load_examples
from tiered_router.scoring.learned import fit_model
from tiered_router.scoring.transfer import UP_FRONT_SIGNALS, TransferScorer
from tiered_router.turn import Turn

SEEDS = 20
ScoreFn = Callable[[Turn], float]


def _trainers(use_learned: bool) -> dict[str, Callable[[list[Example]], ScoreFn]]:
    def transfer(train: list[Example]) -> ScoreFn:
        scorer = TransferScorer(fit_transfer(train))
        return lambda t: scorer.score(t).value

    def learned(train: list[Example]) -> ScoreFn:
        model = fit_model(
            [e.turn for e in train], strong=[e.strong for e in train], weak=[e.weak for e in train]
        )
        scorer = LearnedScorer(model)
        return lambda t: scorer.score(t).value

    def transfer_up_front(train: list[Example]) -> ScoreFn:
        scorer = TransferScorer(fit_transfer(train), up_front=UP_FRONT_SIGNALS)
        return lambda t: scorer.score(t).value

    out = {"transfer": transfer, "transfer + up-front": transfer_up_front}
    if use_learned:
        out["learned"] = learned
    return out


def held_out_scores(
    examples: list[Example], *, groups: int, seed: int, use_learned: bool
) -> dict[str, dict[str, list[float]]]:
    """Scores of each trained scorer on each pair's rows, by a model that never saw them.

    Returns ``{scorer: {fold key: scores}}`` where the fold keys are the pairs (leave one
    source out) and ``mmlu (subject groups)``.
    """
    trainers = _trainers(use_learned)
    out: dict[str, dict[str, list[float]]] = {name: {} for name in trainers}
    for source in dict.fromkeys(e.source for e in examples):
        train = [e for e in examples if e.source != source]
        test = [e for e in examples if e.source == source]
        for name, trainer in trainers.items():
            score = trainer(train)
            for pair in dict.fromkeys(e.pair for e in test):
                out[name][pair] = [score(e.turn) for e in test if e.pair == pair]
    mmlu = [e for e in examples if e.source == "mmlu"]
    if mmlu and groups > 1:
        subjects = sorted({e.group for e in mmlu})
        random.Random(seed).shuffle(subjects)
        group_of = {s: i % groups for i, s in enumerate(subjects)}
        for name, trainer in trainers.items():
            scores = [0.0] * len(mmlu)
            for g in range(groups):
                train = [e for e in examples if e.source != "mmlu" or group_of[e.group] != g]
                score = trainer(train)
                for i, e in enumerate(mmlu):
                    if group_of[e.group] == g:
                        scores[i] = score(e.turn)
            out[name]["mmlu (subject groups)"] = scores
    return out


def _random_scores(n: int, seed: int) -> list[float]:
    """A random router's scores: one seeded generator for all ``n`` rows."""
    rng = random.Random(seed)
    return [rng.random() for _ in range(n)]


def evaluate(
    examples: list[Example], held: dict[str, dict[str, list[float]]], *, bootstrap: int, seed: int
) -> list[dict[str, Any]]:
    """Per fold key and router: APGR, bootstrap interval; plus transfer - length."""
    heuristic = HeuristicScorer()
    keys = list(next(iter(held.values())))
    results = []
    for key in keys:
        pair = "mmlu" if key == "mmlu (subject groups)" else key
        rows = [e for e in examples if e.pair == pair]
        weak = [e.weak for e in rows]
        strong = [e.strong for e in rows]
        routers: dict[str, list[float]] = {name: scores[key] for name, scores in held.items()}
        routers["heuristic"] = [heuristic.score(e.turn).value for e in rows]
        routers["prompt length"] = [float(e.turn.prompt_chars) for e in rows]
        rng = random.Random(seed)
        n = len(rows)
        samples = [[rng.randrange(n) for _ in range(n)] for _ in range(bootstrap)]
        row: dict[str, Any] = {"data": key, "n": n, "q_weak": sum(weak) / n}
        row["q_strong"] = sum(strong) / n
        boots: dict[str, list[float]] = {}
        for name, scores in routers.items():
            row[name] = apgr_of(scores, weak, strong)
            boots[name] = resampled_apgr(scores, weak, strong, samples)
            row[f"{name} ci"] = _interval(boots[name])
        diffs = [a - b for a, b in zip(boots["transfer"], boots["prompt length"], strict=True)]
        row["transfer - length"] = row["transfer"] - row["prompt length"]
        row["transfer - length ci"] = _interval(diffs)
        runs = [apgr_of(_random_scores(len(rows), s), weak, strong) for s in range(SEEDS)]
        row["random"] = sum(runs) / SEEDS
        results.append(row)
    return results


def latency(examples: list[Example]) -> list[dict[str, Any]]:
    """Cold and warm ``score`` times of each scorer, microseconds."""
    from tiered_router.scoring import _text, transfer
    from tiered_router.scoring.learned import _features

    def clear() -> None:
        _text.text_signals.cache_clear()
        _features._structure.cache_clear()
        _features.hashed_words.cache_clear()
        transfer._choice_features.cache_clear()
        transfer._content_stems.cache_clear()

    turns = [e.turn for e in examples[::20]]
    out = []
    scorers = (
        ("transfer", TransferScorer.default()),
        ("heuristic", HeuristicScorer()),
        ("learned", LearnedScorer.default()),
    )
    for name, scorer in scorers:
        cold: list[float] = []
        warm: list[float] = []
        for t in turns:
            fresh = Turn(list(t.messages), tools=t.tools)  # prompt_chars is cached per Turn
            best_cold = best_warm = float("inf")
            for _ in range(5):
                clear()
                fresh = Turn(list(t.messages), tools=t.tools)
                started = time.thread_time_ns()
                scorer.score(fresh)
                best_cold = min(best_cold, time.thread_time_ns() - started)
                started = time.thread_time_ns()
                scorer.score(fresh)
                best_warm = min(best_warm, time.thread_time_ns() - started)
            cold.append(best_cold / 1000)
            warm.append(best_warm / 1000)
        cold.sort()
        warm.sort()

        def q(values: list[float], p: float) -> float:
            return values[min(len(values) - 1, int(p * len(values)))]

        out.append(
            {
                "scorer": name,
                "turns": len(turns),
                **{f"cold_p{int(p * 100)}_us": q(cold, p) for p in (0.5, 0.9, 0.99)},
                **{f"warm_p{int(p * 100)}_us": q(warm, p) for p in (0.5, 0.9, 0.99)},
            }
        )
    return out


TOOL_PAIRS = (
    ("gpt-4o-mini-2024-07-18-FC", "gpt-4o-2024-08-06-FC"),
    ("gpt-3.5-turbo-0125-FC", "gpt-4-turbo-2024-04-09-FC"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06"),
)
"""The BFCL pairs whose both models have recorded answers in the shared data."""


def tool_signals(data_dir: Path) -> list[dict[str, Any]]:
    """Fast and frontier accuracy on BFCL requests that fire each up-front signal, or not."""
    from tiered_router.evaluation.sources import load_bfcl
    from tiered_router.scoring.features import focus_text
    from tiered_router.scoring.transfer import several_targets, tool_fit

    dataset = load_bfcl(data_dir)
    fired = {
        row.id: {
            "several_targets": several_targets(focus_text(row.turn)) >= 2,
            "no_tool_fits": tool_fit(row.turn) == 0.0,
        }
        for row in dataset.rows
    }
    out = []
    for fast, frontier in TOOL_PAIRS:
        rows = [r for r in dataset.rows if fast in r.outcomes and frontier in r.outcomes]
        for signal in ("several_targets", "no_tool_fits"):
            for fires in (True, False):
                got = [r for r in rows if fired[r.id][signal] == fires]
                n = len(got)
                out.append(
                    {
                        "pair": f"{fast} -> {frontier}",
                        "signal": signal,
                        "fires": fires,
                        "n": n,
                        "fast_acc": sum(r.outcomes[fast].quality for r in got) / n if n else None,
                        "frontier_acc": (
                            sum(r.outcomes[frontier].quality for r in got) / n if n else None
                        ),
                    }
                )
    return out


CASCADE = """
version: 1
backends:
  fast: {type: replay, model: fast, kind: diffusion}
  frontier: {type: replay, model: frontier}
tiers: {fast: fast, frontier: frontier}
scoring: {type: transfer, threshold: 0.99, options: {up_front: UP_FRONT}}
gate: {checks: CHECKS}
escalation: {on_gate_failure: true, on_backend_error: true}
"""


def cascades(data_dir: Path) -> list[dict[str, Any]]:
    """The cascade per BFCL pair, with no, one or both up-front signals."""
    from tiered_router import load_policy
    from tiered_router.evaluation import evaluate, load_data
    from tiered_router.evaluation.calibration import load_policy_offline
    from tiered_router.evaluation.sources import bundled_policy_path

    checks = load_policy_offline(bundled_policy_path()).gate.checks
    names = [c if isinstance(c, str) else json.dumps(c) for c in checks]
    out = []
    for fast, frontier in TOOL_PAIRS:
        dataset = load_data(f"bfcl:{fast}->{frontier}", data_dir=data_dir)
        for signals in ([], ["several_targets"], ["several_targets", "no_tool_fits"]):
            text = CASCADE.replace("UP_FRONT", json.dumps(signals))
            policy = load_policy(text.replace("CHECKS", "[" + ", ".join(names) + "]"))
            s = evaluate(policy, dataset).summary
            out.append(
                {
                    "pair": f"{fast} -> {frontier}",
                    "up_front": ", ".join(signals) or "none",
                    "accuracy_pct_of_strong": s.quality / s.quality_frontier,
                    "cost_pct_of_strong": s.cost / s.cost_frontier if s.cost_frontier else None,
                    "frontier_calls": s.frontier_call_share,
                }
            )
    return out


def _cell(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None or value != value:
        return "n/a"
    lo, hi = row.get(f"{name} ci", (float("nan"), float("nan")))
    return f"{value:.3f} [{lo:.2f}, {hi:.2f}]" if lo == lo else f"{value:.3f}"


def _f3(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def print_table(results: list[dict[str, Any]], routers: list[str]) -> None:
    """Print the per-source table and the summary against the targets."""
    print("| held-out rows (n) | " + " | ".join(routers) + " | transfer - length |")
    print("| --- " * (len(routers) + 2) + "|")
    for r in results:
        cells = " | ".join(_cell(r, name) for name in routers)
        print(f"| {r['data']} ({r['n']}) | {cells} | {_cell(r, 'transfer - length')} |")
    loso = [
        r
        for r in results
        if r["data"] != "mmlu (subject groups)" and r["transfer"] == r["transfer"]
    ]
    print(f"\nmean over the {len(loso)} pairs held out by source (APGR defined):")
    means = {}
    for name in routers:
        vals = [r[name] for r in loso]
        means[name] = sum(vals) / len(vals)
        print(f"  {name}: {means[name]:.3f}")
    by_key = {r["data"]: r for r in results}
    checks = [
        ("MMLU (source held out) transfer >= 0.65", by_key["mmlu"]["transfer"] >= 0.65),
        ("GSM8K transfer >= 0.65", by_key["gsm8k"]["transfer"] >= 0.65),
        (
            "mean transfer >= mean prompt length + 0.05",
            means["transfer"] >= means["prompt length"] + 0.05,
        ),
        (
            "no pair below random (transfer)",
            all(r["transfer"] >= r["random"] for r in loso),
        ),
    ]
    if "mmlu (subject groups)" in by_key:
        value = by_key["mmlu (subject groups)"]["transfer"]
        checks.insert(1, ("MMLU (subject groups held out) transfer >= 0.65", value >= 0.65))
    for label, ok in checks:
        print(f"  target {label}: {'met' if ok else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--groups", type=int, default=7, help="MMLU subject groups")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-learned", action="store_true", help="skip the learned scorer")
    parser.add_argument("--latency", action="store_true", help="time score() instead")
    parser.add_argument("--tool-signals", action="store_true", help="up-front signals on BFCL")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or find_data_dir()
    if data_dir is None:
        print("skipped: the shared data folder was not found (set TIERED_ROUTER_DATA_DIR)")
        return 0
    if args.tool_signals:
        signals = tool_signals(data_dir)
        if args.json:
            print(json.dumps(signals, indent=2))
            return 0
        print("| pair | signal | fires | requests | fast accuracy | frontier accuracy |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in signals:
            print(
                f"| {r['pair']} | {r['signal']} | {'yes' if r['fires'] else 'no'} | {r['n']} | "
                f"{_f3(r['fast_acc'])} | {_f3(r['frontier_acc'])} |"
            )
        print(
            "\n| pair | up-front signals | % of strong accuracy | % of strong cost "
            "| frontier calls |"
        )
        print("| --- | --- | --- | --- | --- |")
        for r in cascades(data_dir):
            cost = r["cost_pct_of_strong"]
            print(
                f"| {r['pair']} | {r['up_front']} | {100 * r['accuracy_pct_of_strong']:.1f} % | "
                f"{'n/a' if cost is None else f'{100 * cost:.1f} %'} | "
                f"{100 * r['frontier_calls']:.1f} % |"
            )
        return 0
    started = time.perf_counter()
    examples = load_examples(data_dir, pairs=SOURCE_PAIRS)
    if args.latency:
        timings = latency(examples)
        if args.json:
            print(json.dumps(timings, indent=2))
            return 0
        print(
            "| scorer | turns | cold p50 | cold p90 | cold p99 | warm p50 | warm p90 | warm p99 |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in timings:
            cells = " | ".join(
                f"{r[f'{k}_p{p}_us']:.1f} us" for k in ("cold", "warm") for p in (50, 90, 99)
            )
            print(f"| {r['scorer']} | {r['turns']} | {cells} |")
        return 0
    held = held_out_scores(
        examples, groups=args.groups, seed=args.seed, use_learned=not args.no_learned
    )
    results = evaluate(examples, held, bootstrap=args.bootstrap, seed=args.seed)
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
    routers = list(held) + ["heuristic", "prompt length", "random"]
    print_table(results, routers)
    print(f"\n({elapsed:.0f} s; settings: {vars(args)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
