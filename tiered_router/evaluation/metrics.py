"""Router metrics: PGR, APGR and CPT (RouteLLM), reference curves, percentiles, gate confusion.

Definitions follow Ong et al. 2024, "RouteLLM: Learning to Route LLMs with Preference Data"
(arXiv:2406.18665), Section 5:

- ``PGR = (q_router - q_weak) / (q_strong - q_weak)``: performance gap recovered, where
  ``q_weak`` / ``q_strong`` are the mean qualities of sending every turn to the weak (fast)
  or the strong (frontier) model.
- ``APGR``: the area under the PGR curve as the share of calls to the strong model goes
  from 0 to 1 (trapezoidal rule over the points of a threshold sweep). A random router
  scores 0.5.
- ``CPT(x%)``: the smallest share of strong calls at which the router's PGR reaches ``x``.

The functions here work on plain numbers; :mod:`tiered_router.evaluation.sweep` feeds them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CurvePoint",
    "GateConfusion",
    "apgr",
    "cpt",
    "gate_confusion",
    "oracle_curve",
    "percentile",
    "pgr",
    "random_curve",
    "threshold_curve",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """One point of a quality curve.

    Attributes:
        strong_share: Share of turns that called the strong (frontier) model, in [0, 1].
        quality: Mean quality at that point.
        cost: Total cost at that point, US dollars (0 when unknown).

    """

    strong_share: float
    quality: float
    cost: float = 0.0


def pgr(quality: float, q_weak: float, q_strong: float) -> float:
    """Return the performance gap recovered, ``(quality - q_weak) / (q_strong - q_weak)``.

    Raises:
        ValueError: When ``q_strong == q_weak`` (there is no gap to recover).

    """
    gap = q_strong - q_weak
    if gap == 0:
        raise ValueError("PGR is undefined: the strong and weak models have the same quality")
    return (quality - q_weak) / gap


def _with_anchors(
    points: Iterable[CurvePoint], q_weak: float, q_strong: float
) -> list[tuple[float, float]]:
    pts = sorted((p.strong_share, pgr(p.quality, q_weak, q_strong)) for p in points)
    if not pts or pts[0][0] > 0:
        pts.insert(0, (0.0, 0.0))
    if pts[-1][0] < 1:
        pts.append((1.0, 1.0))
    return pts


def apgr(points: Iterable[CurvePoint], *, q_weak: float, q_strong: float) -> float:
    """Return the average performance gap recovered: area under PGR vs strong-call share.

    The curve is closed with the all-weak point ``(0, PGR 0)`` and the all-strong point
    ``(1, PGR 1)`` where the sweep does not reach them (rules or escalations can keep a
    policy from sending no, or every, turn to the strong model); between points it is
    linear (the trapezoidal rule, as RouteLLM's ``np.trapz``).

    Raises:
        ValueError: When ``q_strong == q_weak``.

    """
    pts = _with_anchors(points, q_weak, q_strong)
    area = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        area += (x1 - x0) * (y0 + y1) / 2
    return area


def cpt(
    points: Iterable[CurvePoint], target: float, *, q_weak: float, q_strong: float
) -> float | None:
    """Return the call-performance threshold: least strong-call share reaching PGR ``target``.

    Walks the curve by increasing strong-call share (closed as in :func:`apgr`) and returns
    the share where PGR first reaches ``target``, interpolating linearly between points;
    ``None`` when it never does.

    Raises:
        ValueError: When ``q_strong == q_weak``.

    """
    pts = _with_anchors(points, q_weak, q_strong)
    if pts[0][1] >= target:
        return pts[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if y0 < target <= y1:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return None


def random_curve(
    q_weak: float, q_strong: float, *, cost_weak: float = 0.0, cost_strong: float = 0.0
) -> list[CurvePoint]:
    """Return the expected curve of a random router: the line from all-weak to all-strong."""
    return [
        CurvePoint(strong_share=0.0, quality=q_weak, cost=cost_weak),
        CurvePoint(strong_share=1.0, quality=q_strong, cost=cost_strong),
    ]


def oracle_curve(
    weak: Sequence[float],
    strong: Sequence[float],
    *,
    weak_cost: Sequence[float] | None = None,
    strong_cost: Sequence[float] | None = None,
    steps: int = 100,
) -> list[CurvePoint]:
    """Return the curve of an oracle router that knows every turn's outcome.

    It sends turns to the strong model in order of quality gain (``strong - weak``, largest
    first; ties by the smaller extra cost), so at every share of strong calls it has the
    best quality any router could have.

    Args:
        weak: Quality of the weak model per turn.
        strong: Quality of the strong model per turn.
        weak_cost: Cost of the weak model per turn (zeros when ``None``).
        strong_cost: Cost of the strong model per turn (zeros when ``None``).
        steps: Number of points (plus the start), evenly spaced in strong-call share.

    Raises:
        ValueError: When the sequences differ in length or are empty.

    """
    n = len(weak)
    if n == 0 or len(strong) != n:
        raise ValueError("oracle_curve: weak and strong must be non-empty and equally long")
    wc = list(weak_cost) if weak_cost is not None else [0.0] * n
    sc = list(strong_cost) if strong_cost is not None else [0.0] * n
    order = sorted(range(n), key=lambda i: (-(strong[i] - weak[i]), sc[i] - wc[i], i))
    quality = float(sum(weak))
    cost = float(sum(wc))
    marks = {min(n, math.ceil(n * s / steps)) for s in range(steps + 1)}
    # also keep the points where the gain changes (the peak of a 0/1-labelled curve)
    gains = [strong[i] - weak[i] for i in order]
    marks.update(k for k in range(1, n) if gains[k - 1] != gains[k])
    points = [CurvePoint(strong_share=0.0, quality=quality / n, cost=cost)]
    for k, i in enumerate(order, 1):
        quality += strong[i] - weak[i]
        cost += sc[i] - wc[i]
        if k in marks:
            points.append(CurvePoint(strong_share=k / n, quality=quality / n, cost=cost))
    return points


def threshold_curve(
    scores: Sequence[float],
    weak: Sequence[float],
    strong: Sequence[float],
    *,
    weak_cost: Sequence[float] | None = None,
    strong_cost: Sequence[float] | None = None,
) -> list[CurvePoint]:
    """Return the curve of a plain score-threshold router (no rules, no gate).

    A turn goes to the strong model when its score is above the threshold; one point per
    threshold that changes a decision, from "all weak" to "all strong".

    Raises:
        ValueError: When the sequences differ in length or are empty.

    """
    n = len(scores)
    if n == 0 or len(weak) != n or len(strong) != n:
        raise ValueError("threshold_curve: scores, weak and strong must be non-empty and equal")
    wc = list(weak_cost) if weak_cost is not None else [0.0] * n
    sc = list(strong_cost) if strong_cost is not None else [0.0] * n
    order = sorted(range(n), key=lambda i: -scores[i])  # highest scores go strong first
    quality = float(sum(weak))
    cost = float(sum(wc))
    points = [CurvePoint(strong_share=0.0, quality=quality / n, cost=cost)]
    for k, i in enumerate(order, 1):
        quality += strong[i] - weak[i]
        cost += sc[i] - wc[i]
        if k == n or scores[order[k]] != scores[i]:
            points.append(CurvePoint(strong_share=k / n, quality=quality / n, cost=cost))
    return points


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) with linear interpolation (numpy's default).

    Raises:
        ValueError: When ``values`` is empty or ``q`` is outside [0, 100].

    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfusion:
    """How the gate's verdicts on fast drafts line up with the drafts' quality labels.

    A draft is *wrong* when its label is below 0.5. Only drafts whose answer was recorded
    count (a draft without a recorded answer passes the gate unchecked).

    Attributes:
        drafts: Drafts judged.
        passed: Drafts the gate passed.
        failed: Drafts the gate failed.
        wrong: Drafts labelled wrong.
        wrong_passed: Wrong drafts the gate passed.
        wrong_failed: Wrong drafts the gate failed (caught).
        right_failed: Right drafts the gate failed (false alarms).

    """

    drafts: int
    passed: int
    failed: int
    wrong: int
    wrong_passed: int
    wrong_failed: int
    right_failed: int

    @property
    def p_wrong_given_pass(self) -> float | None:
        """P(wrong | pass): wrong answers that get through the gate."""
        return self.wrong_passed / self.passed if self.passed else None

    @property
    def p_fail_given_wrong(self) -> float | None:
        """P(fail | wrong): the gate's catch rate of wrong drafts."""
        return self.wrong_failed / self.wrong if self.wrong else None

    @property
    def p_fail_given_right(self) -> float | None:
        """P(fail | right): the gate's false-alarm rate on right drafts."""
        right = self.drafts - self.wrong
        return self.right_failed / right if right else None

    def to_dict(self) -> dict[str, float | int | None]:
        """Return counts and rates, JSON-ready."""
        return {
            "drafts": self.drafts,
            "passed": self.passed,
            "failed": self.failed,
            "wrong": self.wrong,
            "wrong_passed": self.wrong_passed,
            "wrong_failed": self.wrong_failed,
            "right_failed": self.right_failed,
            "p_wrong_given_pass": self.p_wrong_given_pass,
            "p_fail_given_wrong": self.p_fail_given_wrong,
            "p_fail_given_right": self.p_fail_given_right,
        }


def gate_confusion(pairs: Iterable[tuple[bool, float]]) -> GateConfusion:
    """Count verdicts against labels.

    Args:
        pairs: ``(passed, quality)`` for each judged draft.

    """
    drafts = passed = wrong = wrong_passed = wrong_failed = right_failed = 0
    for ok, quality in pairs:
        drafts += 1
        is_wrong = quality < 0.5
        passed += ok
        wrong += is_wrong
        wrong_passed += ok and is_wrong
        wrong_failed += (not ok) and is_wrong
        right_failed += (not ok) and not is_wrong
    return GateConfusion(
        drafts=drafts,
        passed=passed,
        failed=drafts - passed,
        wrong=wrong,
        wrong_passed=wrong_passed,
        wrong_failed=wrong_failed,
        right_failed=right_failed,
    )
