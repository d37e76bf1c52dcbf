"""The result of evaluating a policy on recorded outcomes: headline metrics and the sweep.

``evaluate(policy, dataset)`` runs the policy (see :mod:`~tiered_router.evaluation.runner`),
sweeps the threshold (see :mod:`~tiered_router.evaluation.sweep`) and returns an
:class:`EvalResult`. The headline metrics at the policy's threshold come from the real
router runs; the APGR / CPT figures and the curves come from the sweep.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_router.evaluation.baselines import Baseline, baselines
from tiered_router.evaluation.dataset import Dataset, DatasetError
from tiered_router.evaluation.metrics import (
    CurvePoint,
    GateConfusion,
    apgr,
    cpt,
    gate_confusion,
    oracle_curve,
    percentile,
    random_curve,
)
from tiered_router.evaluation.panel import (
    PanelStats,
    apply_panel,
    merge_stats,
    panel_specs,
    recorded_drafts,
    single_draft,
)
from tiered_router.evaluation.runner import PriceSource, Replay, run_rows
from tiered_router.evaluation.sweep import PathOutcome, RowRun, SweepPoint, sweep
from tiered_router.policy._schema import Policy

if TYPE_CHECKING:
    from tiered_router.scoring.deferral import DeferralModel

__all__ = ["EvalResult", "Summary", "evaluate", "summarize"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Headline metrics of a policy at its threshold.

    Shares are fractions in [0, 1]; costs are US dollars; latencies are simulated seconds.
    ``*_frontier`` fields are the all-frontier baseline (every turn sent to the frontier
    tier); ``q_weak`` / ``q_strong`` are the mean labels of the fast / frontier model alone.
    """

    n: int
    threshold: float
    quality: float
    quality_frontier: float
    quality_retained: float | None
    q_weak: float
    q_strong: float
    cost: float
    cost_frontier: float
    cost_saved: float | None
    latency_mean_s: float
    latency_p95_s: float
    latency_frontier_mean_s: float
    latency_frontier_p95_s: float
    tasks: int
    task_latency_mean_s: float | None
    task_latency_p95_s: float | None
    task_latency_frontier_mean_s: float | None
    fast_share: float
    routed_fast_share: float
    frontier_call_share: float
    escalations: int
    escalation_rate: float
    escalation_reasons: dict[str, int]
    failed_checks: dict[str, int]
    rules: dict[str, int]
    failures: int
    gate: GateConfusion
    apgr: float | None
    cpt50: float | None
    cpt80: float | None
    apgr_oracle: float | None
    apgr_random: float | None = 0.5

    def to_dict(self) -> dict[str, Any]:
        """Return the metrics, JSON-ready."""
        out = asdict(self)
        out["gate"] = self.gate.to_dict()
        return out


@dataclass(frozen=True, kw_only=True)
class EvalResult:
    """Everything ``tiered-router eval`` reports.

    Attributes:
        dataset: Name of the data.
        fast_model: Recorded model replayed by the fast tier.
        frontier_model: Recorded model replayed by the frontier tier.
        summary: Headline metrics at the policy's threshold.
        points: The threshold sweep, by threshold.
        oracle: The oracle router's curve (by strong-call share).
        random: The random router's expected curve.
        rows: Per-row runs.
        notes: Caveats of the data and the simulation.
        baselines: Random and prompt-length routers at the policy's frontier share
            (:mod:`~tiered_router.evaluation.baselines`); with a draft panel, also at its cost.
        panel: How the policy's draft panel decided (``None`` without ``drafts:``).

    """

    dataset: str
    fast_model: str
    frontier_model: str
    summary: Summary
    points: tuple[SweepPoint, ...]
    oracle: tuple[CurvePoint, ...]
    random: tuple[CurvePoint, ...]
    rows: tuple[RowRun, ...] = field(repr=False)
    notes: tuple[str, ...] = ()
    baselines: tuple[Baseline, ...] = ()
    panel: PanelStats | None = None

    def to_dict(self, *, include_rows: bool = False) -> dict[str, Any]:
        """Return the result, JSON-ready (per-row runs only when asked)."""
        out: dict[str, Any] = {
            "dataset": self.dataset,
            "fast_model": self.fast_model,
            "frontier_model": self.frontier_model,
            "summary": self.summary.to_dict(),
            "sweep": [
                {
                    "threshold": p.threshold,
                    "quality": p.quality,
                    "cost": p.cost,
                    "latency_mean_s": p.latency_s,
                    "fast_share": p.fast_share,
                    "strong_share": p.strong_share,
                    "escalation_rate": p.escalation_rate,
                }
                for p in self.points
            ],
            "oracle": [asdict(p) for p in self.oracle],
            "random": [asdict(p) for p in self.random],
            "notes": list(self.notes),
            "baselines": [asdict(b) for b in self.baselines],
            "panel": self.panel.to_dict() if self.panel is not None else None,
        }
        if include_rows:
            out["rows"] = [asdict(r) for r in self.rows]
        return out


