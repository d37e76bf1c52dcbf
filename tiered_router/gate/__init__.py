"""The quality gate: deterministic checks on a draft, giving a :class:`Verdict`."""

from __future__ import annotations

from tiered_router.gate._verdict import CheckFailure, Verdict

__all__ = ["CheckFailure", "Verdict"]
