"""Baseline routers at the policy's frontier share: is the policy's score worth having?

A policy's quality at its own threshold means little alone: any router that sends more
turns to the frontier keeps more quality. So the policy is compared with two routers that
spend the *same share of frontier calls* on the same rows, under the same gate and
escalation:

- ``random``: turns picked at random for the frontier (the expected value, no sampling);
- ``prompt length``: the longest prompts go to the frontier first.

Both reuse the per-row runs of the replay (each row was run down the fast path, with the
gate and escalation, and down the frontier path), so nothing is replayed again. Rows decided
by a policy rule keep their real outcome, as in the threshold sweep. A baseline sends ``k``
of the other rows to the frontier directly and the rest down the fast path; ``k`` is the
smallest whose frontier calls (direct plus escalations) reach the policy's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiered_router.evaluation.sweep import RowRun

if TYPE_CHECKING:
    from tiered_router.evaluation.dataset import Dataset

__all__ = ["Baseline", "baselines", "shares_at_cost"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """A baseline router's totals at the policy's frontier share.

    Attributes:
        name: ``random`` or ``prompt length``.
        frontier_share: Share of turns that called the frontier model.
        quality: Mean quality.
        cost: Total cost, US dollars.
    """

    name: str
    frontier_share: float
    quality: float
    cost: float


def _free(runs: Sequence[RowRun]) -> tuple[list[int], float, float, int]:
    """Indices of rows no rule decided; quality, cost and frontier calls of the ruled rows."""
    free = [i for i, r in enumerate(runs) if r.rule is None]
    ruled = [r for r in runs if r.rule is not None]
    quality = sum(r.headline.quality for r in ruled)
    cost = sum(r.headline.cost for r in ruled)
    calls = sum(r.headline.frontier_called for r in ruled)
    return free, quality, cost, calls


def _by_order(
    runs: Sequence[RowRun], order: Sequence[int], target_calls: float, *, by_cost: bool = False
) -> tuple[float, float, float]:
    """Send rows to the frontier in ``order`` until the frontier calls (or cost) reach a target."""
    free, quality, cost, calls = _free(runs)
    quality += sum(runs[i].fast.quality for i in free)
    cost += sum(runs[i].fast.cost for i in free)
    calls += sum(runs[i].fast.frontier_called for i in free)
    for i in order:
        if (cost if by_cost else calls) >= target_calls:
            break
        r = runs[i]
        quality += r.frontier.quality - r.fast.quality
        cost += r.frontier.cost - r.fast.cost
        calls += int(r.frontier.frontier_called) - int(r.fast.frontier_called)
    n = len(runs)
    return calls / n, quality / n, cost


def _random(
    runs: Sequence[RowRun], target_calls: float, *, by_cost: bool = False
) -> tuple[float, float, float]:
    """Expected totals of a random pick of ``k`` free rows, ``k`` solved for a target.

    The target is frontier calls, or the cost with ``by_cost``.
    """
    free, quality, cost, calls = _free(runs)
    m = len(free)
    n = len(runs)
    fast_q = sum(runs[i].fast.quality for i in free)
    fast_c = sum(runs[i].fast.cost for i in free)
    fast_calls = sum(runs[i].fast.frontier_called for i in free)
    gain_q = sum(runs[i].frontier.quality - runs[i].fast.quality for i in free)
    gain_c = sum(runs[i].frontier.cost - runs[i].fast.cost for i in free)
    gain_calls = sum(
        int(runs[i].frontier.frontier_called) - int(runs[i].fast.frontier_called) for i in free
    )
    if m == 0:
        return calls / n, quality / n, cost
    # calls(f) = calls + fast_calls + f * gain_calls for a share f of the free rows
    needed = target_calls - calls - fast_calls
    gain: float = gain_calls
    if by_cost:  # cost(f) = cost + fast_c + f * gain_c
        needed, gain = target_calls - cost - fast_c, gain_c
    f = 0.0 if gain <= 0 else min(1.0, max(0.0, needed / gain))
    return (
        (calls + fast_calls + f * gain_calls) / n,
        (quality + fast_q + f * gain_q) / n,
        cost + fast_c + f * gain_c,
    )


def baselines(
    runs: Sequence[RowRun],
    prompt_chars: Sequence[int],
    *,
    frontier_share: float,
    cost: float | None = None,
) -> tuple[Baseline, ...]:
    """Random and prompt-length routers at ``frontier_share`` of frontier calls.

    Args:
        runs: The per-row runs of the replay.
        prompt_chars: Prompt length of each row, in the same order.
        frontier_share: The policy's share of turns that called the frontier model.
        cost: The policy's total cost: when given, the two routers are also run to this cost
            (``random (same cost)``, ``prompt length (same cost)``); a draft panel spends on
            drafts what a router spends on frontier calls, so its fair comparison is at equal
            cost.

    Returns:
        ``random`` and ``prompt length``, then the same-cost pair when ``cost`` is given.

    Raises:
        ValueError: When the lengths of ``runs`` and ``prompt_chars`` differ.
    """
    if len(runs) != len(prompt_chars):
        raise ValueError(f"baselines: {len(runs)} runs but {len(prompt_chars)} prompt lengths")
    if not runs:
        return ()
    target = frontier_share * len(runs)
    free, _, _, _ = _free(runs)
    longest = sorted(free, key=lambda i: (-prompt_chars[i], i))
    out = []
    for name, (share, quality, cost_) in (
        ("random", _random(runs, target)),
        ("prompt length", _by_order(runs, longest, target)),
    ):
        out.append(Baseline(name=name, frontier_share=share, quality=quality, cost=cost_))
    if cost is not None:
        for name, (share, quality, cost_) in (
            ("random (same cost)", _random(runs, cost, by_cost=True)),
            ("prompt length (same cost)", _by_order(runs, longest, cost, by_cost=True)),
        ):
            out.append(Baseline(name=name, frontier_share=share, quality=quality, cost=cost_))
    return tuple(out)


def shares_at_cost(
    single: Sequence[RowRun], dataset: Dataset, ids: set[str], cost: float
) -> dict[str, tuple[float, float]]:
    """Random and prompt length at ``cost``, all-fast and all-frontier, on the rows ``ids``.

    Each as ``(quality retained, cost share)`` of the all-frontier router on those rows;
    rules are ignored (every row is free), as ``calibrate``'s hold-out report wants.
    """
    chars = {row.id: row.turn.prompt_chars for row in dataset.rows}
    runs = [dataclasses.replace(r, rule=None) for r in single if r.row_id in ids]
    if not runs:
        return {}
    qf = sum(r.frontier.quality for r in runs)
    cf = sum(r.frontier.cost for r in runs)
    out: dict[str, tuple[float, float]] = {}
    for b in baselines(runs, [chars[r.row_id] for r in runs], frontier_share=0.0, cost=cost)[2:]:
        out[b.name] = (b.quality * len(runs) / qf if qf else 0.0, b.cost / cf if cf else 0.0)
    out["all-fast"] = (
        sum(r.fast.quality for r in runs) / qf if qf else 0.0,
        sum(r.fast.cost for r in runs) / cf if cf else 0.0,
    )
    out["all-frontier"] = (1.0, 1.0)
    return out
