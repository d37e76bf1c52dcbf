"""The Redis store's monitor windows (:mod:`._monitor`), one Lua script per operation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiered_router.state._monitor import MonitorRules, MonitorSnapshot, judge
from tiered_router.state._redis_replies import monitor_snapshot_of, text_of

if TYPE_CHECKING:
    from tiered_router.state._redis_link import RedisLink

__all__ = ["RedisMonitorOps"]


class RedisMonitorOps:
    """The ``monitor_*`` operations of :class:`~tiered_router.state.redis_store.RedisStateStore`.

    A kind's window is two keys: ``<prefix>:monitor:<kind>`` (a hash: matched count, total,
    last state) and ``<prefix>:monitor:<kind>:window`` (a list of ``1`` / ``0``, oldest
    first). ``MONITOR_RECORD`` appends, trims to the window and judges the kind in one
    script, so two workers' records both count and only one of them sees a change.
    """

    prefix: str
    _link: RedisLink

    # -- the quality monitor's windows ---------------------------------------------------------

    def monitor_keys(self, kind: str) -> list[str]:
        """The keys of ``kind``'s monitor window: its counts (a hash) and its bits (a list)."""
        return [f"{self.prefix}:monitor:{kind}", f"{self.prefix}:monitor:{kind}:window"]

    @staticmethod
    def _monitor_args(matched: bool, rules: MonitorRules) -> list[object]:
        return [
            "1" if matched else "0",
            rules.window,
            rules.min_compared,
            repr(float(rules.target)),
            repr(float(rules.z)),
            "1" if rules.enforce else "0",
            int(rules.ttl_s * 1000),
        ]

    def monitor_record(self, kind: str, matched: bool, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_record` (one Lua script)."""
        reply = self._link.call(
            "monitor_record", self.monitor_keys(kind), self._monitor_args(matched, rules)
        )
        return monitor_snapshot_of(kind, reply)

    def monitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """See :meth:`tiered_router.state.MonitorStore.monitor_snapshot`."""
        return self._read_monitor(
            kind, self._link.call("monitor_read", self.monitor_keys(kind), []), rules
        )

    async def amonitor_record(
        self, kind: str, matched: bool, *, rules: MonitorRules
    ) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_record`."""
        reply = await self._link.acall(
            "monitor_record", self.monitor_keys(kind), self._monitor_args(matched, rules)
        )
        return monitor_snapshot_of(kind, reply)

    async def amonitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_snapshot`."""
        reply = await self._link.acall("monitor_read", self.monitor_keys(kind), [])
        return self._read_monitor(kind, reply, rules)

    @staticmethod
    def _read_monitor(kind: str, reply: Sequence[object], rules: MonitorRules) -> MonitorSnapshot:
        n, m, total = (int(text_of(v)) for v in reply)
        state = judge(n, m, rules)
        return MonitorSnapshot(
            kind=kind, compared=n, matched=m, total=total, state=state, previous=state
        )