def _p95(values: Sequence[float]) -> float:
    return percentile(values, 95) if values else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _task_latencies(runs: Sequence[RowRun], pick: Callable[[RowRun], PathOutcome]) -> list[float]:
    totals: dict[str, float] = defaultdict(float)
    for r in runs:
        if r.task_id is not None:
            totals[r.task_id] += pick(r).latency_s
    return list(totals.values())


def summarize(runs: Sequence[RowRun], points: Sequence[SweepPoint], threshold: float) -> Summary:
    """Compute the headline metrics from the per-row runs and the sweep.

    Raises:
        ValueError: When ``runs`` is empty.

    """
    if not runs:
        raise ValueError("summarize: no rows")
    n = len(runs)
    head = [r.headline for r in runs]
    front = [r.frontier for r in runs]
    quality = _mean([p.quality for p in head])
    q_frontier = _mean([p.quality for p in front])
    cost = sum(p.cost for p in head)
    cost_frontier = sum(p.cost for p in front)
    q_weak = _mean([r.fast_label for r in runs])
    q_strong = _mean([r.frontier_label for r in runs])
    routed_fast = sum(r.decided == "fast" for r in runs)
    escalated = sum(r.decided == "fast" and r.headline.escalated for r in runs)
    reasons: Counter[str] = Counter(e for p in head for e in p.escalations)
    checks: Counter[str] = Counter(c for p in head for c in p.failed_checks)
    tasks = _task_latencies(runs, lambda r: r.headline)
    tasks_frontier = _task_latencies(runs, lambda r: r.frontier)
    curve = [p.curve_point() for p in points]
    gap = q_strong > q_weak  # PGR needs a gap to recover
    oracle = oracle_curve([r.fast_label for r in runs], [r.frontier_label for r in runs])
    return Summary(
        n=n,
        threshold=threshold,
        quality=quality,
        quality_frontier=q_frontier,
        quality_retained=quality / q_frontier if q_frontier else None,
        q_weak=q_weak,
        q_strong=q_strong,
        cost=cost,
        cost_frontier=cost_frontier,
        cost_saved=1 - cost / cost_frontier if cost_frontier else None,
        latency_mean_s=_mean([p.latency_s for p in head]),
        latency_p95_s=_p95([p.latency_s for p in head]),
        latency_frontier_mean_s=_mean([p.latency_s for p in front]),
        latency_frontier_p95_s=_p95([p.latency_s for p in front]),
        tasks=len(tasks),
        task_latency_mean_s=_mean(tasks) if tasks else None,
        task_latency_p95_s=_p95(tasks) if tasks else None,
        task_latency_frontier_mean_s=_mean(tasks_frontier) if tasks_frontier else None,
        fast_share=sum(p.tier == "fast" for p in head) / n,
        routed_fast_share=routed_fast / n,
        frontier_call_share=sum(p.frontier_called for p in head) / n,
        escalations=escalated,
        escalation_rate=escalated / routed_fast if routed_fast else 0.0,
        escalation_reasons=dict(reasons.most_common()),
        failed_checks=dict(checks.most_common()),
        rules=dict(Counter(r.rule for r in runs if r.rule is not None).most_common()),
        failures=sum(p.error is not None for p in head),
        gate=gate_confusion(
            (r.fast_verdict, r.fast_label) for r in runs if r.fast_verdict is not None
        ),
        apgr=apgr(curve, q_weak=q_weak, q_strong=q_strong) if gap else None,
        cpt50=cpt(curve, 0.5, q_weak=q_weak, q_strong=q_strong) if gap else None,
        cpt80=cpt(curve, 0.8, q_weak=q_weak, q_strong=q_strong) if gap else None,
        apgr_oracle=apgr(oracle, q_weak=q_weak, q_strong=q_strong) if gap else None,
        apgr_random=0.5 if gap else None,
    )


def _deferral_model(policy: Policy) -> DeferralModel | None:
    """The policy's ``drafts.deferral`` model, loaded (``None`` without one)."""
    if policy.drafts is None or policy.drafts.deferral is None:
        return None
    from tiered_router.scoring import load_deferral

    return load_deferral(policy.drafts.deferral.path)


