"""Deciding a tier: rules first (first match wins), then the score threshold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tiered_router._types import Tier

__all__ = ["Decision"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Where a turn goes, and why.

    Attributes:
        tier: ``fast`` or ``frontier``.
        backend: Name of the backend serving that tier.
        score: The scorer's value in [0, 1].
        threshold: The policy threshold the score was compared with.
        rule: Name of the rule that decided, or ``None`` when the threshold did.
        reasons: Human-readable reasons (rule first, then the scorer's).
        features: The scorer's raw feature values.
        contributions: Each feature's signed share of the score.
    """

    tier: Tier
    backend: str
    score: float
    threshold: float
    rule: str | None = None
    reasons: tuple[str, ...] = ()
    features: Mapping[str, float] = field(default_factory=dict)
    contributions: Mapping[str, float] = field(default_factory=dict)
