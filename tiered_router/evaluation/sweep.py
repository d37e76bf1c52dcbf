"""Per-row outcomes of both paths, the threshold sweep, and threshold calibration.

The router is not re-run per threshold. Each row is scored once and run once down each
path (see :mod:`tiered_router.evaluation.runner`): the *fast path* (fast draft, gate,
escalation when it fails) and the *frontier path*. A threshold ``t`` sends a row without a
matching rule down the fast path when ``score <= t`` (as the router does), so every
threshold's totals come from prefix sums over the rows sorted by score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tiered_router._types import Tier
from tiered_router.evaluation.metrics import CurvePoint

__all__ = [
    "CalibrationError",
    "PathOutcome",
    "RowRun",
    "SweepPoint",
    "calibrate",
    "sweep",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PathOutcome:
    """What happened to one row down one path (one real router run).

    Attributes:
        quality: Label of the returned answer (0 when the router returned none).
        cost: Cost of every attempt, US dollars.
        latency_s: Simulated latency of the whole turn, seconds.
        tier: The tier whose answer was returned; ``None`` when the router raised.
        frontier_called: Whether the frontier model was called (directly or by escalation).
        escalated: Whether a fast draft failed the gate or the fast backend failed.
        escalations: The trace's escalation reasons, in order.
        failed_checks: Gate checks the fast draft failed.
        error: ``AllTiersFailed`` / ``GateFailed`` and its message, when the router raised.

    """

    quality: float
    cost: float
    latency_s: float
    tier: Tier | None
    frontier_called: bool
    escalated: bool = False
    escalations: tuple[str, ...] = ()
    failed_checks: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RowRun:
    """One row, run through the policy.

    Attributes:
        row_id: The row's id.
        task_id: Its multi-step task, if any.
        score: The scorer's value.
        rule: The rule that decided (then the threshold does not matter), or ``None``.
        decided: The tier the policy decided at its own threshold.
        headline: The real run at the policy's threshold.
        fast: The row down the fast path (rules aside).
        frontier: The row down the frontier path (rules aside).
        fast_label: Quality label of the fast model's recorded answer.
        frontier_label: Quality label of the frontier model's recorded answer.
        fast_only_cost: Cost of the fast model's answer alone.
        fast_verdict: The gate's verdict on the fast model's answer (``None`` when the answer
            was not recorded).

    """

    row_id: str
    task_id: str | None
    score: float
    rule: str | None
    decided: Tier
    headline: PathOutcome
    fast: PathOutcome
    frontier: PathOutcome
    fast_label: float
    frontier_label: float
    fast_only_cost: float
    fast_verdict: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    """The policy's totals at one threshold.

    Attributes:
        threshold: The threshold (a score equal to it goes fast).
        n: Rows.
        routed_fast: Rows decided fast (by rule or threshold).
        answered_fast: Rows answered by the fast tier (not escalated).
        frontier_calls: Rows that called the frontier model.
        escalated: Rows escalated after a fast draft or fast backend failed.
        quality: Mean quality.
        cost: Total cost, US dollars.
        latency_s: Mean simulated latency per turn, seconds.

    """

    threshold: float
    n: int
    routed_fast: int
    answered_fast: int
    frontier_calls: int
    escalated: int
    quality: float
    cost: float
    latency_s: float

    @property
    def fast_share(self) -> float:
        """Share of turns answered by the fast tier."""
        return self.answered_fast / self.n

    @property
    def strong_share(self) -> float:
        """Share of turns that called the frontier model."""
        return self.frontier_calls / self.n

    @property
    def escalation_rate(self) -> float:
        """Escalated turns per turn decided fast (0 when none was)."""
        return self.escalated / self.routed_fast if self.routed_fast else 0.0

    def curve_point(self) -> CurvePoint:
        """Return the point as (strong-call share, quality, cost)."""
        return CurvePoint(strong_share=self.strong_share, quality=self.quality, cost=self.cost)


class _Acc:
    __slots__ = ("answered_fast", "cost", "escalated", "frontier", "latency", "quality", "routed")

    def __init__(self) -> None:
        self.quality = self.cost = self.latency = 0.0
        self.routed = self.answered_fast = self.frontier = self.escalated = 0

    def add(self, p: PathOutcome, *, routed_fast: bool, sign: int = 1) -> None:
        self.quality += sign * p.quality
        self.cost += sign * p.cost
        self.latency += sign * p.latency_s
        self.routed += sign * routed_fast
        self.answered_fast += sign * (p.tier == "fast")
        self.frontier += sign * p.frontier_called
        self.escalated += sign * (routed_fast and p.escalated)

    def point(self, threshold: float, n: int) -> SweepPoint:
        return SweepPoint(
            threshold=threshold,
            n=n,
            routed_fast=self.routed,
            answered_fast=self.answered_fast,
            frontier_calls=self.frontier,
            escalated=self.escalated,
            quality=self.quality / n,
            cost=self.cost,
            latency_s=self.latency / n,
        )


def _nice_between(lo: float, hi: float) -> float:
    """Return a short decimal ``t`` with ``lo <= t < hi`` (the midpoint when none is short)."""
    mid = (lo + hi) / 2
    for digits in range(1, 7):
        t = round(mid, digits)
        if lo <= t < hi:
            return t
    return mid


def sweep(rows: Sequence[RowRun]) -> list[SweepPoint]:
    """Return the policy's totals at every threshold that changes a routing decision.

    Points are ordered by threshold; the first sends the fewest rows down the fast path
    (none by threshold, when the lowest score is above 0), the last is threshold 1.0.

    Raises:
        ValueError: When ``rows`` is empty.

    """
    if not rows:
        raise ValueError("sweep: no rows")
    n = len(rows)
    acc = _Acc()
    free = sorted((r for r in rows if r.rule is None), key=lambda r: r.score)
    for r in rows:
        if r.rule is not None:
            acc.add(r.headline, routed_fast=r.decided == "fast")
    for r in free:
        acc.add(r.frontier, routed_fast=False)
    points: list[SweepPoint] = []
    if not free or free[0].score > 0:
        first = free[0].score if free else 1.0
        points.append(acc.point(_nice_between(0.0, first) if free else 1.0, n))
    for k, r in enumerate(free):
        acc.add(r.frontier, routed_fast=False, sign=-1)
        acc.add(r.fast, routed_fast=True)
        nxt = free[k + 1].score if k + 1 < len(free) else None
        if nxt is not None and nxt == r.score:
            continue  # the same score cannot be split by a threshold
        threshold = 1.0 if nxt is None else _nice_between(r.score, nxt)
        points.append(acc.point(threshold, n))
    return points


class CalibrationError(ValueError):
    """No threshold meets the calibration target; the message says what is reachable."""


def calibrate(
    points: Sequence[SweepPoint],
    *,
    fast_share: float | None = None,
    quality_retained: float | None = None,
    max_cost_per_turn: float | None = None,
    max_cost_share: float | None = None,
    frontier_quality: float | None = None,
    frontier_cost: float | None = None,
) -> SweepPoint:
    """Pick the sweep point (and so the threshold) that meets one target.

    Exactly one target is given:

    - ``fast_share``: at least this share of turns answered by the fast tier; the lowest
      threshold that reaches it (the best quality for that share).
    - ``quality_retained``: mean quality at least this share of the all-frontier quality
      (``frontier_quality``); the cheapest point that keeps it.
    - ``max_cost_per_turn``: mean cost per turn at most this many dollars; the best quality
      within it.
    - ``max_cost_share``: total cost at most this share of the all-frontier cost
      (``frontier_cost``); the best quality within it.

    Raises:
        ValueError: When not exactly one target is given or a needed baseline is missing.
        CalibrationError: When no point meets the target.

    """
    targets = [fast_share, quality_retained, max_cost_per_turn, max_cost_share]
    if sum(t is not None for t in targets) != 1:
        raise ValueError("calibrate: give exactly one target")
    if not points:
        raise ValueError("calibrate: no sweep points")
    by_threshold = sorted(points, key=lambda p: p.threshold)
    if fast_share is not None:
        ok = [p for p in by_threshold if p.fast_share >= fast_share]
        if not ok:
            best = max(p.fast_share for p in points)
            raise CalibrationError(
                f"no threshold reaches a fast share of {fast_share:.1%}; the most is {best:.1%}"
            )
        return ok[0]
    if quality_retained is not None:
        if not frontier_quality:
            raise ValueError("calibrate: quality_retained needs frontier_quality > 0")
        ok = [p for p in by_threshold if p.quality / frontier_quality >= quality_retained - 1e-12]
        if not ok:
            best = max(p.quality for p in points) / frontier_quality
            raise CalibrationError(
                f"no threshold retains {quality_retained:.1%} of the frontier quality; "
                f"the most is {best:.1%}"
            )
        return min(ok, key=lambda p: (p.cost, -p.threshold))
    if max_cost_share is not None:
        if not frontier_cost:
            raise ValueError("calibrate: max_cost_share needs frontier_cost > 0")
        limit = max_cost_share * frontier_cost
        ok = [p for p in by_threshold if p.cost <= limit + 1e-15]
        what = f"{max_cost_share:.1%} of the all-frontier cost"
    else:
        assert max_cost_per_turn is not None
        ok = [p for p in by_threshold if p.cost / p.n <= max_cost_per_turn + 1e-15]
        what = f"${max_cost_per_turn:g} per turn"
    if not ok:
        cheapest = min(points, key=lambda p: p.cost)
        raise CalibrationError(
            f"no threshold costs at most {what}; the cheapest costs "
            f"${cheapest.cost / cheapest.n:.6g} per turn"
        )
    return max(ok, key=lambda p: (p.quality, -p.cost))
