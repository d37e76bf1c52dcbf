"""Retries, the per-turn deadline and the circuit breaker: the public path.

The code lives in :mod:`tiered_router.engine.resilience`; this module keeps
``tiered_router.resilience`` importable.
"""

from __future__ import annotations

from tiered_router.engine.resilience import (
    BreakerPass,
    CircuitBreaker,
    Deadline,
    RetrySchedule,
    breaker_outcome,
)

__all__ = ["BreakerPass", "CircuitBreaker", "Deadline", "RetrySchedule", "breaker_outcome"]
