"""Checks of what callers pass to the router's methods, with errors that say how to fix it."""

from __future__ import annotations

from typing import Any

from tiered_router._types import Tier, Unset
from tiered_router.turn import Turn

__all__ = ["checked_deadline", "checked_tier", "checked_turn"]


def checked_turn(turn: Any) -> Turn:
    """Return ``turn`` if it is a :class:`~tiered_router.Turn`.

    Raises:
        TypeError: Anything else (a list of messages, a dict), with how to build a turn.

    """
    if isinstance(turn, Turn):
        return turn
    raise TypeError(
        f"expected a tiered_router.Turn, got {type(turn).__name__}: build one with "
        "Turn(messages, ...) or Turn.from_openai(**chat_completions_kwargs)"
    )


def checked_tier(tier: Any) -> Tier | None:
    """Return ``tier`` if it is ``fast``, ``frontier`` or ``None``; else raise ValueError."""
    if tier is None or tier == "fast" or tier == "frontier":
        return tier  # type: ignore[no-any-return]
    raise ValueError(f"tier must be 'fast', 'frontier' or None, not {tier!r}")


def checked_deadline(deadline_s: Any, *, unset: float | None = None) -> float | None:
    """Return a turn's deadline if it is a number of seconds > 0 or ``None``; else ValueError.

    ``UNSET`` gives ``unset`` (the policy's ``resilience.deadline_s``).
    """
    if isinstance(deadline_s, Unset):
        return unset
    if deadline_s is None:
        return None
    if isinstance(deadline_s, (int, float)) and not isinstance(deadline_s, bool) and deadline_s > 0:
        return float(deadline_s)
    raise ValueError(f"deadline_s must be a number of seconds > 0, or None; got {deadline_s!r}")
