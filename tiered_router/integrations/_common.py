"""What every framework adapter shares: the decision as metadata, tool calls, install hints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tiered_router.engine._machine import RoutedResult
from tiered_router.routing import Decision
from tiered_router.trace import Trace
from tiered_router.turn import SIGNAL_KEYS, ToolCall

__all__ = ["METADATA_KEY", "decision_metadata", "missing", "parse_arguments", "signals_of"]

METADATA_KEY = "tiered_router"
"""Key under which adapters put the routing decision (``response_metadata`` and the like)."""

# a turn_id bound to a model would give every turn the same id: adapters take the rest
_AGENT_KEYS = SIGNAL_KEYS - {"turn_id"}


def missing(extra: str, package: str, exc: ImportError) -> ImportError:
    """Return the ImportError to raise when a framework is not installed."""
    from tiered_router.exceptions import install_command

    error = ImportError(
        f"{package} is not installed: {install_command(extra)} "
        "(needed by tiered_router.integrations)"
    )
    error.__cause__ = exc
    return error


def decision_metadata(
    result: RoutedResult | None = None, *, decision: Decision | None = None
) -> dict[str, Any]:
    """Return the routing decision (and, with a result, its outcome) as a JSON-ready dict.

    Keys: ``tier`` (who answered), ``decided_tier``, ``backend``, ``model``, ``escalated``,
    ``escalations``, ``rule``, ``score``, ``threshold``, ``reasons``, ``turn_id``,
    ``task_id``, ``step``, ``cost``, ``latency_s``.
    """
    trace: Trace | None = result.trace if result is not None else None
    d = trace.decision if trace is not None else decision
    if d is None:
        raise ValueError("decision_metadata needs a result or a decision")
    out: dict[str, Any] = {
        "tier": result.tier if result is not None else d.tier,
        "decided_tier": d.tier,
        "backend": trace.backend if trace is not None else d.backend,
        "rule": d.rule,
        "score": round(d.score, 4),
        "threshold": d.threshold,
        "reasons": list(d.reasons[:4]),
    }
    if result is not None and trace is not None:
        out.update(
            model=result.completion.model,
            escalated=result.escalated,
            escalations=list(trace.escalations),
            turn_id=trace.turn_id,
            task_id=trace.metadata.get("task_id"),
            step=trace.metadata.get("agent_step"),
            cost=trace.cost,
            latency_s=round(trace.latency_s, 6),
        )
    return out


def parse_arguments(call: ToolCall) -> tuple[dict[str, Any] | None, str | None]:
    """Return ``(arguments, None)`` for valid JSON-object arguments, else ``(None, error)``."""
    try:
        value = call.parsed_arguments()
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"arguments are a JSON {type(value).__name__}, not an object"
    return value, None


def signals_of(value: Any) -> dict[str, Any]:
    """Validate agent signals passed to an adapter (``final``, ``step``, ``metadata``, ``task_id``).

    Raises:
        ValueError: When ``value`` is not a mapping or has unknown keys.

    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("tiered_router signals must be a mapping like {'final': True}")
    unknown = set(value) - _AGENT_KEYS
    if unknown:
        raise ValueError(
            f"unknown tiered_router signal(s) {sorted(unknown)}; known: {sorted(_AGENT_KEYS)}"
        )
    return dict(value)
