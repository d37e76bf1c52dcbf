"""Router benchmark on the shared data: APGR / CPT on RouteLLM, cascade numbers on BFCL.

    cd /work/main && PYTHONPATH=. python benchmarks/bench_routers.py [--data-dir DIR] [--json]

Part 1 (RouteLLM MMLU and GSM8K, Mixtral-8x7B -> GPT-4-Turbo): APGR, CPT(50%), CPT(80%) of
plain score-threshold routers -- the bundled default policy's scorer (the transfer scorer,
whose weights were trained on these development rows: in-sample, see
``benchmarks/bench_scorer_quality.py`` for held-out figures), the heuristic scorer, a random
router (mean over 20 seeds), the prompt-length router and the oracle -- and of the bundled
default policy run through the router (rules, gate, escalation) over the same rows.

Part 2 (BFCL v1, gpt-4o-mini -> gpt-4o and gpt-3.5-turbo -> gpt-4-turbo, function-calling
mode): a cascade policy (every turn drafted on the fast tier, gate = json_schema +
tool_arguments + non_empty, escalate on failure) and the default policy's scorer and threshold:
accuracy as % of the strong model's, cost as % of the strong model's, the gate's catch
rate of wrong calls and its false-alarm rate on right calls.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from tiered_router.evaluation import evaluate, find_data_dir, load_data
from tiered_router.evaluation.calibration import load_policy_offline
from tiered_router.evaluation.metrics import apgr, cpt, oracle_curve, threshold_curve
from tiered_router.evaluation.runner import Replay, score_rows
from tiered_router.evaluation.sources import bundled_policy_path
from tiered_router.policy import load_policy
from tiered_router.scoring import HeuristicScorer
from tiered_router.turn import message_text

SEEDS = 20

CASCADE_POLICY = """
version: 1
backends:
  fast: {type: replay, model: fast, kind: diffusion}
  frontier: {type: replay, model: frontier}
tiers: {fast: fast, frontier: frontier}
scoring: {type: SCORER, threshold: THRESHOLD}
gate: {checks: [non_empty, json_schema, tool_arguments, tool_call_in_text, redundant_tool_calls,
                argument_grounding, requested_tools]}  # requested_tools: single-response tool use
