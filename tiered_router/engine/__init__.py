"""The engine wing: one turn's state machine and what drives it.

Imports policy, backends, gate, scoring, panels, state and the root values; never the router.
Its modules, in the order a turn meets them (docs/architecture.md draws them):

- deciding: ``_call_args`` (what callers pass, checked), ``_plan`` (the first tier and the
  deadline), ``_capacity`` (a fast turn its queue would make late goes to the frontier),
  ``_latency`` (measured latencies), ``_context`` (``EnginePorts``, ``TaskHooks``: what the
  engine asks of the router and of a turn's task), ``_ports`` (the router's adapter);
- the state machine: ``_machine`` (``TurnRun``: the only writer of a turn's state; no I/O),
  ``_result`` (the kept draft, the result or typed error), ``_offered`` (only offered tool
  calls reach the caller), ``_recording`` (opt-in request and output records);
- driving: ``_drive`` (the loop, async and sync), ``_dispatch`` (calls under breakers and
  retries, the trace's exit), ``resilience`` (retries, deadline, breaker), ``_streaming`` and
  ``_chunks`` (routed streams and one try of a streamed call);
- in flight: ``_flight_plan`` (the plan, the race's pure decision, what both flights share),
  ``_flight`` (asyncio) and ``_flight_sync`` (threads), ``_panel_plan`` (which drafts a
  panel sends), ``_panel`` (their tally into the turn), ``_hedge`` (when to start the
  hedged frontier call);
- after the turn: ``_shadow`` (a sampled share runs on the other tier, for labels).
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
