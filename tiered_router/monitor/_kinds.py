"""Which kind a turn is, and whether two answers to it are the same (pure).

The monitor keeps its figures per turn kind, decided from the turn alone (before any call,
so that an enforcing kind can be tightened): ``tools`` (tools offered), ``json`` (a JSON
``response_format``), ``final`` (the prompt asks for a checkable final answer: options, a
number, a boxed value), ``prose`` (anything else). Two answers are compared by the panels'
"same answer" key (:func:`tiered_router.panels.answer_key`): equal keys match; when neither
answer has a checkable key the comparison is ``not_comparable`` and counts as neither.
"""

from __future__ import annotations

from typing import Literal

from tiered_router.panels import answer_key
from tiered_router.panels import turn_kind as panel_turn_kind
from tiered_router.policy._monitor import MonitorKind
from tiered_router.turn import Completion, Turn

__all__ = ["Comparison", "compare_answers", "turn_kind"]

Comparison = Literal["matched", "mismatched", "not_comparable"]
"""What comparing an accepted fast answer with the frontier's said."""


def turn_kind(turn: Turn) -> MonitorKind:
    """The monitor's kind of ``turn`` (pure): ``tools``, ``json``, ``final`` or ``prose``.

    The panels' :func:`~tiered_router.panels.turn_kind` (the same precedence the engine and
    ``drafts.kinds`` use), its ``answer`` named ``final``.
    """
    kind = panel_turn_kind(turn)
    return (
        "tools"
        if kind == "tools"
        else "json"
        if kind == "json"
        else ("final" if kind == "answer" else "prose")
    )


def compare_answers(fast: Completion, frontier: Completion, turn: Turn) -> Comparison:
    """Compare an accepted fast answer with the frontier's answer to the same turn (pure).

    ``prose`` turns are never comparable. Otherwise the two answers' keys are compared:
    ``matched`` when equal, ``not_comparable`` when neither has a checkable answer, and
    ``mismatched`` otherwise (one side called a tool or gave JSON and the other did not, or
    both did and differ).
    """
    if turn_kind(turn) == "prose":
        return "not_comparable"
    mine, theirs = answer_key(fast, turn), answer_key(frontier, turn)
    if not mine.comparable and not theirs.comparable:
        return "not_comparable"
    if (mine.kind, mine.value) == (theirs.kind, theirs.value):
        return "matched"
    return "mismatched"
