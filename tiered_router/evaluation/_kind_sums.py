"""Prefix sums of one kind's rows under one verification, for every threshold at once.

``calibrate``'s chooser (:mod:`tiered_router.evaluation.verification`) asks each candidate
verification for its quality and cost sums at many thresholds; sorting the rows by score
once and keeping prefix sums (the fast path below the threshold) and suffix sums (the
frontier path above it) makes each ask a binary search. Pure arithmetic.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from tiered_router.evaluation._bounds import _Sums
from tiered_router.evaluation.sweep import RowRun

__all__ = ["_Kind"]


class _Kind:
    """One kind's rows under one verification: prefix sums by score, for every threshold."""

    def __init__(self, runs: Sequence[RowRun]) -> None:
        ruled = [r for r in runs if r.rule is not None]
        free = sorted((r for r in runs if r.rule is None), key=lambda r: r.score)
        self.scores = [r.score for r in free]
        q0 = c0 = _Sums()
        fast0 = 0
        for r in ruled:
            q0 = q0.add(r.headline.quality, r.frontier.quality)
            c0 = c0.add(r.headline.cost, r.frontier.cost)
            fast0 += r.headline.tier == "fast"
        self.ruled = (q0, c0, fast0)
        # prefix over the fast path, suffix over the frontier path
        self.pre: list[tuple[_Sums, _Sums, int]] = [(_Sums(), _Sums(), 0)]
        for r in free:
            q, c, fa = self.pre[-1]
            self.pre.append(
                (
                    q.add(r.fast.quality, r.frontier.quality),
                    c.add(r.fast.cost, r.frontier.cost),
                    fa + (r.fast.tier == "fast"),
                )
            )
        self.suf: list[tuple[_Sums, _Sums, int]] = [(_Sums(), _Sums(), 0)]
        for r in reversed(free):
            q, c, fa = self.suf[-1]
            self.suf.append(
                (
                    q.add(r.frontier.quality, r.frontier.quality),
                    c.add(r.frontier.cost, r.frontier.cost),
                    fa + (r.frontier.tier == "fast"),
                )
            )
        self.suf.reverse()

    def at(self, threshold: float) -> tuple[_Sums, _Sums, int]:
        """Quality sums, cost sums and rows answered fast at ``threshold``."""
        i = bisect.bisect_right(self.scores, threshold)
        q0, c0, f0 = self.ruled
        qa, ca, fa = self.pre[i]
        qb, cb, fb = self.suf[i]
        return q0 + qa + qb, c0 + ca + cb, f0 + fa + fb
