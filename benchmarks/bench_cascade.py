"""BFCL cascade for every model pair: % of strong accuracy against % of strong cost.

    PYTHONPATH=. python benchmarks/bench_cascade.py [--part report|tune|all] [--json]

For every pair of models with recorded answers and list prices in
``../shared/data/bfcl_v1_results`` (the cheaper model on the whole set drafts, the dearer
one is the strong model), every turn is drafted on the fast tier and the gate sends a
failing draft to the strong tier: the router's own replay (``tiered_router.evaluation``),
the same code path as ``tiered-router eval``. Two gates are run:

- ``default``: the gate a policy gets without a ``gate:`` section;
- ``single-response``: the default plus ``requested_tools`` and ``enumerated_targets``,
  the two checks that assume one response makes every call (true of BFCL, not of
  step-by-step agents).

A model that writes its calls as text is assumed to be served through a backend that
returns them as calls (the gate reads them the same way): answers BFCL failed only because
they sat in a Markdown fence are judged as calls by ``tiered_router/evaluation/_bfcl_judge.py``.

Figures are on the ``report`` half of the rows by default (the gate's checks were
developed on the other half; see ``bench_gate_quality.py``). A pair meets the target when
it keeps >= 97 % of the strong model's accuracy at <= 40 % of its cost; pairs that miss are
listed as missing, with the reason.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench_gate_quality import part  # same split as the gate-quality benchmark

from tiered_router.evaluation import evaluate, find_data_dir
from tiered_router.evaluation._bfcl_judge import load_questions, rejudge_text_calls
from tiered_router.evaluation.dataset import Dataset
from tiered_router.evaluation.sources import load_bfcl
from tiered_router.policy import GateConfig, load_policy

POLICY = """
version: 1
backends:
  fast: {type: replay, model: fast, kind: diffusion}
  frontier: {type: replay, model: frontier}
tiers: {fast: fast, frontier: frontier}
scoring: {type: heuristic, threshold: 1.0}
gate: {checks: CHECKS}
escalation: {on_gate_failure: true, on_backend_error: true}
"""
GATES = {
    "default": list(GateConfig().checks),
    "single-response": [*GateConfig().checks, "requested_tools", "enumerated_targets"],
}
TARGET_ACCURACY, TARGET_COST = 0.97, 0.40


def _pairs(dataset: Dataset) -> list[tuple[str, str]]:
    cost = {
        m: sum(r.outcomes[m].cost or 0.0 for r in dataset.rows if m in r.outcomes)
        for m in dataset.models
        if m in dataset.prices
    }
    ordered = sorted(cost, key=lambda m: cost[m])
    return list(itertools.combinations(ordered, 2))


def run(data_dir: Path, which: str) -> list[dict[str, Any]]:
    """Return one record per (pair, gate)."""
    full, _ = rejudge_text_calls(load_bfcl(data_dir), load_questions(data_dir))
    rows = tuple(r for r in full.rows if which == "all" or part(r.id) == which)
    dataset = dataclasses.replace(full, rows=rows)
    out = []
    for fast, strong in _pairs(full):
        pair = dataset.with_pair(fast, strong)
        for label, checks in GATES.items():
            policy = load_policy(POLICY.replace("CHECKS", json.dumps(checks)))
            s = evaluate(policy, pair).summary
            acc = s.quality / s.q_strong if s.q_strong else None
            cost = s.cost / s.cost_frontier if s.cost_frontier else None
            fast_only = s.q_weak / s.q_strong if s.q_strong else None
            fast_cost = sum(r.outcomes[fast].cost or 0.0 for r in pair.rows)
            floor = fast_cost / s.cost_frontier if s.cost_frontier else None
            met = acc is not None and cost is not None
            met = met and acc >= TARGET_ACCURACY and cost <= TARGET_COST  # type: ignore[operator]
            out.append(
                {
                    "fast": fast,
                    "strong": strong,
                    "gate": label,
                    "n": s.n,
                    "pct_of_strong_accuracy": acc,
                    "pct_of_strong_cost": cost,
                    "fast_alone_pct_of_strong_accuracy": fast_only,
                    "fast_alone_pct_of_strong_cost": floor,
                    "frontier_calls": s.frontier_call_share,
                    "catch_rate": s.gate.p_fail_given_wrong,
                    "false_alarm_rate": s.gate.p_fail_given_right,
                    "met": bool(met),
                }
            )
    return out


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def _why(r: dict[str, Any]) -> str:
    reasons = []
    if (r["pct_of_strong_accuracy"] or 0) < TARGET_ACCURACY:
        reasons.append("accuracy")
    if (r["pct_of_strong_cost"] or 1) > TARGET_COST:
        floor = r["fast_alone_pct_of_strong_cost"]
        unreachable = floor is not None and floor > TARGET_COST
        reasons.append(
            "cost (out of reach: the fast model alone costs more)" if unreachable else "cost"
        )
    return "met" if r["met"] else "MISSING: " + " and ".join(reasons)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--part", default="report", choices=["report", "tune", "tune2", "all"])
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args(argv)
    data_dir = opts.data_dir or find_data_dir()
    if data_dir is None or not (Path(data_dir) / "bfcl_v1_results").is_dir():
        print("skipped: the shared data folder was not found (set TIERED_ROUTER_DATA_DIR)")
        return 0
    started = time.perf_counter()
    records = run(Path(data_dir), opts.part)
    if opts.json:
        print(json.dumps(records, indent=1))
        return 0
    print(f"BFCL cascade, {opts.part} rows; target >= 97 % of strong accuracy at <= 40 % cost")
    print(
        "| fast -> strong | gate | n | % of strong accuracy | % of strong cost | "
        "fast alone: accuracy, cost | frontier calls | catch | false alarms | target |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in records:
        print(
            f"| {r['fast']} -> {r['strong']} | {r['gate']} | {r['n']} | "
            f"{_pct(r['pct_of_strong_accuracy'])} | {_pct(r['pct_of_strong_cost'])} | "
            f"{_pct(r['fast_alone_pct_of_strong_accuracy'])}, "
            f"{_pct(r['fast_alone_pct_of_strong_cost'])} | {_pct(r['frontier_calls'])} | "
            f"{_pct(r['catch_rate'])} | {_pct(r['false_alarm_rate'])} | {_why(r)} |"
        )
    for label in GATES:
        got = [r for r in records if r["gate"] == label]
        reachable = [r for r in got if (r["fast_alone_pct_of_strong_cost"] or 0) <= TARGET_COST]
        print(
            f"{label} gate: {sum(r['met'] for r in got)} of {len(got)} pairs meet the target; "
            f"{sum(r['met'] for r in reachable)} of the {len(reachable)} pairs whose fast "
            "model alone costs <= 40 % of the strong one"
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
