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
    TieredRouterError,
)
from tiered_router.gate import CheckFailure, QualityGate, Verdict, register_check
from tiered_router.policy import Policy, load_policy
from tiered_router.router import RoutedResult, Router
from tiered_router.routing import Decision
from tiered_router.scoring import HeuristicScorer, Score, Scorer
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
    "LoggingSink",
    "MemorySink",
    "Policy",
    "PolicyError",
    "QualityGate",
    "RoutedResult",
    "Router",
    "Score",
    "Scorer",
    "TieredRouterError",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Trace",
    "TraceSink",
    "Turn",
    "Usage",
    "Verdict",
    "load_policy",
    "register_check",
]
