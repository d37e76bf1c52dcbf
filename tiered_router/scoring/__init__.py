"""Scoring: how hard is a turn? A :class:`Scorer` maps a turn to a :class:`Score` in [0, 1].

Scorers are pure: no I/O, no clock, no randomness. The same turn always gets the same score.
"""

from __future__ import annotations

from tiered_router.scoring._base import Score, Scorer

__all__ = ["Score", "Scorer"]
