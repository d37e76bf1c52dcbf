"""tiered_router: route an agent's model calls between a fast diffusion tier and a frontier tier.

For every turn it scores how hard the turn is, sends cheap turns to a fast diffusion model,
hard or final turns to a frontier model, checks every fast draft with a deterministic quality
gate and escalates a failing draft. Every turn returns a trace that explains what happened.

Example:
    ```python
    from tiered_router import Router, Turn

    router = Router.from_yaml("policy.yaml")
    result = router.complete(Turn([{"role": "user", "content": "hi"}]))
    print(result.tier, result.completion.text)
    ```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.engine._streaming import AsyncRoutedStream, RoutedStream
    from tiered_router.exceptions import (
        AllTiersFailed,
        BackendConnectionError,
        BackendError,
        BackendRateLimited,
        BackendResponseError,
        BackendStatusError,
        BackendTimeout,
        BackendUnavailable,
        CapabilityError,
        GateFailed,
        PolicyError,
        StreamInterrupted,
        TieredRouterError,
    )
    from tiered_router.gate import CheckFailure, QualityGate, Verdict, register_check
    from tiered_router.policy import load_policy
    from tiered_router.policy._schema import Policy
    from tiered_router.router import RoutedResult, Router
    from tiered_router.routing import Decision
    from tiered_router.scoring import HeuristicScorer, Score, Scorer
    from tiered_router.task import Task, TaskSummary
    from tiered_router.trace import Attempt, JSONLSink, LoggingSink, MemorySink, Trace, TraceSink
    from tiered_router.turn import (
        Completion,
        CompletionChunk,
        ToolCall,
        ToolCallDelta,
        ToolSpec,
        Turn,
        Usage,
    )

__version__ = "0.1.0"

__all__ = [
    "AllTiersFailed",
    "AsyncRoutedStream",
    "Attempt",
    "BackendConnectionError",
    "BackendError",
    "BackendRateLimited",
    "BackendResponseError",
    "BackendStatusError",
    "BackendTimeout",
    "BackendUnavailable",
    "CapabilityError",
    "CheckFailure",
    "Completion",
    "CompletionChunk",
    "Decision",
    "GateFailed",
    "HeuristicScorer",
    "JSONLSink",
    "load_policy",
    "LoggingSink",
    "MemorySink",
    "Policy",
    "PolicyError",
    "QualityGate",
    "register_check",
    "RoutedResult",
    "RoutedStream",
    "Router",
    "Score",
    "Scorer",
    "StreamInterrupted",
    "Task",
    "TaskSummary",
    "TieredRouterError",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Trace",
    "TraceSink",
    "Turn",
    "Usage",
    "Verdict",
]

_LAZY: dict[str, str] = {
    "AllTiersFailed": "tiered_router.exceptions",
    "AsyncRoutedStream": "tiered_router.engine._streaming",
    "Attempt": "tiered_router.trace",
    "BackendConnectionError": "tiered_router.exceptions",
    "BackendError": "tiered_router.exceptions",
    "BackendRateLimited": "tiered_router.exceptions",
    "BackendResponseError": "tiered_router.exceptions",
    "BackendStatusError": "tiered_router.exceptions",
    "BackendTimeout": "tiered_router.exceptions",
    "BackendUnavailable": "tiered_router.exceptions",
    "CapabilityError": "tiered_router.exceptions",
    "CheckFailure": "tiered_router.gate",
    "Completion": "tiered_router.turn",
    "CompletionChunk": "tiered_router.turn",
    "Decision": "tiered_router.routing",
    "GateFailed": "tiered_router.exceptions",
    "HeuristicScorer": "tiered_router.scoring",
    "JSONLSink": "tiered_router.trace",
    "load_policy": "tiered_router.policy",
    "LoggingSink": "tiered_router.trace",
    "MemorySink": "tiered_router.trace",
    "Policy": "tiered_router.policy",
    "PolicyError": "tiered_router.exceptions",
    "QualityGate": "tiered_router.gate",
    "register_check": "tiered_router.gate",
    "RoutedResult": "tiered_router.router",
    "RoutedStream": "tiered_router.engine._streaming",
    "Router": "tiered_router.router",
    "Score": "tiered_router.scoring",
    "Scorer": "tiered_router.scoring",
    "StreamInterrupted": "tiered_router.exceptions",
    "Task": "tiered_router.task",
    "TaskSummary": "tiered_router.task",
    "TieredRouterError": "tiered_router.exceptions",
    "ToolCall": "tiered_router.turn",
    "ToolCallDelta": "tiered_router.turn",
    "ToolSpec": "tiered_router.turn",
    "Trace": "tiered_router.trace",
    "TraceSink": "tiered_router.trace",
    "Turn": "tiered_router.turn",
    "Usage": "tiered_router.turn",
    "Verdict": "tiered_router.gate",
}


def __getattr__(name: str) -> Any:
    """Import public names on first use, so ``import tiered_router`` stays light."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered_router' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
