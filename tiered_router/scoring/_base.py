"""The scorer protocol and the score value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tiered_router.turn import Turn

__all__ = ["Score", "Scorer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """How hard a turn is, and why.

    Attributes:
        value: Difficulty in [0, 1]; above the policy's threshold goes to the frontier tier.
        features: Raw feature values (e.g. ``prompt_tokens: 812``).
        contributions: Each feature's share of ``value`` (signed), by feature name.
        reasons: Human-readable reasons, most important first.
    """

    value: float
    features: Mapping[str, float] = field(default_factory=dict)
    contributions: Mapping[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


@runtime_checkable
class Scorer(Protocol):
    """Maps a turn to a :class:`Score`. Must be pure and deterministic."""

    def score(self, turn: Turn) -> Score:
        """Score one turn."""
        ...
