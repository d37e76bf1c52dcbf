"""``calibrate --scope traffic``: one bound over the whole traffic, kinds traded against each other.

The chooser's default scope is ``kind``: every turn kind meets the target on its own, so the
guarantee holds whatever the mix of kinds. With ``traffic``, the target holds for one bound
over all the calibration rows, so a kind where verification is expensive (code that drafts
never agree on) can keep its cheap path while another kind (multiple choice) buys the
quality back: the guarantee is then for traffic with the calibration rows' mix of kinds.

At one threshold, each kind's candidate verifications are points ``(cost, quality)`` with
their sums over the rows (so the bound of a combination is the same paired construction as
for one kind). :func:`best_combination` checks every combination of the kinds' candidates
when there are at most :data:`EXHAUSTIVE` of them (one kind: every candidate, as the
per-kind scope does; several: each kind's candidates that no cheaper one matches in
quality). Beyond that it walks the kinds' lower convex hulls of (cost, quality) together,
in the order of quality gained per dollar (the greedy walk of a separable knapsack), which
can miss a combination off the hulls. Each combination checked is held to the target; the
chooser ranks them as it ranks one kind's. Pure arithmetic over the prefix sums.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tiered_router.evaluation._bounds import _Sums

__all__ = ["EXHAUSTIVE", "best_combination", "frontier", "hull", "walk"]

EXHAUSTIVE = 20_000
"""Most combinations :func:`best_combination` checks one by one (beyond: the hull walk)."""

V = TypeVar("V")
Point = tuple[V, tuple[_Sums, _Sums, _Sums]]  # a verification and its (quality, cost, fast) sums


def hull(points: Sequence[Point[V]]) -> list[Point[V]]:
    """The points on the lower-left convex hull of (cost, -quality), cheapest first.

    A point another one beats on both cost and quality is dropped, and so is one that a mix
    of its two neighbours would beat (its marginal quality per dollar is below the next).
    """
    kept: list[Point[V]] = []
    for point in frontier(points):  # each costs more and gives more than the one before
        while len(kept) >= 2 and _slope(kept[-2], kept[-1]) <= _slope(kept[-1], point):
            kept.pop()
        kept.append(point)
    return kept


def frontier(points: Sequence[Point[V]]) -> list[Point[V]]:
    """The points that no cheaper (or equally cheap) point matches in quality, cheapest first."""
    kept: list[Point[V]] = []
    for point in sorted(points, key=lambda p: (p[1][1].p, -p[1][0].p)):
        if not kept or point[1][0].p > kept[-1][1][0].p:
            kept.append(point)
    return kept


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
    """The best combination that ``meets`` the target (checked one by one, or along :func:`walk`).

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

    if len(per_kind) == 1:
        options = {kind: list(points) for kind, points in per_kind.items()}
    else:
        options = {kind: frontier(points) for kind, points in per_kind.items()}
    count = 1
    for points in options.values():
        count *= len(points)
    if count <= EXHAUSTIVE:
        kinds = list(options)
        for picked in itertools.product(*(options[k] for k in kinds)):
            accept(dict(zip(kinds, picked, strict=True)))
    else:
        walk(per_kind, accept)
    return best, closest
