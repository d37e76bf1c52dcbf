"""The in-process state store (the default): plain dicts under one lock."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiered_router.state._base import (
    Admission,
    BreakerSnapshot,
    BreakerState,
    Outcome,
    TaskDelta,
    TaskRules,
    TaskSnapshot,
    apply_task_delta,
)
from tiered_router.state._monitor import MonitorRules, MonitorSnapshot, MonitorWindows

if TYPE_CHECKING:
    from tiered_router.policy._schema import BreakerConfig

__all__ = ["MemoryStateStore"]

_BUCKETS = 10
"""The failure window is kept as this many buckets of ``window_s / _BUCKETS`` seconds."""


@dataclass(slots=True)
class _Breaker:
    opened_at: float | None = None
    consecutive: int = 0
    buckets: dict[int, list[int]] = field(default_factory=dict)  # index -> [calls, failures]
    trial: str | None = None
    trial_at: float = 0.0

    def state(self, now: float, config: BreakerConfig) -> BreakerState:
        if self.opened_at is None:
            return "closed"
        return "half_open" if now - self.opened_at >= config.cooldown_s else "open"

    def window(self, now: float, config: BreakerConfig) -> tuple[int, int]:
        width = config.window_s / _BUCKETS
        current = int(now // width)
        for index in [i for i in self.buckets if i <= current - _BUCKETS]:
            del self.buckets[index]
        calls = sum(b[0] for b in self.buckets.values())
        failures = sum(b[1] for b in self.buckets.values())
        return calls, failures

    def count(self, now: float, config: BreakerConfig, *, failed: bool) -> None:
        bucket = self.buckets.setdefault(int(now // (config.window_s / _BUCKETS)), [0, 0])
        bucket[0] += 1
        bucket[1] += failed

    def open(self, now: float) -> None:
        self.opened_at = now
        self.trial = None

    def close(self) -> None:
        self.opened_at = None
        self.trial = None
        self.consecutive = 0
        self.buckets.clear()


@dataclass(slots=True)
class _Task:
    snapshot: TaskSnapshot = field(default_factory=TaskSnapshot)


_CLOSED = Admission(allowed=True, state="closed")
_OPEN = Admission(allowed=False, state="open")
"""The two answers without a trial token: frozen values, shared rather than built per call."""


class MemoryStateStore:
    """Breakers and task totals in this process (the default :class:`StateStore`).

    Thread-safe; the async methods run the sync ones (nothing here waits).

    Args:
        max_tasks: Tasks kept; the least recently updated one is dropped past it.
    """

    def __init__(self, *, max_tasks: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._breakers: dict[str, _Breaker] = {}
        self._tasks: OrderedDict[str, _Task] = OrderedDict()
        self._max_tasks = max_tasks
        self._tokens = itertools.count(1)
        self._monitor = MonitorWindows()

    def __repr__(self) -> str:
        return f"MemoryStateStore(breakers={len(self._breakers)}, tasks={len(self._tasks)})"

    # -- breakers ------------------------------------------------------------------------------

    def breaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """See :meth:`StateStore.breaker_allow`."""
        with self._lock:
            b = self._breakers.setdefault(name, _Breaker())
            state = b.state(now, config)
            if state == "closed":
                return _CLOSED
            if state == "open":
                return _OPEN
            if b.trial is not None and now - b.trial_at < config.trial_lease_s:
                return Admission(allowed=False, state=state)
            b.trial = f"{name}:{next(self._tokens)}"
            b.trial_at = now
            return Admission(allowed=True, state=state, token=b.trial)

    def breaker_record(
        self,
        name: str,
        outcome: Outcome,
        *,
        now: float,
        config: BreakerConfig,
        token: str | None = None,
    ) -> BreakerState:
        """See :meth:`StateStore.breaker_record`."""
        with self._lock:
            b = self._breakers.setdefault(name, _Breaker())
            if token is not None:
                if token == b.trial:
                    if outcome == "success":
                        b.close()
                    elif outcome == "failure":
                        b.open(now)
                    else:
                        b.trial = None
                return b.state(now, config)
            if b.opened_at is not None or outcome == "neutral":
                return b.state(now, config)
            if outcome == "success":
                b.consecutive = 0
                b.count(now, config, failed=False)
                return "closed"
            b.consecutive += 1
            b.count(now, config, failed=True)
            calls, failures = b.window(now, config)
            run = config.consecutive_failures
            if (run is not None and b.consecutive >= run) or (
                calls >= config.min_calls and failures / calls > config.failure_ratio
            ):
                b.open(now)
            return b.state(now, config)

    def breaker_snapshot(self, name: str, *, now: float, config: BreakerConfig) -> BreakerSnapshot:
        """See :meth:`StateStore.breaker_snapshot`."""
        with self._lock:
            b = self._breakers.get(name) or _Breaker()
            calls, failures = b.window(now, config)
            return BreakerSnapshot(
                state=b.state(now, config),
                consecutive_failures=b.consecutive,
                calls=calls,
                failures=failures,
                opened_at=b.opened_at,
                trial_in_flight=b.trial is not None,
            )

    # -- tasks ---------------------------------------------------------------------------------

    def task_record(self, task_id: str, delta: TaskDelta, *, rules: TaskRules) -> TaskSnapshot:
        """See :meth:`StateStore.task_record`."""
        with self._lock:
            t = self._tasks.pop(task_id, None) or _Task()
            self._tasks[task_id] = t  # most recently updated last
            while len(self._tasks) > self._max_tasks:
                self._tasks.popitem(last=False)
            t.snapshot = apply_task_delta(t.snapshot, delta, rules)
            return t.snapshot

    def task_snapshot(self, task_id: str) -> TaskSnapshot:
        """See :meth:`StateStore.task_snapshot`."""
        with self._lock:
            t = self._tasks.get(task_id)
            return t.snapshot if t is not None else TaskSnapshot()

    # -- the quality monitor's windows ----------------------------------------------------------

    def monitor_record(self, kind: str, matched: bool, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_record`."""
        return self._monitor.record(kind, matched, rules=rules)

    def monitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_snapshot`."""
        return self._monitor.snapshot(kind, rules=rules)

    async def amonitor_record(
        self, kind: str, matched: bool, *, rules: MonitorRules
    ) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_record`."""
        return self._monitor.record(kind, matched, rules=rules)

    async def amonitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_snapshot`."""
        return self._monitor.snapshot(kind, rules=rules)

    # -- async twins ---------------------------------------------------------------------------

    async def abreaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """Async twin of :meth:`breaker_allow`."""
        return self.breaker_allow(name, now=now, config=config)

    async def abreaker_record(
        self,
        name: str,
        outcome: Outcome,
        *,
        now: float,
        config: BreakerConfig,
        token: str | None = None,
    ) -> BreakerState:
        """Async twin of :meth:`breaker_record`."""
        return self.breaker_record(name, outcome, now=now, config=config, token=token)

    async def abreaker_snapshot(
        self, name: str, *, now: float, config: BreakerConfig
    ) -> BreakerSnapshot:
        """Async twin of :meth:`breaker_snapshot`."""
        return self.breaker_snapshot(name, now=now, config=config)

    async def atask_record(
        self, task_id: str, delta: TaskDelta, *, rules: TaskRules
    ) -> TaskSnapshot:
        """Async twin of :meth:`task_record`."""
        return self.task_record(task_id, delta, rules=rules)

    async def atask_snapshot(self, task_id: str) -> TaskSnapshot:
        """Async twin of :meth:`task_snapshot`."""
        return self.task_snapshot(task_id)
