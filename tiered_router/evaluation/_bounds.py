"""One-sided confidence bounds of a ratio of two means over paired rows (Fieller's method).

Quality retained is ``mean(q_policy) / mean(q_frontier)`` over the same rows; its lower
bound is the smallest ``r`` for which the paired differences ``d_i = q_policy_i - r *
q_frontier_i`` have ``mean(d) - z * sd(d) / sqrt(n) = 0`` (``z``: the normal quantile of the
confidence), a root of a quadratic in ``r``. The cost share's upper bound is the same
construction on costs. Pure arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["cost_upper_bound", "retained_lower_bound"]


def _z(confidence: float) -> float:
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence: must be in [0.5, 1), got {confidence}")
    return NormalDist().inv_cdf(confidence)


@dataclass(frozen=True, slots=True)
class _Sums:
    """Sums over rows of a policy's value ``p`` and the reference ``f`` (for a ratio bound)."""

    n: int = 0
    p: float = 0.0
    pp: float = 0.0
    f: float = 0.0
    ff: float = 0.0
    pf: float = 0.0

    def add(self, p: float, f: float) -> _Sums:
        return _Sums(
            self.n + 1, self.p + p, self.pp + p * p, self.f + f, self.ff + f * f, self.pf + p * f
        )

    def __add__(self, o: _Sums) -> _Sums:
        return _Sums(
            self.n + o.n, self.p + o.p, self.pp + o.pp, self.f + o.f, self.ff + o.ff, self.pf + o.pf
        )

    def __sub__(self, o: _Sums) -> _Sums:
        return _Sums(
            self.n - o.n, self.p - o.p, self.pp - o.pp, self.f - o.f, self.ff - o.ff, self.pf - o.pf
        )


def _fieller(s: _Sums, z: float, *, upper: bool) -> float:
    """One-sided Fieller bound of ``sum(p) / sum(f)`` over paired rows (see the module doc)."""
    n = s.n
    if n == 0 or s.f <= 0:
        return math.inf if upper else 0.0
    mp, mf = s.p / n, s.f / n
    # sample (co)variances, n - 1 in the denominator
    d = max(n - 1, 1)
    vpp = max(0.0, (s.pp - n * mp * mp) / d)
    vff = max(0.0, (s.ff - n * mf * mf) / d)
    vpf = (s.pf - n * mp * mf) / d
    q = z * z / n
    # (mp - r mf)^2 = q (vpp - 2 r vpf + r^2 vff)
    a = mf * mf - q * vff
    b = -2 * (mp * mf - q * vpf)
    c = mp * mp - q * vpp
    point = mp / mf
    if a <= 0:  # the reference mean is not bounded away from 0: no finite bound
        return math.inf if upper else 0.0
    disc = b * b - 4 * a * c
    if disc < 0:
        return point
    root = math.sqrt(disc)
    lo, hi = (-b - root) / (2 * a), (-b + root) / (2 * a)
    return max(hi, point) if upper else max(0.0, min(lo, point))


def retained_lower_bound(
    policy_quality: Sequence[float], frontier_quality: Sequence[float], *, confidence: float = 0.95
) -> float:
    """One-sided lower confidence bound of ``sum(policy) / sum(frontier)`` (Fieller's method).

    Args:
        policy_quality: Each row's quality under the policy.
        frontier_quality: The same rows' quality when the frontier answers.
        confidence: Confidence of the bound (0.95: the ratio is above it with 95 %).

    Raises:
        ValueError: When the lengths differ or ``confidence`` is outside [0.5, 1).
    """
    if len(policy_quality) != len(frontier_quality):
        raise ValueError("retained_lower_bound: the two sequences differ in length")
    s = _Sums()
    for p, f in zip(policy_quality, frontier_quality, strict=True):
        s = s.add(p, f)
    return _fieller(s, _z(confidence), upper=False)


def cost_upper_bound(
    policy_cost: Sequence[float], frontier_cost: Sequence[float], *, confidence: float = 0.95
) -> float:
    """One-sided upper confidence bound of ``sum(policy_cost) / sum(frontier_cost)``."""
    if len(policy_cost) != len(frontier_cost):
        raise ValueError("cost_upper_bound: the two sequences differ in length")
    s = _Sums()
    for p, f in zip(policy_cost, frontier_cost, strict=True):
        s = s.add(p, f)
    return _fieller(s, _z(confidence), upper=True)
