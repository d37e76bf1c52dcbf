"""``calibrate --scope traffic``: one bound over the whole traffic, kinds traded against each other.

The chooser's default scope is ``kind``: every turn kind meets the target on its own, so the
guarantee holds whatever the mix of kinds. With ``traffic``, the target holds for one bound
over all the calibration rows, so a kind where verification is expensive (code that drafts
never agree on) can keep its cheap path while another kind (multiple choice) buys the
quality back: the guarantee is then for traffic with the calibration rows' mix of kinds.

At one threshold, each kind's candidate verifications are points ``(cost, quality)``. The
combinations worth checking are the ones a price on quality would pick: per kind the lower
convex hull of its points (cheapest first, each next point the best quality gained per
dollar), walked by all kinds together in the order of those marginal rates (the greedy walk
of a separable knapsack). Each combination's totals (sums over the rows, so the paired
bound is the same construction as for one kind) is checked against the target; the chooser
ranks them as it ranks one kind's. Pure arithmetic over the prefix sums.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tiered_router.evaluation._bounds import _Sums

__all__ = ["best_combination", "hull", "walk"]

V = TypeVar("V")
Point = tuple[V, tuple[_Sums, _Sums, _Sums]]  # a verification and its (quality, cost, fast) sums


def hull(points: Sequence[Point[V]]) -> list[Point[V]]:
    """The points on the lower-left convex hull of (cost, -quality), cheapest first.

    A point another one beats on both cost and quality is dropped, and so is one that a mix
    of its two neighbours would beat (its marginal quality per dollar is below the next).
    """
    ordered = sorted(points, key=lambda p: (p[1][1].p, -p[1][0].p))
    frontier: list[Point[V]] = []
    for point in ordered:
        if frontier and point[1][0].p <= frontier[-1][1][0].p:
            continue  # costs at least as much for no more quality
        while len(frontier) >= 2 and _slope(frontier[-2], frontier[-1]) <= _slope(
            frontier[-1], point
        ):
            frontier.pop()
        frontier.append(point)
    return frontier


def _slope(a: Point[V], b: Point[V]) -> float:
    dc = b[1][1].p - a[1][1].p
    dq = b[1][0].p - a[1][0].p
    return dq / dc if dc > 0 else float("inf")


def walk(
    per_kind: Mapping[str, Sequence[Point[V]]],
    accept: Callable[[Mapping[str, Point[V]]], None],
) -> None:
    """Hand ``accept`` each combination along the greedy walk over the kinds' hulls.

    The walk starts at every kind's cheapest hull point and moves one kind at a time to its
    next hull point, the move with the most quality per dollar first, until every kind is at
    its best point.
    """
    hulls = {kind: hull(points) for kind, points in per_kind.items()}
    if any(not h for h in hulls.values()):
        return
    at = dict.fromkeys(hulls, 0)
    accept({kind: h[0] for kind, h in hulls.items()})
    while True:
        moves = [
            (_slope(h[at[kind]], h[at[kind] + 1]), kind)
            for kind, h in hulls.items()
            if at[kind] + 1 < len(h)
        ]
        if not moves:
            return
        _, kind = max(moves)
        at[kind] += 1
        accept({k: hulls[k][at[k]] for k in hulls})


F = TypeVar("F")
Combination = dict[str, Point[V]]


def best_combination(
    per_kind: Mapping[str, Sequence[Point[V]]],
    figures: Callable[[_Sums, _Sums, _Sums], F],
    meets: Callable[[F], bool],
    rank: Callable[[F], tuple[float, float]],
    low: Callable[[F], float],
) -> tuple[tuple[tuple[float, float], Combination[V]] | None, float]:
    """The best combination along :func:`walk` that ``meets`` the target.

    Args:
        per_kind: Each kind's candidates and their sums at one threshold.
        figures: The totals' figures from the summed (quality, cost, fast) sums.
        meets: Whether figures meet the target.
        rank: The chooser's order (lower is better).
        low: The figures' lower bound of the quality retained.

    Returns:
        ``((rank, combination) or None, the best lower bound seen)``.
    """
    best: tuple[tuple[float, float], Combination[V]] | None = None
    closest = 0.0

    def accept(combo: Mapping[str, Point[V]]) -> None:
        nonlocal best, closest
        q = c = f = _Sums()
        for _, (qk, ck, fk) in combo.values():
            q, c, f = q + qk, c + ck, f + fk
        total = figures(q, c, f)
        closest = max(closest, low(total))
        if meets(total) and (best is None or rank(total) < best[0]):
            best = (rank(total), dict(combo))

    walk(per_kind, accept)
    return best, closest
