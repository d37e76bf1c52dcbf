"""The policy wing: the schema of policy YAML, its loader and the checks run at load.

Owns ``_schema`` (the pydantic models), ``_loader`` (YAML, ``${VAR}``, file:line errors),
``_checks`` (what the router would build), ``_ops`` / ``_limits`` (operating sections, sizes).
Imports only the root's shared values (``_types``, ``exceptions``) and ``scoring``' names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiered_router.policy._schema import (
    BackendConfig,
    BreakerConfig,
    ClientLimits,
    DraftsConfig,
    EscalationConfig,
    GateConfig,
    HedgeConfig,
    LatencyModel,
    Policy,
    Price,
    ResilienceConfig,
    RetryConfig,
    Rule,
    RuleCondition,
    ScoringConfig,
    ServerConfig,
    ShadowConfig,
    StateConfig,
    TaskConfig,
    Tiers,
)

if TYPE_CHECKING:
    from tiered_router.policy._loader import load_policy

__all__ = [
    "BackendConfig",
    "BreakerConfig",
    "ClientLimits",
    "DraftsConfig",
    "EscalationConfig",
    "GateConfig",
    "HedgeConfig",
    "LatencyModel",
    "Policy",
    "Price",
    "ResilienceConfig",
    "RetryConfig",
    "Rule",
    "RuleCondition",
    "ScoringConfig",
    "ServerConfig",
    "ShadowConfig",
    "StateConfig",
    "TaskConfig",
    "Tiers",
    "load_policy",
]


def __getattr__(name: str) -> Any:
    # the loader pulls in YAML and the load-time checks: import it on first use
    if name == "load_policy":
        from tiered_router.policy._loader import load_policy

        return load_policy
    raise AttributeError(f"module 'tiered_router.policy' has no attribute {name!r}")