escalation: {on_gate_failure: true, on_backend_error: true}
"""

BFCL_PAIRS = [
    ("gpt-4o-mini-2024-07-18-FC", "gpt-4o-2024-08-06-FC"),
    ("gpt-3.5-turbo-0125-FC", "gpt-4-turbo-2024-04-09-FC"),
]


def _metrics(points: list[Any], q_weak: float, q_strong: float) -> dict[str, float | None]:
    return {
        "apgr": apgr(points, q_weak=q_weak, q_strong=q_strong),
        "cpt50": cpt(points, 0.5, q_weak=q_weak, q_strong=q_strong),
        "cpt80": cpt(points, 0.8, q_weak=q_weak, q_strong=q_strong),
    }


def routellm_part(data_dir: Path) -> list[dict[str, Any]]:
    policy = load_policy_offline(bundled_policy_path())
    out = []
    for name in ("mmlu", "gsm8k"):
        dataset = load_data(name, data_dir=data_dir)
        replay = Replay.bind(policy, dataset)
        weak = [r.outcomes[replay.fast_model].quality for r in dataset.rows]
        strong = [r.outcomes[replay.frontier_model].quality for r in dataset.rows]
        q_weak, q_strong = sum(weak) / len(weak), sum(strong) / len(strong)
        default_scores = score_rows(replay)
        kind = policy.scoring.type
        trained = kind in ("transfer", "learned")
        mark = " (in-sample: trained on these rows)" if trained else ""
        heuristic = [HeuristicScorer().score(r.turn).value for r in dataset.rows]
        length = [float(sum(len(message_text(m)) for m in r.turn.messages)) for r in dataset.rows]
        rows = {
            f"default policy's scorer, {kind}{mark}": _metrics(
                threshold_curve(default_scores, weak, strong), q_weak, q_strong
            ),
            "heuristic scorer": _metrics(
                threshold_curve(heuristic, weak, strong), q_weak, q_strong
            ),
            "prompt length": _metrics(threshold_curve(length, weak, strong), q_weak, q_strong),
        }
        runs = []
        for seed in range(SEEDS):
            rng = random.Random(seed)
            scores = [rng.random() for _ in weak]
            runs.append(_metrics(threshold_curve(scores, weak, strong), q_weak, q_strong))
        rows["random (mean of 20 seeds)"] = {
            k: _mean([r[k] for r in runs]) for k in ("apgr", "cpt50", "cpt80")
        }
        rows["oracle"] = _metrics(oracle_curve(weak, strong, steps=1000), q_weak, q_strong)
        result = evaluate(policy, dataset)
        s = result.summary
        rows[f"default policy (router run, gate){mark}"] = {
            "apgr": s.apgr,
            "cpt50": s.cpt50,
            "cpt80": s.cpt80,
        }
        for router, m in rows.items():
            out.append(
                {
                    "data": name,
                    "n": len(dataset),
                    "router": router,
                    **m,
                    "q_weak": q_weak,
                    "q_strong": q_strong,
                }
            )
    return out


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if len(got) == len(values) else None


def bfcl_part(data_dir: Path) -> list[dict[str, Any]]:
    out = []
    default = load_policy_offline(bundled_policy_path()).scoring
    default_threshold = default.threshold
    for fast, frontier in BFCL_PAIRS:
        dataset = load_data(f"bfcl:{fast}->{frontier}", data_dir=data_dir)
        for label, threshold in (
            ("cascade (all drafted fast)", 1.0),
            (f"{default.type} threshold {default_threshold:g}", default_threshold),
        ):
            text = CASCADE_POLICY.replace("THRESHOLD", str(threshold))
            policy = load_policy(text.replace("SCORER", default.type))
            s = evaluate(policy, dataset).summary
            g = s.gate
            out.append(
                {
                    "pair": f"{fast} -> {frontier}",
                    "policy": label,
                    "n": s.n,
                    "accuracy": s.quality,
                    "strong_accuracy": s.q_strong,
                    "pct_of_strong_accuracy": s.quality / s.q_strong,
                    "pct_of_strong_cost": s.cost / s.cost_frontier,
                    "frontier_calls": s.frontier_call_share,
                    "catch_rate": g.p_fail_given_wrong,
                    "false_alarm_rate": g.p_fail_given_right,
                    "p_wrong_given_pass": g.p_wrong_given_pass,
                    "apgr": s.apgr,
                    "cpt50": s.cpt50,
                    "apgr_oracle": s.apgr_oracle,
                }
            )
    return out


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or find_data_dir()
    if data_dir is None:
        print("skipped: the shared data folder was not found (set TIERED_ROUTER_DATA_DIR)")
        return 0
    started = time.perf_counter()
    routellm = routellm_part(data_dir)
    bfcl = bfcl_part(data_dir)
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps({"routellm": routellm, "bfcl": bfcl, "seconds": elapsed}, indent=2))
        return 0
    print("| data | router | APGR | CPT(50%) | CPT(80%) |")
    print("| --- | --- | --- | --- | --- |")
    for r in routellm:
        print(
            f"| {r['data']} (n={r['n']}) | {r['router']} | {_f(r['apgr'])} | "
            f"{_pct(r['cpt50'])} | {_pct(r['cpt80'])} |"
        )
    print()
    print(
        "| pair | policy | % of strong accuracy | % of strong cost | frontier calls | "
        "gate catch rate (wrong calls) | gate false alarms (right calls) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in bfcl:
        print(
            f"| {r['pair']} (n={r['n']}) | {r['policy']} | {_pct(r['pct_of_strong_accuracy'])} | "
            f"{_pct(r['pct_of_strong_cost'])} | {_pct(r['frontier_calls'])} | "
            f"{_pct(r['catch_rate'])} | {_pct(r['false_alarm_rate'])} |"
        )
    print()
    print("| pair | APGR, default scorer's policy sweep (random 0.5) | CPT(50%) | APGR oracle |")
    print("| --- | --- | --- | --- |")
    for r in bfcl[::2]:
        print(f"| {r['pair']} | {_f(r['apgr'])} | {_pct(r['cpt50'])} | {_f(r['apgr_oracle'])} |")
    print(f"\n({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
