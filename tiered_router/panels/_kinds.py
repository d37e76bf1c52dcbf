"""Which kinds of turn a panel applies to (``drafts.when``): a property of the turn alone.

Pure: no I/O, no clock, no randomness. The engine plans a panel only for the kinds the policy
lists; the offline replay (:mod:`tiered_router.evaluation.panel`) follows the same rule.
"""

from __future__ import annotations

import re

from tiered_router.turn import Turn

__all__ = ["TURN_KINDS", "panel_kinds", "turn_kind"]

# a prompt that asks for a checkable final answer: options, a number, a boxed answer
_ANSWER_ASK = re.compile(
    r"(?im)^\s*\(?[A-E][).:]\s|\\boxed|answer is|final answer|^answer:|####|"
    r"how many|how much|what is the (?:value|sum|product|total)"
)


def panel_kinds(turn: Turn) -> frozenset[str]:
    """The ``drafts.when`` kinds a turn is (pure): ``tools``, ``json``, ``answer``, ``all``."""
    kinds = {"all"}
    if turn.tools:
        kinds.add("tools")
    fmt = turn.response_format
    if isinstance(fmt, dict) and str(fmt.get("type", "")).startswith("json"):
        kinds.add("json")
    for message in reversed(turn.messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str) and _ANSWER_ASK.search(content):
                kinds.add("answer")
            break
    return frozenset(kinds)


TURN_KINDS: tuple[str, ...] = ("tools", "json", "answer", "prose")
"""The kinds ``calibrate`` chooses a verification for, in the order a turn is given one."""


def turn_kind(turn: Turn) -> str:
    """The one kind a turn counts as (pure): ``tools``, ``json``, ``answer`` or ``prose``.

    A turn can be several :func:`panel_kinds` at once (tools offered to a prompt that asks for
    an answer); the first of :data:`TURN_KINDS` it is decides which ``drafts.kinds`` entry
    applies, in the engine and in the offline replay alike.
    """
    kinds = panel_kinds(turn)
    for kind in TURN_KINDS[:-1]:
        if kind in kinds:
            return kind
    return "prose"
