"""Decoding the Redis store's script replies into the state-store value types."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

from tiered_router.state._base import Admission, BreakerSnapshot, BreakerState, TaskSnapshot
from tiered_router.state._monitor import MONITOR_STATES, MonitorSnapshot, MonitorState

__all__ = [
    "admission_of",
    "breaker_snapshot_of",
    "monitor_snapshot_of",
    "state_of",
    "task_snapshot_of",
    "text_of",
    "where_of",
]


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_STATES: dict[str, BreakerState] = {"closed": "closed", "open": "open", "half_open": "half_open"}


def state_of(value: Any) -> BreakerState:
    return _STATES[text_of(value)]


def admission_of(reply: Sequence[Any]) -> Admission:
    state, allowed, token = reply
    return Admission(
        allowed=bool(int(allowed)), state=state_of(state), token=text_of(token) or None
    )


def breaker_snapshot_of(reply: Sequence[Any]) -> BreakerSnapshot:
    state, consecutive, calls, failures, opened_at, trial = reply
    opened = text_of(opened_at)
    return BreakerSnapshot(
        state=state_of(state),
        consecutive_failures=int(consecutive),
        calls=int(calls),
        failures=int(failures),
        opened_at=float(opened) if opened else None,
        trial_in_flight=bool(int(trial)),
    )


def task_snapshot_of(reply: Sequence[Any] | Mapping[Any, Any]) -> TaskSnapshot:
    """A task hash as a snapshot: ``HGETALL``'s mapping, or a script's flat list."""
    if isinstance(reply, Mapping):
        fields = {text_of(k): text_of(v) for k, v in reply.items()}
    else:
        fields = {text_of(reply[i]): text_of(reply[i + 1]) for i in range(0, len(reply), 2)}
    rules: dict[str, int] = {}
    recent: dict[str, tuple[tuple[float, int], ...]] = {}
    for name, value in fields.items():
        if name.startswith("rule:"):
            rules[name[5:]] = int(value)
        elif name.startswith("recent:"):
            pairs = cast("list[list[float]]", json.loads(value))
            recent[name[7:]] = tuple((float(a), int(b)) for a, b in pairs)

    def ints(key: str) -> int:
        return int(fields.get(key, "0"))

    return TaskSnapshot(
        steps=ints("steps"),
        cost=float(fields.get("cost", "0")),
        latency_s=float(fields.get("latency_s", "0")),
        escalations=ints("escalations"),
        fast_decided=ints("fast_decided"),
        fast_served=ints("fast_served"),
        gate_failures=ints("gate_failures"),
        stalls=ints("stalls"),
        locked_by=fields.get("locked_by"),
        clean_streak=ints("clean_streak"),
        window_failures=ints("window_failures"),
        rules=rules,
        input_tokens=ints("input_tokens"),
        output_tokens=ints("output_tokens"),
        recent=recent,
    )


def where_of(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port or 6379}" if parts.scheme != "unix" else parts.path


def _monitor_state(value: Any) -> MonitorState:
    text = text_of(value)
    for state in MONITOR_STATES:
        if state == text:
            return state
    return "ok"


def monitor_snapshot_of(kind: str, reply: Sequence[Any]) -> MonitorSnapshot:
    """``MONITOR_RECORD``'s reply: ``{n, m, total, previous, state}``."""
    n, m, total, previous, state = reply
    return MonitorSnapshot(
        kind=kind,
        compared=int(n),
        matched=int(m),
        total=int(total),
        state=_monitor_state(state),
        previous=_monitor_state(previous),
    )
