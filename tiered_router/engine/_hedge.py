"""When to hedge a fast turn: start its frontier call while the fast side is undecided.

Pure, like the machine: :func:`hedge_delay` reads the policy's ``hedge:``, the decision and
the fast backend's measured latencies, and returns after how many seconds the driver starts
the frontier call (``0``: at once), or ``None`` for no hedge. The earliest trigger applies:

- ``band``: the score is within ``band`` of the threshold (the scorer cannot tell): at once;
- ``after_s``: a fixed delay;
- ``after_percentile``: the fast backend's latency at that percentile, once it has
  ``min_samples`` measured calls (a fast side slower than usual is likely stuck or long).

A turn is not hedged when the decision is not ``fast``, when the frontier backend cannot take
the turn, when the policy does not escalate failed drafts (the hedge stands in for that
escalation), or when the turn's task forbids hedging (``task.hedge: false``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiered_router.engine._machine import TurnRun

__all__ = ["Percentile", "hedge_delay"]

Percentile = Callable[[str, float, int], "float | None"]
"""``(backend, q, min_samples) -> seconds``: a backend's measured latency percentile."""


def hedge_delay(run: TurnRun, *, percentile: Percentile) -> float | None:
    """Seconds after the fast side starts at which to start the frontier call, or ``None``."""
    hedge = run.policy.hedge
    if hedge is None or not _may_hedge(run):
        return None
    decision = run.decision
    band = hedge.band is not None and abs(decision.score - decision.threshold) <= hedge.band
    measured = None
    if hedge.after_percentile is not None:
        measured = percentile(
            run.policy.backend_for("fast"), hedge.after_percentile, hedge.min_samples
        )
    delays = [d for d in (0.0 if band else None, hedge.after_s, measured) if d is not None]
    return min(delays) if delays else None


def _may_hedge(run: TurnRun) -> bool:
    """A fast turn that may escalate a failed draft to a frontier that can take it."""
    if run.decision.tier != "fast" or not run.escalate:
        return False
    if not run.policy.escalation.on_gate_failure or not run.usable("frontier"):
        return False
    return run.task is None or run.task.may_hedge
