"""Packing the Redis store's script arguments (the twin of :mod:`._redis_replies`).

Each function returns the ``ARGV`` of one script of :mod:`._lua`, in the order its comment
lists them. ``now`` is already a string: ``""`` for the Redis server's clock, else the
caller's time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tiered_router.state._base import Outcome, TaskDelta, TaskRules

if TYPE_CHECKING:
    from tiered_router.policy._schema import BreakerConfig

__all__ = ["BUCKETS", "allow_args", "record_args", "snapshot_args", "task_args"]

BUCKETS = 10
"""The breaker's failure window is kept as this many buckets (as in MemoryStateStore)."""


def _breaker_ttl_ms(config: BreakerConfig) -> int:
    longest = max(config.window_s, config.cooldown_s, config.trial_lease_s)
    return int((2 * longest + 60.0) * 1000)


def allow_args(now: str, config: BreakerConfig) -> list[object]:
    """``BREAKER_ALLOW``: now, cooldown_s, trial_lease_s, ttl_ms."""
    return [now, config.cooldown_s, config.trial_lease_s, _breaker_ttl_ms(config)]


def record_args(
    now: str, outcome: Outcome, token: str | None, config: BreakerConfig
) -> list[object]:
    """``BREAKER_RECORD`` for one outcome; the last argument is how many it carries."""
    return [
        now,
        outcome,
        token or "",
        config.cooldown_s,
        config.consecutive_failures or 0,
        config.min_calls,
        config.failure_ratio,
        config.window_s,
        BUCKETS,
        _breaker_ttl_ms(config),
        1,  # how many outcomes this record carries (successes are written in batches)
    ]


def snapshot_args(now: str, config: BreakerConfig) -> list[object]:
    """``BREAKER_SNAPSHOT``: now, cooldown_s, window_s, buckets."""
    return [now, config.cooldown_s, config.window_s, BUCKETS]


def task_args(
    delta: TaskDelta,
    rules: TaskRules,
    *,
    ttl_ms: int,
    answer: bool,
    notes: str,
    holder: str,
    holds: bool,
) -> list[object]:
    """``TASK_RECORD``'s one argument: its fields as a JSON list of strings.

    Args:
        delta: The turn's contribution to the totals.
        rules: The task's lock and latency-window rules.
        ttl_ms: The task key's lifetime after this record.
        answer: Whether the script returns the task's totals (else nothing: a sent record).
        notes: The start of every holder's channel (``<prefix>:task-notes:``).
        holder: This process's holder id.
        holds: Whether this process keeps a copy of the task (and is to be told).
    """
    fields = [
        ttl_ms,
        repr(float(delta.cost)),
        repr(float(delta.latency_s)),
        int(delta.escalated),
        int(delta.fast_decided),
        int(delta.fast_served),
        int(delta.gate_failures),
        int(delta.stalled),
        int(delta.clean),
        delta.rule or "",
        int(delta.input_tokens),
        int(delta.output_tokens),
        rules.lock_after_gate_failures or 0,
        int(rules.lock_on_stall),
        rules.unlock_after_clean_turns,
        rules.latency_window,
        json.dumps([list(item) for item in delta.latencies]),
        int(answer),
        notes,
        holder,
        int(holds),
        int(delta.step),
    ]
    return [json.dumps([str(field) for field in fields])]  # one argument packs faster
