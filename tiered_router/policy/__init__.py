"""The policy wing: the schema of policy YAML, its loader and the checks run at load.

Owns ``_schema`` (the pydantic models), ``_loader`` (YAML, ``${VAR}``, file:line errors),
``_checks`` (load-time checks, asked of the wings' registries), ``_ops`` / ``_limits``. Its
modules import only the root's shared values; this face's :func:`load_policy` alone imports
``gate``, ``scoring`` and ``backends`` to hand the loader their checks (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tiered_router.policy import _schema
from tiered_router.policy._schema import (
    BackendConfig,
    BreakerConfig,
    ClientLimits,
    DraftsConfig,
    EscalationConfig,
    GateConfig,
    HedgeConfig,
    LatencyModel,
    MonitorConfig,
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
    from tiered_router._types import PolicySource
    from tiered_router.gate import CheckRegistry

__all__ = [
    "BackendConfig",
    "BreakerConfig",
    "ClientLimits",
    "DraftsConfig",
    "EscalationConfig",
    "GateConfig",
    "HedgeConfig",
    "LatencyModel",
    "MonitorConfig",
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


def load_policy(
    source: PolicySource | Policy,
    *,
    env: Mapping[str, str] | None = None,
    check_registry: CheckRegistry | None = None,
) -> Policy:
    """Load, interpolate and validate a policy.

    Validation is one pass: the schema (unknown keys, wrong types, tiers naming missing
    backends, ...), then what :class:`~tiered_router.Router` builds from the policy: every
    gate check and its options (regexes compiled), the scorer (heuristic weight names, the
    learned scorer's weights file), each backend's type, preset, model and options. API keys
    are not needed here: a backend checks its key when it first makes a call. Custom gate
    checks and backend types must be registered before the policy is loaded.

    Args:
        source: A path to a policy file (``str`` or ``os.PathLike``; a ``str`` ending in
            ``.yaml`` / ``.yml`` is always a path), YAML text (a ``str`` with a newline or a
            ``:`` that is not an existing file), a mapping of the same shape, or a
            :class:`~tiered_router.policy.Policy` (returned as is).
        env: Where ``${VAR}`` references are looked up; ``os.environ`` (read at call time)
            when ``None``.
        check_registry: Where ``gate.checks`` names are looked up: the process-wide
            registry when ``None``; pass the private registry a gate will be built with.

    Returns:
        The validated policy.

    Raises:
        PolicyError: The file is missing or unreadable, the YAML is malformed or too large
            or too deeply nested, a variable is unset, or the policy does not validate.
            ``exc.problems`` lists every problem found, each with its line and dotted field
            path; no secret value is ever shown.
        TypeError: ``source`` is none of the accepted types.

    Example:
        ```python
        policy = load_policy("policy.yaml")
        policy = load_policy("policy.yaml", env={"INCEPTION_API_KEY": "sk-..."})
        ```

    """
    # the face composes the wings that build from a policy: each brings its own load-time
    # check, asked through its registry, so the loader and the schema import none of them
    from tiered_router.backends.registry import backend_problems
    from tiered_router.gate import default_registry
    from tiered_router.policy._loader import read_policy
    from tiered_router.scoring import scoring_problems

    gate = check_registry if check_registry is not None else default_registry()
    checks = (gate.policy_problems, scoring_problems, backend_problems)
    return read_policy(source, env=env, checks=checks)


# Policy.from_yaml loads through the face (the schema never imports the wings); Python runs
# this package's __init__ before any of its modules, so this is set before Policy is usable
_schema.LOADER.append(load_policy)
