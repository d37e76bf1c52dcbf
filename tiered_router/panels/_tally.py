"""Counting a panel's answers: agreement, and when the outcome can no longer change.

:func:`tally` groups a panel's answer keys (equal keys, one group), finds the majority and
says whether the panel agrees. It is called as drafts arrive, with ``None`` for a draft
still pending, and says when the outcome is ``decided``: with ``k = 3`` and
``min_agreement = 0.67``, two equal answers decide (the engine cancels the third), and two
different ones do not (the third breaks the tie).

The rules (``k`` drafts; ``needed``: the fewest drafts whose share of ``k`` meets
``min_agreement`` to two decimals, so 2 of 3 meets 0.67):

- the majority is the largest group of equal comparable answers; it is **agreed** when it has
  at least ``needed`` members and no other group is as large;
- when drafts with no checkable answer (``not_comparable``) outnumber the largest comparable
  group and no two checkable answers conflict, the panel is **not comparable**: it says so,
  and the caller falls back to the gate (never a silent agreement);
- otherwise the panel **disagrees**, and the caller escalates;
- failed drafts (``failed=``) answer nothing: they count against agreement;
- with ``exact=`` (each draft's exact form, :func:`tiered_router.panels.exact_form`), the
  majority agrees only when enough of its members gave the same exact form too (at least
  ``needed``, and no other exact form among them as many): the panel returns one of those
  (``members``), never a draft whose words only the normalisation made agree. This widens
  the comparison, never the acceptance.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tiered_router.panels._keys import AnswerKey

__all__ = ["Tally", "tally"]

_SLACK = 0.005  # shares are compared to two decimals: 2 of 3 (0.667) meets 0.67


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """What a panel's answers say so far.

    Attributes:
        decided: The outcome can no longer change, whatever the pending drafts answer.
        agreed: The majority answer has the share needed (only ever ``True`` with
            ``comparable``); with ``decided`` the caller accepts one of ``members``.
        majority: The largest group's answer (the not-comparable key when those lead);
            ``None`` before any draft answered.
        share: The majority's members over ``k``.
        members: Indices of the drafts that gave the majority answer, ascending.
        comparable: ``False`` when drafts with no checkable answer lead: the panel cannot
            judge and the caller falls back to the gate.
        reason: A short sentence for the trace.
    """

    decided: bool
    agreed: bool
    majority: AnswerKey | None
    share: float
    members: tuple[int, ...]
    comparable: bool
    reason: str


def needed_votes(k: int, min_agreement: float) -> int:
    """Drafts that must give the majority answer, at least 1.

    The fewest whose share of ``k`` meets ``min_agreement`` to two decimals (2 of 3 meets
    0.67).
    """
    return max(1, math.ceil((min_agreement - _SLACK) * k))


def tally(
    keys: Sequence[AnswerKey | None],
    *,
    k: int,
    min_agreement: float,
    failed: Collection[int] = (),
    exact: Sequence[str | None] | None = None,
) -> Tally:
    """Count a panel's answers.

    Args:
        keys: One entry per draft started, in draft order: its answer key, or ``None``
            while it is pending (drafts not yet started may be left out: ``k`` counts them).
        k: The panel's size.
        min_agreement: Share of the ``k`` drafts that must give the majority answer, in
            (0, 1].
        failed: Indices of drafts that failed: their ``None`` is final, not pending.
        exact: Each draft's exact form, in draft order (``None``: pending, or no exact
            form); when given, agreement needs it too (see the module docstring).

    Returns:
        The :class:`Tally`.

    Raises:
        ValueError: ``k`` below 1, more keys than ``k``, or ``min_agreement`` outside (0, 1].

    Example:
        ```python
        t = tally([key_a, key_a, None], k=3, min_agreement=0.67)
        t.decided, t.agreed, t.members    # (True, True, (0, 1))
        ```
    """
    if k < 1:
        raise ValueError(f"tally: k must be >= 1, got {k}")
    if len(keys) > k:
        raise ValueError(f"tally: {len(keys)} keys for a panel of k={k}")
    if not 0 < min_agreement <= 1:
        raise ValueError(f"tally: min_agreement must be in (0, 1], got {min_agreement}")
    needed = needed_votes(k, min_agreement)
    groups: dict[AnswerKey, list[int]] = {}
    other: list[int] = []  # not comparable
    pending = k - len(keys)
    for i, key in enumerate(keys):
        if key is None:
            pending += 0 if i in failed else 1
        elif key.comparable:
            groups.setdefault(key, []).append(i)
        else:
            other.append(i)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    top = len(ranked[0][1]) if ranked else 0
    second = len(ranked[1][1]) if len(ranked) > 1 else 0
    lone_top = top > second
    nc = len(other)
    if nc > top and len(ranked) <= 1:
        nc_key = keys[other[0]]
        # sure when the pending drafts can neither outnumber the not-comparable ones nor
        # bring a second, conflicting answer
        decided = nc > top + pending and len(ranked) + pending <= 1
        return Tally(
            decided=decided,
            agreed=False,
            majority=nc_key,
            share=nc / k,
            members=tuple(other),
            comparable=False,
            reason=(
                f"not comparable: {nc} of {k} drafts have no checkable answer"
                + ("" if decided else f" ({pending} pending)")
            ),
        )
    if not ranked:  # nothing answered yet
        return Tally(
            decided=False,
            agreed=False,
            majority=None,
            share=0.0,
            members=(),
            comparable=True,
            reason=f"{pending} of {k} drafts pending",
        )
    majority, members = ranked[0]
    agreed = lone_top and top >= needed
    # the pending drafts cannot make the panel not comparable: two answers already conflict,
    # or the not-comparable drafts cannot come to outnumber the largest group
    stays_comparable = len(ranked) >= 2 or nc + pending <= top
    # accepted for good when no completion of the pending drafts can tie or overtake it
    sure_accept = agreed and top > second + pending and stays_comparable
    # refused for good when no group can reach `needed`
    sure_refuse = top + pending < needed and stays_comparable
    decided = pending == 0 or sure_accept or sure_refuse
    answers = len(ranked)
    exact_why = ""
    if agreed and exact is not None:
        confirmed, exact_why, sure = _exactly(members, exact, needed=needed, pending=pending)
        decided = pending == 0 or sure_refuse or (sure_accept and sure)
        if confirmed is None:
            agreed = False
        else:
            members, top = confirmed, len(confirmed)
    if agreed:
        reason = f"{top} of {k} drafts agree ({majority.kind})"
    elif exact_why:
        reason = f"drafts give the same answer but not the same words: {exact_why}"
    elif not lone_top:
        reason = f"drafts disagree: {answers} answers, the largest tied at {top} of {k}"
    else:
        reason = f"drafts disagree: {top} of {k} agree, {needed} needed ({answers} answers)"
    if not decided:
        reason += f"; {pending} pending"
    return Tally(
        decided=decided,
        agreed=agreed if decided else False,
        majority=majority,
        share=top / k,
        members=tuple(members),
        comparable=True,
        reason=reason,
    )


def _exactly(
    members: list[int], exact: Sequence[str | None], *, needed: int, pending: int
) -> tuple[list[int] | None, str, bool]:
    """The members that gave one exact form, when enough did.

    Returns ``(members, why, sure)``: the confirmed members (``None`` when no exact form
    has ``needed`` of them with no other as many), why not, and whether the pending drafts
    can no longer change that.
    """
    groups: dict[str, list[int]] = {}
    for i in members:
        form = exact[i] if i < len(exact) else None
        if form is not None:
            groups.setdefault(form, []).append(i)
    ranked = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    top = len(ranked[0]) if ranked else 0
    second = len(ranked[1]) if len(ranked) > 1 else 0
    if top >= needed and top > second:
        return ranked[0], "", top > second + pending
    why = f"{top} of {len(members)} give the same exact form, {needed} needed"
    return None, why, top + pending < needed
