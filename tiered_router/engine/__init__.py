"""The engine wing: one turn's state machine and what drives it.

Owns ``_machine`` (decide, attempt, gate, next tier: no I/O), ``_dispatch`` (the calls, retries,
breaker), ``_streaming``, ``_offered`` (only offered tools reach the caller), ``_shadow``,
``_recording``, ``_latency``, ``_context``, ``_call_args`` and ``resilience``. Imports policy,
backends, gate, scoring and the root values; never the router.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.engine._machine import (
        LIFTED_TEXT_CALLS,
        EnginePorts,
        RoutedResult,
        TurnRun,
    )
    from tiered_router.engine._plan import decide_turn, plan_turn

__all__ = [
    "EnginePorts",
    "LIFTED_TEXT_CALLS",
    "RoutedResult",
    "TurnRun",
    "decide_turn",
    "plan_turn",
]


def __getattr__(name: str) -> Any:
    # the machine pulls in routing, pricing and the trace: `tiered_router.engine.resilience`
    # alone stays light
    if name in __all__:
        from tiered_router.engine import _machine, _plan

        return getattr(_plan if name in ("decide_turn", "plan_turn") else _machine, name)
    raise AttributeError(f"module 'tiered_router.engine' has no attribute {name!r}")
