"""A store failure never fails a turn: :class:`SafeStateStore` falls back to local state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tiered_router.exceptions import TieredRouterError
from tiered_router.state._base import (
    Admission,
    BreakerSnapshot,
    BreakerState,
    Outcome,
    StateStore,
    TaskDelta,
    TaskRules,
    TaskSnapshot,
)
from tiered_router.state._memory import MemoryStateStore
from tiered_router.state._monitor import MonitorRules, MonitorSnapshot, MonitorStore

if TYPE_CHECKING:
    from tiered_router.policy._schema import BreakerConfig

__all__ = ["SafeStateStore", "Throttle"]

logger = logging.getLogger("tiered_router.state")

_T = TypeVar("_T")
_LOCAL = "local|"
"""Prefix of the trial tokens the fallback store issued, so their release goes back to it."""


class Throttle:
    """Says yes at most once per ``every_s`` seconds: for warnings that would flood a log."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last: float | None = None
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Whether to act now (and, if so, start a new quiet period)."""
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self.every_s:
                return False
            self._last = now
            return True


class SafeStateStore:
    """Wraps a store; when an operation raises, it runs on in-process state instead.

    The router wraps every store it is given in one of these. A failing operation is logged
    as a warning (at most once per ``warn_every_s`` seconds) and answered from a local
    :class:`MemoryStateStore`, so breakers keep working per process and turns go on.

    Args:
        store: The store to use while it works.
        warn_every_s: Least seconds between two warnings.
    """

    def __init__(self, store: StateStore, *, warn_every_s: float = 30.0) -> None:
        self.store = store
        self.local = MemoryStateStore()
        self._warnings = Throttle(warn_every_s)
        self._lock = threading.Lock()
        self.failures = 0
        """Operations that failed on ``store`` and ran locally."""

    def __repr__(self) -> str:
        return f"SafeStateStore({self.store!r})"

    def _failed(self, op: str, exc: Exception) -> None:
        with self._lock:
            self.failures += 1
        if not self._warnings.due():
            return
        # our own errors' messages name where and why, never a secret (StateStoreUnavailable:
        # "Redis state store at host:port failed: TimeoutError"); others' only their type
        why = f"{type(exc).__name__}: {exc}" if isinstance(exc, TieredRouterError) else ""
        logger.warning(
            "state store %s failed in %s (%s); using in-process state",
            type(self.store).__name__,
            op,
            why or type(exc).__name__,
        )

    def _run(self, op: str, primary: Callable[[], _T], fallback: Callable[[], _T]) -> _T:
        try:
            return primary()
        except Exception as exc:  # any store failure: never fail the turn
            self._failed(op, exc)
            return fallback()

    @staticmethod
    def _local_admission(admission: Admission) -> Admission:
        if admission.token is None:
            return admission
        return Admission(
            allowed=admission.allowed, state=admission.state, token=_LOCAL + admission.token
        )

    # -- sync ----------------------------------------------------------------------------------

    def breaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """See :meth:`StateStore.breaker_allow`."""
        return self._run(
            "breaker_allow",
            lambda: self.store.breaker_allow(name, now=now, config=config),
            lambda: self._local_admission(self.local.breaker_allow(name, now=now, config=config)),
        )

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
        if token is not None and token.startswith(_LOCAL):
            local_token = token[len(_LOCAL) :]
            return self.local.breaker_record(
                name, outcome, now=now, config=config, token=local_token
            )
        return self._run(
            "breaker_record",
            lambda: self.store.breaker_record(name, outcome, now=now, config=config, token=token),
            lambda: self.local.breaker_record(name, outcome, now=now, config=config),
        )

    def breaker_snapshot(self, name: str, *, now: float, config: BreakerConfig) -> BreakerSnapshot:
        """See :meth:`StateStore.breaker_snapshot`."""
        return self._run(
            "breaker_snapshot",
            lambda: self.store.breaker_snapshot(name, now=now, config=config),
            lambda: self.local.breaker_snapshot(name, now=now, config=config),
        )

    def task_record(self, task_id: str, delta: TaskDelta, *, rules: TaskRules) -> TaskSnapshot:
        """See :meth:`StateStore.task_record`."""
        return self._run(
            "task_record",
            lambda: self.store.task_record(task_id, delta, rules=rules),
            lambda: self.local.task_record(task_id, delta, rules=rules),
        )

    def task_snapshot(self, task_id: str) -> TaskSnapshot:
        """See :meth:`StateStore.task_snapshot`."""
        return self._run(
            "task_snapshot",
            lambda: self.store.task_snapshot(task_id),
            lambda: self.local.task_snapshot(task_id),
        )

    # -- async ---------------------------------------------------------------------------------

    async def abreaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """Async twin of :meth:`breaker_allow`."""
        try:
            return await self.store.abreaker_allow(name, now=now, config=config)
        except Exception as exc:
            self._failed("abreaker_allow", exc)
            return self._local_admission(self.local.breaker_allow(name, now=now, config=config))

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
        if token is not None and token.startswith(_LOCAL):
            local_token = token[len(_LOCAL) :]
            return self.local.breaker_record(
                name, outcome, now=now, config=config, token=local_token
            )
        try:
            return await self.store.abreaker_record(
                name, outcome, now=now, config=config, token=token
            )
        except Exception as exc:
            self._failed("abreaker_record", exc)
            return self.local.breaker_record(name, outcome, now=now, config=config)

    async def abreaker_snapshot(
        self, name: str, *, now: float, config: BreakerConfig
    ) -> BreakerSnapshot:
        """Async twin of :meth:`breaker_snapshot`."""
        try:
            return await self.store.abreaker_snapshot(name, now=now, config=config)
        except Exception as exc:
            self._failed("abreaker_snapshot", exc)
            return self.local.breaker_snapshot(name, now=now, config=config)

    async def atask_record(
        self, task_id: str, delta: TaskDelta, *, rules: TaskRules
    ) -> TaskSnapshot:
        """Async twin of :meth:`task_record`."""
        try:
            return await self.store.atask_record(task_id, delta, rules=rules)
        except Exception as exc:
            self._failed("atask_record", exc)
            return self.local.task_record(task_id, delta, rules=rules)

    async def atask_snapshot(self, task_id: str) -> TaskSnapshot:
        """Async twin of :meth:`task_snapshot`."""
        try:
            return await self.store.atask_snapshot(task_id)
        except Exception as exc:
            self._failed("atask_snapshot", exc)
            return self.local.task_snapshot(task_id)

    # -- the quality monitor's windows ---------------------------------------------------------

    def monitor_record(self, kind: str, matched: bool, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_record`.

        A store without monitor windows keeps them in this process, without a warning.
        """
        store = self.store
        if not isinstance(store, MonitorStore):
            return self.local.monitor_record(kind, matched, rules=rules)
        return self._run(
            "monitor_record",
            lambda: store.monitor_record(kind, matched, rules=rules),
            lambda: self.local.monitor_record(kind, matched, rules=rules),
        )

    def monitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_snapshot`."""
        store = self.store
        if not isinstance(store, MonitorStore):
            return self.local.monitor_snapshot(kind, rules=rules)
        return self._run(
            "monitor_snapshot",
            lambda: store.monitor_snapshot(kind, rules=rules),
            lambda: self.local.monitor_snapshot(kind, rules=rules),
        )

    async def amonitor_record(
        self, kind: str, matched: bool, *, rules: MonitorRules
    ) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_record`."""
        store = self.store
        if not isinstance(store, MonitorStore):
            return self.local.monitor_record(kind, matched, rules=rules)
        try:
            return await store.amonitor_record(kind, matched, rules=rules)
        except Exception as exc:
            self._failed("amonitor_record", exc)
            return self.local.monitor_record(kind, matched, rules=rules)

    async def amonitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_snapshot`."""
        store = self.store
        if not isinstance(store, MonitorStore):
            return self.local.monitor_snapshot(kind, rules=rules)
        try:
            return await store.amonitor_snapshot(kind, rules=rules)
        except Exception as exc:
            self._failed("amonitor_snapshot", exc)
            return self.local.monitor_snapshot(kind, rules=rules)