def evaluate(
    policy: Policy,
    dataset: Dataset,
    *,
    fast_model: str | None = None,
    frontier_model: str | None = None,
    prices: PriceSource = "data",
    recorded_latency: bool = True,
    progress: Callable[[int], None] | None = None,
) -> EvalResult:
    """Run ``policy`` over ``dataset`` and compute every metric.

    Args:
        policy: The routing policy (its tier backends are replaced by replay backends).
        dataset: Recorded outcomes.
        fast_model: Recorded model for the fast tier (default: the dataset's pair, else the
            policy backend's ``model``).
        frontier_model: Recorded model for the frontier tier (same defaults).
        prices: ``data`` or ``policy`` (see :class:`~tiered_router.evaluation.runner.Replay`).
        recorded_latency: Prefer recorded latencies over the latency models.
        progress: Called with 1 after each row.

    Raises:
        DatasetError: When a tier's model has no outcomes in the data.

    """
    replay = Replay.bind(
        single_draft(policy),  # a drafts: panel is replayed from the recorded drafts below
        dataset,
        fast_model=fast_model,
        frontier_model=frontier_model,
        prices=prices,
        recorded_latency=recorded_latency,
    )
    runs = run_rows(replay, progress=progress)
    single = runs  # one fast draft and the gate: what the baselines route with
    stats = None
    panel_note = None
    try:
        specs = panel_specs(policy, dataset, replay.fast_model)
    except DatasetError as exc:  # the data has no drafts for this panel: say so, replay one
        specs, panel_note = [], f"the drafts: panel is not replayed ({exc})"
    unreplayable = [s for s in specs if len(set(s.models)) == 1 and recorded_drafts(dataset, s) < 2]
    if unreplayable:
        panel_note = (
            f"the drafts: panel is not replayed: {dataset.name} records no samples of "
            f"{unreplayable[0].models[0]} (a panel needs several drafts per turn); the "
            "panel's figures on data with several drafts per turn: docs/panels.md "
            "(benchmarks/bench_verify.py prints them from ../shared/data)"
        )
        specs = [s for s in specs if s not in unreplayable]
    deferral = _deferral_model(policy) if specs else None
    deferred = 0
    for spec in specs:
        runs, one = apply_panel(replay, runs, spec)
        stats = one if stats is None else merge_stats(stats, one)
        if deferral is not None:
            from tiered_router.evaluation.deferral import replay_deferral

            runs, n = replay_deferral(policy, replay, runs, spec, model=deferral)
            deferred += n
    points = sweep(runs)
    summary = summarize(runs, points, policy.scoring.threshold)
    weak_costs = [r.fast_only_cost for r in runs]
    strong_costs = [r.frontier.cost for r in runs]
    oracle = oracle_curve(
        [r.fast_label for r in runs],
        [r.frontier_label for r in runs],
        weak_cost=weak_costs,
        strong_cost=strong_costs,
    )
    notes = list(dataset.notes)
    latency_note = "latency: simulated"
    if recorded_latency and any(
        o.latency_s is not None for row in dataset.rows for o in row.outcomes.values()
    ):
        latency_note += " (recorded latencies where the data has them, else the latency models)"
    else:
        latency_note += " from the policy backends' latency models (ttft + tokens / throughput)"
    notes.append(latency_note)
    if panel_note is not None:
        notes.append(panel_note)
    if stats is not None:
        notes.append(
            f"draft panel: k={stats.k} drafts of {', '.join(dict.fromkeys(stats.models))}, "
            f"min_agreement {stats.min_agreement:g}; every draft's cost is counted; the "
            "baselines route with one fast draft and the gate"
            + (
                f"; {stats.missing_drafts} rows had fewer than k drafts recorded (the missing "
                "ones count as failed)"
                if stats.missing_drafts
                else ""
            )
        )
    if deferral is not None:
        notes.append(
            f"drafts.deferral replayed: {deferred} accepted panel answers deferred to the "
            "frontier (each one's drafts and frontier call counted)"
        )
    if policy.hedge is not None:
        notes.append(
            "hedge: not replayed (a recorded outcome has one latency, not a race); "
            "benchmarks/bench_task.py measures hedging on simulated time"
        )
    if summary.apgr is None:
        notes.append(
            "APGR / CPT not defined: the frontier model is not better than the fast model here"
        )
    return EvalResult(
        dataset=dataset.name,
        fast_model=replay.fast_model,
        frontier_model=replay.frontier_model,
        summary=summary,
        points=tuple(points),
        oracle=tuple(oracle),
        random=tuple(
            random_curve(
                summary.q_weak,
                summary.q_strong,
                cost_weak=sum(weak_costs),
                cost_strong=sum(strong_costs),
            )
        ),
        rows=tuple(runs),
        notes=tuple(notes),
        baselines=baselines(
            single,
            [row.turn.prompt_chars for row in dataset.rows],
            frontier_share=summary.frontier_call_share,
            cost=summary.cost if stats is not None else None,
        ),
        panel=stats,
    )
