"""Task-level benchmark: BFCL rows chained into multi-step agent tasks, replayed through a Router.

Each task is ``--steps`` consecutive BFCL v1 rows of one category (one request after the
other, the conversation growing with every step's tool calls and tool results). Every step
is routed by a real :class:`~tiered_router.Router` (scorer, rules, gate, escalation, task
context) whose two backends replay what the recorded models answered on that row
(``tiered_router.evaluation``'s replay backend), on a simulated clock that advances by each
call's recorded latency and by ``--tool-s`` per tool round. Quality is BFCL's own
correctness label of the answer the router returned.

Configurations compared, on the same tasks:

- ``frontier only`` and ``fast only + gate`` (the two ends);
- ``per-turn``: the policy without a task context (each turn routed on its own);
- ``task-aware``: the same policy inside ``router.task()`` (lock to frontier after gate
  failures, stall detection);
- ``task-aware + budget``: the same with a per-task latency budget (``--budget-s``, default
  75 % of the frontier-only mean task latency);
- ``panel``: every turn drafted fast by a panel (``drafts:``) of ``--panel`` models, one
  draft each, sent at once; the majority answer (``min_agreement`` 0.67: 2 of 3) is accepted
  and gated, a disagreement escalates (``drafts_disagree``);
- ``per-turn + hedge`` and ``panel + hedge``: the same with ``hedge:`` (the frontier call
  starts at once when the score is within ``--hedge-band`` of the threshold, else after the
  fast backend's measured 95th latency percentile).

Every configuration runs on the async path on simulated time (``virtual_time.py``: calls in
flight together take the time of the slowest, a cancelled call stops when cancelled), so
concurrent drafts and hedges are timed as they would overlap on the wire. Panel members
replay what each recorded model answered on the row, all with the fast tier's latency model.

Run (from the repository root, with ../shared/data present)::

    PYTHONPATH=. python benchmarks/bench_task.py
    PYTHONPATH=. python benchmarks/bench_task.py --fast-latency diffusion   # Mercury-like speed

Prints a table and, with ``--json FILE``, writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from virtual_time import AsyncReplay, VirtualTimeLoop

from tiered_router import Router, Turn
from tiered_router.evaluation.dataset import Dataset, EvalRow
from tiered_router.evaluation.replay import ReplayBackend
from tiered_router.evaluation.sources import load_bfcl
from tiered_router.policy import LatencyModel, Price, ScoringConfig
from tiered_router.scoring import build_scorer

SYSTEM = "You are an agent with tools. Call the right tool with the right arguments."
DIFFUSION = LatencyModel(ttft_s=0.3, tokens_per_s=1000.0)


@dataclass
class Config:
    name: str
    rules: list[dict[str, Any]]
    task: bool = False
    budget_s: float | None = None
    drafts: dict[str, Any] | None = None
    hedge: dict[str, Any] | None = None


@dataclass
class TaskRun:
    latency_s: float
    cost: float
    correct: list[float]
    fast: int
    escalations: int
    gate_failures: int
    drafts: int = 0
    hedges: int = 0
    cancelled_input_cost: float = 0.0
    rules: Counter[str] = field(default_factory=Counter)


def chain(
    dataset: Dataset, steps: int, limit: int | None, models: Sequence[str] = ()
) -> list[list[EvalRow]]:
    by_category: dict[str, list[EvalRow]] = defaultdict(list)
    for row in dataset.rows:
        if any(m not in row.outcomes for m in models):
            continue
        by_category[str(row.turn.metadata.get("category", ""))].append(row)
    tasks: list[list[EvalRow]] = []
    for category in sorted(by_category):
        rows = sorted(by_category[category], key=lambda r: _id_key(r.id))
        for i in range(0, len(rows) - steps + 1, steps):
            tasks.append(rows[i : i + steps])
    return tasks[:limit] if limit else tasks


def _id_key(row_id: str) -> tuple[str, int]:
    head, _, tail = row_id.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (row_id, 0)


def tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"status": "ok"})}
        for c in message.get("tool_calls") or []
    ]


def step_turn(history: list[dict[str, Any]], row: EvalRow) -> Turn:
    return Turn(
        [*history, *row.turn.messages],
        tools=row.turn.tools,
        id=row.id,
        metadata={"category": row.turn.metadata.get("category")},
    )


def calibrate(tasks: list[list[EvalRow]], frontier: str, quantile: float) -> float:
    """The score quantile over every step's turn (history from the frontier's answers)."""
    scorer = build_scorer(ScoringConfig())
    scores: list[float] = []
    for rows in tasks:
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for row in rows:
            turn = step_turn(history, row)
            scores.append(scorer.score(turn).value)
            answer = row.outcomes[frontier].completion(model=frontier, backend="frontier")
            message = answer.to_message()
            history += [*row.turn.messages, message, *tool_results(message)]
    scores.sort()
    return scores[min(len(scores) - 1, int(quantile * len(scores)))]


def fit_latency(dataset: Dataset, model: str) -> LatencyModel:
    """Least-squares fit of ``latency = ttft_s + output_tokens / tokens_per_s`` to the records."""
    points = [
        (o.usage.output_tokens, o.latency_s)
        for row in dataset.rows
        if (o := row.outcomes.get(model)) is not None
        and o.usage is not None
        and o.latency_s is not None
    ]
    if len(points) < 2:
        return LatencyModel()
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    var = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0
    if slope <= 0:
        return LatencyModel(ttft_s=max(my, 0.0), tokens_per_s=10_000.0)
    return LatencyModel(ttft_s=max(my - slope * mx, 0.0), tokens_per_s=1.0 / slope)


def _latency(model: LatencyModel) -> dict[str, float]:
    return {"ttft_s": round(model.ttft_s, 4), "tokens_per_s": round(model.tokens_per_s, 2)}


def policy(
    dataset: Dataset,
    fast: str,
    frontier: str,
    threshold: float,
    config: Config,
    latency: dict[str, LatencyModel],
    panel: Sequence[str] = (),
) -> dict[str, Any]:
    def price(model: str) -> dict[str, float]:
        p = dataset.prices.get(model) or Price()
        return {"input_per_mtok": p.input_per_mtok, "output_per_mtok": p.output_per_mtok}

    members = {
        f"panel{i}": {
            "model": model,
            "kind": "diffusion",
            "max_retries": 0,
            "price": price(model),
            "latency": _latency(latency["fast"]),
        }
        for i, model in enumerate(panel)
        if config.drafts is not None
    }
    extra: dict[str, Any] = {}
    if config.drafts is not None:
        extra["drafts"] = {**config.drafts, "backends": ["fast", *members]}
    if config.hedge is not None:
        extra["hedge"] = config.hedge
    return {
        **extra,
        "version": 1,
        "backends": {
            "fast": {
                "model": fast,
                "kind": "diffusion",
                "max_retries": 0,
                "price": price(fast),
                "latency": _latency(latency["fast"]),
            },
            "frontier": {
                "model": frontier,
                "max_retries": 0,
                "price": price(frontier),
                "latency": _latency(latency["frontier"]),
            },
            **members,
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"threshold": threshold},
        "rules": config.rules,
        "gate": {"checks": ["non_empty", "not_truncated", "no_refusal", "tool_arguments"]},
        "resilience": {"breaker": {"enabled": False}},
        "task": {"max_latency_s": config.budget_s},
    }


def run_config(
    dataset: Dataset,
    tasks: list[list[EvalRow]],
    config: Config,
    *,
    fast: str,
    frontier: str,
    threshold: float,
    tool_s: float,
    fast_latency: str,
    panel: Sequence[str] = (),
) -> list[TaskRun]:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(
            _arun_config(
                loop,
                dataset,
                tasks,
                config,
                fast=fast,
                frontier=frontier,
                threshold=threshold,
                tool_s=tool_s,
                fast_latency=fast_latency,
                panel=panel,
            )
        )
    finally:
        loop.close()


async def _arun_config(
    loop: asyncio.AbstractEventLoop,
    dataset: Dataset,
    tasks: list[list[EvalRow]],
    config: Config,
    *,
    fast: str,
    frontier: str,
    threshold: float,
    tool_s: float,
    fast_latency: str,
    panel: Sequence[str],
) -> list[TaskRun]:
    latency = {
        "fast": DIFFUSION if fast_latency == "diffusion" else fit_latency(dataset, fast),
        "frontier": fit_latency(dataset, frontier),
    }
    recorded = fast_latency == "recorded"
    model_of = {"fast": fast, "frontier": frontier}
    model_of.update({f"panel{i}": m for i, m in enumerate(panel) if config.drafts is not None})
    backends = {
        name: AsyncReplay(
            ReplayBackend(
                name,
                dataset,
                model=model,
                latency=latency["frontier" if name == "frontier" else "fast"],
                prefer_recorded=recorded or name == "frontier",
                kind="autoregressive" if name == "frontier" else "diffusion",
            )
        )
        for name, model in model_of.items()
    }
    router = Router(
        policy(dataset, fast, frontier, threshold, config, latency, panel),
        backends=backends,  # type: ignore[arg-type]
        clock=loop.time,
    )
    runs: list[TaskRun] = []
    for rows in tasks:
        start = loop.time()
        run = TaskRun(latency_s=0.0, cost=0.0, correct=[], fast=0, escalations=0, gate_failures=0)
        scope = router.task(rows[0].id) if config.task else contextlib.nullcontext()
        with scope:
            history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
            for row in rows:
                result = await router.acomplete(step_turn(history, row))
                trace = result.trace
                run.cost += trace.cost
                run.correct.append(row.outcomes[model_of[trace.backend or "frontier"]].quality)
                run.fast += result.tier == "fast"
                run.escalations += result.escalated
                run.gate_failures += sum(
                    1 for a in trace.attempts if a.verdict is not None and not a.verdict.passed
                )
                run.drafts += sum(1 for a in trace.attempts if a.role == "draft")
                run.hedges += sum(1 for a in trace.attempts if a.role == "hedge")
                run.cancelled_input_cost += sum(
                    _input_cost(dataset, row, model_of[a.backend])
                    for a in trace.attempts
                    if a.cancelled
                )
                if trace.decision.rule and trace.decision.rule.startswith("task."):
                    run.rules[trace.decision.rule] += 1
                message = result.completion.to_message()
                history += [*row.turn.messages, message, *tool_results(message)]
                if message.get("tool_calls"):
                    await asyncio.sleep(tool_s)
        run.latency_s = loop.time() - start
        runs.append(run)
    await router.aclose()
    return runs


def _input_cost(dataset: Dataset, row: EvalRow, model: str) -> float:
    """What a cancelled call would cost if its prompt were billed (its recorded input tokens)."""
    usage = row.outcomes[model].usage
    price = dataset.prices.get(model) or Price()
    return (usage.input_tokens if usage is not None else 0) * price.input_per_mtok / 1e6


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def summarise(name: str, runs: list[TaskRun], budget_s: float | None) -> dict[str, Any]:
    steps = sum(len(r.correct) for r in runs)
    rules: Counter[str] = Counter()
    for r in runs:
        rules.update(r.rules)
    out = {
        "config": name,
        "tasks": len(runs),
        "steps": steps,
        "task_latency_mean_s": statistics.fmean(r.latency_s for r in runs),
        "task_latency_p90_s": p90([r.latency_s for r in runs]),
        "task_cost_mean_usd": statistics.fmean(r.cost for r in runs),
        "step_quality": sum(sum(r.correct) for r in runs) / steps,
        "task_success": sum(all(c >= 1.0 for c in r.correct) for r in runs) / len(runs),
        "fast_share": sum(r.fast for r in runs) / steps,
        "escalations_per_task": sum(r.escalations for r in runs) / len(runs),
        "gate_failures_per_task": sum(r.gate_failures for r in runs) / len(runs),
        "drafts_per_task": sum(r.drafts for r in runs) / len(runs),
        "hedges_per_task": sum(r.hedges for r in runs) / len(runs),
        "cancelled_input_cost_per_task": sum(r.cancelled_input_cost for r in runs) / len(runs),
        "task_rules": dict(rules),
    }
    if budget_s is not None:
        out["within_budget"] = sum(r.latency_s <= budget_s for r in runs) / len(runs)
    return out


def table(rows: list[dict[str, Any]], budget_s: float) -> Iterator[str]:
    yield (
        f"{'config':<22} {'lat mean':>9} {'lat p90':>8} {'cost/task':>10} {'quality':>8} "
        f"{'success':>8} {'fast':>6} {'esc/task':>9} {f'<= {budget_s:.1f}s':>9} "
        f"{'drafts':>7} {'hedges':>7}"
    )
    for r in rows:
        inside = r.get("within_budget")
        yield (
            f"{r['config']:<22} {r['task_latency_mean_s']:>8.2f}s {r['task_latency_p90_s']:>7.2f}s "
            f"${r['task_cost_mean_usd']:>9.5f} {r['step_quality']:>8.3f} {r['task_success']:>8.3f} "
            f"{r['fast_share']:>6.2f} {r['escalations_per_task']:>9.2f} "
            f"{'' if inside is None else f'{inside:.2f}':>9} "
            f"{r['drafts_per_task']:>7.2f} {r['hedges_per_task']:>7.2f}"
        )
    fast = next(r for r in rows if r["config"] == "fast only + gate")
    frontier = next(r for r in rows if r["config"] == "frontier only")
    yield (f"{'config':<22} {'lat/fast':>8} {'q/frontier':>10} {'+cancelled in $':>15}")
    for r in rows:
        yield (
            f"{r['config']:<22} {r['task_latency_mean_s'] / fast['task_latency_mean_s']:>7.3f}x "
            f"{r['step_quality'] / frontier['step_quality']:>9.1%} "
            f"${r['cancelled_input_cost_per_task']:>14.5f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    parser.add_argument("--fast", default="gpt-4o-mini-2024-07-18-FC")
    parser.add_argument("--frontier", default="gpt-4o-2024-08-06-FC")
    parser.add_argument("--steps", type=int, default=5, help="BFCL rows per task")
    parser.add_argument("--tool-s", type=float, default=0.3, help="simulated tool time per round")
    parser.add_argument("--frontier-share", type=float, default=0.3, help="calibration target")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--fast-latency", choices=("recorded", "diffusion"), default="recorded")
    parser.add_argument("--limit", type=int, default=None, help="at most this many tasks")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument(
        "--panel",
        default="gpt-4o-mini-2024-07-18,gpt-3.5-turbo-0125-FC",
        help="recorded models drafting with --fast in the panel configurations (comma-separated)",
    )
    parser.add_argument("--min-agreement", type=float, default=0.67)
    parser.add_argument("--hedge-band", type=float, default=0.02)
    parser.add_argument("--hedge-percentile", type=float, default=95.0)
    args = parser.parse_args(argv)

    folder = Path(args.data)
    if not (folder / "bfcl_v1_results").is_dir():
        print(f"no BFCL data under {folder}; pass --data", file=sys.stderr)
        return 2
    panel = [m for m in args.panel.split(",") if m]
    dataset = load_bfcl(folder, models=[args.fast, args.frontier, *panel]).with_pair(
        args.fast, args.frontier
    )
    tasks = chain(dataset, args.steps, args.limit, panel)
    threshold = calibrate(tasks, args.frontier, 1.0 - args.frontier_share)
    common = dict(
        fast=args.fast,
        frontier=args.frontier,
        threshold=threshold,
        tool_s=args.tool_s,
        fast_latency=args.fast_latency,
        panel=panel,
    )
    everything_frontier = [{"name": "all-frontier", "when": {}, "tier": "frontier"}]
    everything_fast = [{"name": "all-fast", "when": {}, "tier": "fast"}]
    reference = run_config(dataset, tasks, Config("frontier only", everything_frontier), **common)
    budget = args.budget_s or round(0.75 * statistics.fmean(r.latency_s for r in reference), 2)
    configs = [
        Config("fast only + gate", everything_fast),
        Config("per-turn", []),
        Config("task-aware", [], task=True),
        Config("task-aware + budget", [], task=True, budget_s=budget),
    ]
    drafts = {"k": 1 + len(panel), "min_agreement": args.min_agreement, "when": ["all"]}
    hedge = {"band": args.hedge_band, "after_percentile": args.hedge_percentile}
    if panel:
        configs.append(Config("panel", everything_fast, drafts=drafts))
    configs.append(Config("per-turn + hedge", [], hedge=hedge))
    if panel:
        configs.append(Config("panel + hedge", everything_fast, drafts=drafts, hedge=hedge))
    results = [summarise("frontier only", reference, budget)]
    for config in configs:
        runs = run_config(dataset, tasks, config, **common)
        results.append(summarise(config.name, runs, budget))
    fitted = {m: fit_latency(dataset, m) for m in (args.fast, args.frontier)}
    print(
        f"BFCL v1 chained tasks: {len(tasks)} tasks x {args.steps} steps; fast={args.fast}, "
        f"panel={','.join([args.fast, *panel])}, "
        f"frontier={args.frontier}; threshold {threshold:.3f} (calibrated to "
        f"{args.frontier_share:.0%} frontier); tool time {args.tool_s}s/round; fast latency "
        f"{args.fast_latency}; latency budget {budget}s/task"
    )
    for m, lat in fitted.items():
        print(f"latency model fitted to {m}: ttft {lat.ttft_s:.3f}s, {lat.tokens_per_s:.0f} tok/s")
    for line in table(results, budget):
        print(line)
    for r in results:
        if r["task_rules"]:
            print(f"{r['config']}: task rules {r['task_rules']}")
    if args.json:
        meta = {"args": vars(args), "threshold": threshold, "budget_s": budget, "tasks": len(tasks)}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
