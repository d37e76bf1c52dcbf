"""Prefix sums of one kind's rows under one verification, for every threshold at once.

``calibrate``'s chooser (:mod:`tiered_router.evaluation.verification`) asks each candidate
verification for its quality and cost sums at many thresholds; sorting the rows by score
once and keeping prefix sums (the fast path below the threshold) and suffix sums (the
frontier path above it) makes each ask a binary search. Pure arithmetic.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from tiered_router.evaluation._bounds import _Sums
from tiered_router.evaluation.sweep import PathOutcome, RowRun

__all__ = ["_Kind", "_Zoned"]


class _Kind:
    """One kind's rows under one verification: prefix sums by score, for every threshold.

    :meth:`at` returns the quality sums, the cost sums and the quality sums of the rows
    answered fast (their ``n`` is how many were; the other rows are the frontier's own
    answer, which the exact small-sample bound takes as known).
    """

    def __init__(self, runs: Sequence[RowRun]) -> None:
        ruled = sorted((r for r in runs if r.rule is not None), key=lambda r: r.score)
        free = sorted((r for r in runs if r.rule is None), key=lambda r: r.score)
        self.scores = [r.score for r in free]
        self.ruled_scores = [r.score for r in ruled]
        # prefix sums over the ruled rows by score (a one-draft zone splits them by score)
        self.ruled_pre = _running(ruled, lambda r: r.headline)
        self.ruled = self.ruled_pre[-1]
        # prefix over the fast path, suffix over the frontier path
        self.pre = _running(free, lambda r: r.fast)
        self.suf = _running(free[::-1], lambda r: r.frontier)
        self.suf.reverse()

    def at(self, threshold: float) -> tuple[_Sums, _Sums, _Sums]:
        """Quality sums, cost sums and the fast-answered rows' quality sums at ``threshold``."""
        i = bisect.bisect_right(self.scores, threshold)
        q0, c0, f0 = self.ruled
        qa, ca, fa = self.pre[i]
        qb, cb, fb = self.suf[i]
        return q0 + qa + qb, c0 + ca + cb, f0 + fa + fb


def _running(
    rows: Sequence[RowRun], path: Callable[[RowRun], PathOutcome]
) -> list[tuple[_Sums, _Sums, _Sums]]:
    """Running quality, cost and fast-answered sums of ``rows`` down ``path`` (from zero)."""
    out = [(_Sums(), _Sums(), _Sums())]
    for r in rows:
        q, c, fa = out[-1]
        p = path(r)
        out.append(
            (
                q.add(p.quality, r.frontier.quality),
                c.add(p.cost, r.frontier.cost),
                fa.add(p.quality, r.frontier.quality) if p.tier == "fast" else fa,
            )
        )
    return out


def _triple_add(
    a: tuple[_Sums, _Sums, _Sums], b: tuple[_Sums, _Sums, _Sums]
) -> tuple[_Sums, _Sums, _Sums]:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _triple_sub(
    a: tuple[_Sums, _Sums, _Sums], b: tuple[_Sums, _Sums, _Sums]
) -> tuple[_Sums, _Sums, _Sums]:
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]


class _Zoned:
    """A panel with a one-draft zone, summed from the single draft's and the panel's sums.

    The same rows as ``single`` and ``panel`` (one kind, in the same order): a row scored at
    or below ``above`` is the single draft's, above it the panel's, above the threshold the
    frontier's (the same on both). Nothing is materialised: :meth:`at` is three binary
    searches, as :meth:`_Kind.at` is one.
    """

    def __init__(self, single: _Kind, panel: _Kind, above: float) -> None:
        self.single = single
        self.panel = panel
        self.above = above
        z = bisect.bisect_right(single.ruled_scores, above)
        # ruled rows: the single draft's headline up to the zone, the panel's above it
        self.ruled = _triple_add(
            single.ruled_pre[z], _triple_sub(panel.ruled_pre[-1], panel.ruled_pre[z])
        )

    def at(self, threshold: float) -> tuple[_Sums, _Sums, _Sums]:
        """Quality sums, cost sums and the fast-answered rows' quality sums at ``threshold``."""
        i = bisect.bisect_right(self.single.scores, threshold)
        z = min(i, bisect.bisect_right(self.single.scores, self.above))
        fast = _triple_add(self.single.pre[z], _triple_sub(self.panel.pre[i], self.panel.pre[z]))
        total = _triple_add(self.ruled, fast)
        return _triple_add(total, self.single.suf[i])
