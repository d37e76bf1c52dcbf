"""The one-draft zone of a panel (``drafts.panel_above``), replayed for ``calibrate``.

A fast turn the scorer is sure of (its routing score at or below ``panel_above``) gets one
draft and the gate; the panel is for the turns above it, the ones the scorer is less sure
of, and the frontier for the turns above the routing threshold. Three zones, where a panel
on every fast turn pays for drafts that the easy turns do not need: on BFCL, gpt-4o-mini (FC
and text) and gpt-3.5 drafting for gpt-4o-2024-08-06, on the hash split of
``benchmarks/bench_verify.py`` the cheapest panel that meets 99 % for the bound costs 38.7 %
of the strong model held out, with the zone 22.9 %. On 8 other halves of the same rows the
zone was chosen once, on the dearest (32.3 % -> 20.3 %); on the others one draft and the
gate held the bound alone (``bench_verify.py --splits 8``, docs/panels.md).

:func:`zone_values` picks where the zone may end (quantiles of the calibration rows'
scores); :func:`zoned` is a panel's replayed rows with the single draft's fast path below
it. Pure, like the rest of the chooser.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiered_router.evaluation.sweep import RowRun, _nice_between
from tiered_router.policy._drafts import in_zone

if TYPE_CHECKING:
    from tiered_router.policy import Policy

__all__ = ["without_zones", "zone_values", "zoned"]


def zone_values(runs: Sequence[RowRun], points: int = 16) -> list[float]:
    """Where a one-draft zone may end: after ``points`` quantiles of the rows' scores (not the top).

    A zone that ends at the top score gives every row one draft, which is the single-draft
    candidate already; so is a zone below every score (no zone), left to the plain panel.
    """
    scores = sorted({r.score for r in runs})
    if len(scores) < 2:
        return []
    last = len(scores) - 1
    picks = {min(last - 1, round(i * last / points)) for i in range(1, points)}
    # a short value between a score and the next, so that the value written to the policy
    # leaves the same rows in the zone; 0 means no zone, so a zone must end above it
    values = {_nice_between(scores[i], scores[i + 1]) for i in picks}
    return sorted(v for v in values if v > 0)


def zoned(single: Sequence[RowRun], panel: Sequence[RowRun], above: float) -> list[RowRun]:
    """``panel``'s rows, each scored at or below ``above`` with ``single``'s fast path instead.

    As the engine plans it (:func:`tiered_router.engine._panel_plan.plan_panel`): the score
    decides, whatever rule sent the turn fast.
    """
    by_id = {r.row_id: r for r in single}
    out: list[RowRun] = []
    for run in panel:
        if in_zone(run.score, above):
            one = by_id[run.row_id]
            run = dataclasses.replace(run, fast=one.fast, headline=one.headline)
        out.append(run)
    return out


def without_zones(policy: Policy) -> Policy:
    """``policy`` with no one-draft zone, in the section or a kind's entry.

    Calibrate starts from it: it chooses the zone as it chooses ``k`` and the drafters.
    """
    drafts = policy.drafts
    if drafts is None:
        return policy
    kinds = {k: e.model_copy(update={"panel_above": None}) for k, e in drafts.kinds.items()}
    plain = drafts.model_copy(update={"panel_above": None, "kinds": kinds})
    return policy.model_copy(update={"drafts": plain})
