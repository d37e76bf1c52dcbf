"""Breakers and task totals in Redis, shared by every worker and replica (the ``redis`` extra).

Each :class:`~tiered_router.state.StateStore` operation is one Lua script
(:mod:`tiered_router.state._lua`), so it runs atomically on the server: two processes
recording failures at once both count, a half-open trial is handed to one caller only, and
a task's totals add up exactly. Every key carries a TTL (``ttl_s`` for tasks; a few windows
for breakers), so nothing piles up.

Time comes from the Redis server (``TIME``) unless ``clock="caller"``: every process then
reads the same clock, whatever their own monotonic clocks say.

A task turn's record is *sent* before the turn returns and confirmed in the background
(``confirm_writes=False``, the default): the script's bytes are on the connection before the
caller gets its answer, so a command any process sends after that answer (the task's next
turn, on this replica or another) reaches Redis after it and sees the record, unless the
network holds the record back longer than the caller takes to send that next turn (a lost
packet's TCP retransmission waits 200 ms or more). The turn's own
totals are the ones read on entering the task with this turn applied, by the rules the
script runs (as :class:`~tiered_router.state.MemoryStateStore` applies them). A record that
Redis then refuses is counted in ``background_failures`` (and in
``tiered_router_state_fallbacks_total``) and logged. ``confirm_writes=True`` waits for
Redis's answer instead: one more round trip per task turn, and the totals as Redis holds
them, other replicas' concurrent turns included.

A slow or dead Redis never holds a turn up for long (:mod:`._redis_link`): every command is
bounded by ``timeout_s`` once written, getting a connection (a pool wait, or a new one
opened) by ``connect_timeout_s``, redis-py's own retries are off, and after a few failures
in a row the store refuses at once, without touching the network, for ``retry_s`` seconds.
Its errors are :class:`StateStoreUnavailable`; the router's
:class:`~tiered_router.state.SafeStateStore` answers those from in-process state with a
warning, so turns go on.

Example:
    ```yaml
    state:
      type: redis
      url: ${REDIS_URL}            # redis://[:password@]host:6379/0, rediss:// for TLS
      prefix: tiered_router        # every key starts with "tiered_router:"
      timeout_s: 0.05
    ```

    ```python
    store = RedisStateStore("redis://127.0.0.1:6379/0")
    router = Router(policy, state=store)
    ```

"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from tiered_router.exceptions import PolicyError
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
from tiered_router.state._redis_args import allow_args, record_args, snapshot_args, task_args
from tiered_router.state._redis_link import RedisLink, StateStoreUnavailable
from tiered_router.state._redis_monitor import RedisMonitorOps
from tiered_router.state._redis_replies import (
    admission_of,
    breaker_snapshot_of,
    state_of,
    task_snapshot_of,
    text_of,
)
from tiered_router.state._safe import Throttle
from tiered_router.state._task_cache import TaskCache, notes_channel

if TYPE_CHECKING:
    from tiered_router.policy._schema import BreakerConfig, StateConfig

__all__ = ["RedisStateStore", "StateStoreUnavailable"]

_MAX_BEHIND = 16
"""Background writes in flight at most; past it a success is written inline (backpressure)."""
_KNOWN_TASKS = 4096
"""Tasks whose last totals are kept, as the base of a sent (unconfirmed) record."""
_WARN_EVERY_S = 30.0
"""Least seconds between two warnings about records Redis did not confirm."""

logger = logging.getLogger("tiered_router.state")


class RedisStateStore(RedisMonitorOps):
    """A :class:`~tiered_router.state.StateStore` on Redis.

    Args:
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS, ``unix://``).
        prefix: Start of every key (``<prefix>:breaker:<backend>``, ``<prefix>:task:<id>``).
        timeout_s: Longest wait for Redis's answer to a command written on a connection.
        ttl_s: Lifetime of a task's keys after its last update.
        retry_s: After a few failures in a row, how long to answer
            :class:`StateStoreUnavailable` at once before trying Redis again.
        clock: ``server`` (Redis ``TIME``, shared by every process) or ``caller`` (the
            ``now`` each call passes; for tests with a fake clock).
        cache_s: How long a breaker last seen closed is admitted without asking Redis, and
            how long a success in that state is written in the background instead of
            awaited; ``0`` asks Redis on every call. A breaker another process opened is
            seen here within this time.
        confirm_writes: Wait for Redis's answer to a task turn's record (async path)
            instead of sending it before the turn returns and confirming it in the
            background. The sync path always waits.
        task_cache_s: Above 0, a task's repeat turns in this process (async path) reuse
            its totals instead of reading Redis, until another process writes the task
            (this process hears of it on a pub/sub channel; :mod:`._task_cache`), and for
            at most this many seconds after Redis last confirmed them. ``0`` (the
            default) reads Redis on every turn.
        connect_timeout_s: Longest wait for a connection: a free one from the pool, or a
            new one opened.

    Raises:
        ValueError: ``url`` is not a ``redis://``, ``rediss://`` or ``unix://`` URL.

    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "tiered_router",
        timeout_s: float = 0.05,
        ttl_s: float = 86_400.0,
        retry_s: float = 1.0,
        clock: Literal["server", "caller"] = "server",
        cache_s: float = 0.1,
        confirm_writes: bool = False,
        task_cache_s: float = 0.0,
        connect_timeout_s: float = 1.0,
    ) -> None:
        self._link = RedisLink(
            url, timeout_s=timeout_s, retry_s=retry_s, connect_timeout_s=connect_timeout_s
        )
        self.where = self._link.where
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.retry_s = retry_s
        self.clock = clock
        self._lock = threading.Lock()
        self.cache_s = cache_s
        self._closed_seen: dict[str, float] = {}  # breaker -> monotonic time seen closed
        self._behind: dict[str, tuple[int, Sequence[object]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.behind_s = 0.01
        """Successes on a closed breaker wait at most this long to be written together."""
        self.background_failures = 0
        """Background writes (successes in the closed state, sent task records) that Redis
        did not take."""
        self.confirm_writes = confirm_writes
        self._known: OrderedDict[str, TaskSnapshot] = OrderedDict()
        self._warnings = Throttle(_WARN_EVERY_S)
        self.holder = secrets.token_hex(8)
        """This store's name among the holders of a task's copy (see ``task_cache_s``)."""
        self._notes = notes_channel(prefix)
        self.task_cache = (
            TaskCache(
                self._link,
                channel=notes_channel(prefix, self.holder),
                task_keys=self.task_key(""),
                max_age_s=task_cache_s,
            )
            if task_cache_s > 0
            else None
        )
        self.task_reads_saved = 0
        """Task turns that reused this process's copy of the totals instead of reading."""

    @classmethod
    def from_config(cls, config: StateConfig) -> RedisStateStore:
        """Build the store from a policy's ``state:`` section (``type: redis``)."""
        if config.url is None:
            raise PolicyError("state.url: required when type is redis", field="state.url")
        return cls(
            config.url.get_secret_value(),
            prefix=config.prefix,
            timeout_s=config.timeout_s,
            ttl_s=config.ttl_s,
            retry_s=config.retry_s,
            cache_s=config.cache_s,
            confirm_writes=config.confirm_writes,
            task_cache_s=config.task_cache_s,
            connect_timeout_s=config.connect_timeout_s,
        )

    def __repr__(self) -> str:
        return f"RedisStateStore({self.where!r}, prefix={self.prefix!r})"

    # -- the closed-state cache ---------------------------------------------------------------

    def _seen(self, name: str, state: BreakerState) -> None:
        if state == "closed":
            self._closed_seen[name] = time.monotonic()
        else:
            self._closed_seen.pop(name, None)

    def _fresh(self, name: str) -> bool:
        seen = self._closed_seen.get(name)
        return seen is not None and time.monotonic() - seen < self.cache_s

    def _background(self, name: str, args: Sequence[object]) -> None:
        # successes are added up per breaker and written together every behind_s: one
        # script call carries many of them (a busy worker sends a few per second, not one
        # per turn); the counts stay exact
        count, _ = self._behind.get(name, (0, args))
        self._behind[name] = (count + 1, args)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.behind_s, self._write_behind)

    def _write_behind(self) -> None:
        self._timer = None
        batch, self._behind = self._behind, {}
        for name, (count, args) in batch.items():
            self._link.track(asyncio.ensure_future(self._write(name, [*args[:-1], count])))

    async def _write(self, name: str, args: Sequence[object]) -> None:
        try:
            state = state_of(await self._link.acall("record", [self.breaker_key(name)], args))
            self._seen(name, state)
        except StateStoreUnavailable:
            self.background_failures += 1  # the turns are long done; nothing else to tell

    async def flush(self) -> None:
        """Write the successes still waiting, and wait for the writes in flight."""
        if self._timer is not None:
            self._timer.cancel()
            self._write_behind()
        await self._link.drain()

    def close(self) -> None:
        """Close the sync client's connections."""
        self._link.close()

    async def aclose(self) -> None:
        """Finish the background writes, then close both clients' connections."""
        if self.task_cache is not None:
            await self.task_cache.aclose()
        await self.flush()
        await self._link.aclose()

    def ping(self) -> bool:
        """Whether Redis answers now (for readiness checks); never raises."""
        return self._link.ping()

    # -- keys and arguments -----------------------------------------------------------------

    def breaker_key(self, name: str) -> str:
        """The key of backend ``name``'s breaker."""
        return f"{self.prefix}:breaker:{name}"

    def task_key(self, task_id: str) -> str:
        """The key of task ``task_id``."""
        return f"{self.prefix}:task:{task_id}"

    def _now(self, now: float) -> str:
        return repr(float(now)) if self.clock == "caller" else ""

    def _task_args(
        self, delta: TaskDelta, rules: TaskRules, *, answer: bool = True
    ) -> list[object]:
        cache = self.task_cache
        return task_args(
            delta,
            rules,
            ttl_ms=self.ttl_ms,
            answer=answer,
            notes=self._notes,
            holder=self.holder,
            holds=cache is not None and cache.listening,
        )

    # -- sync --------------------------------------------------------------------------------

    def breaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """See :meth:`tiered_router.state.StateStore.breaker_allow`."""
        if self._fresh(name):
            return Admission(allowed=True, state="closed")
        reply = self._link.call(
            "allow", [self.breaker_key(name)], allow_args(self._now(now), config)
        )
        admission = admission_of(reply)
        self._seen(name, admission.state)
        return admission

    def breaker_record(
        self,
        name: str,
        outcome: Outcome,
        *,
        now: float,
        config: BreakerConfig,
        token: str | None = None,
    ) -> BreakerState:
        """See :meth:`tiered_router.state.StateStore.breaker_record`."""
        args = record_args(self._now(now), outcome, token, config)
        waiting = self._behind.pop(name, None)
        if waiting is not None:  # batched successes land first (a cancelled call runs here)
            count, earlier = waiting
            self._link.call("record", [self.breaker_key(name)], [*earlier[:-1], count])
        state = state_of(self._link.call("record", [self.breaker_key(name)], args))
        self._seen(name, state)
        return state

    def breaker_snapshot(self, name: str, *, now: float, config: BreakerConfig) -> BreakerSnapshot:
        """See :meth:`tiered_router.state.StateStore.breaker_snapshot`."""
        args = snapshot_args(self._now(now), config)
        return breaker_snapshot_of(self._link.call("snapshot", [self.breaker_key(name)], args))

    def task_record(self, task_id: str, delta: TaskDelta, *, rules: TaskRules) -> TaskSnapshot:
        """See :meth:`tiered_router.state.StateStore.task_record`."""
        reply = self._link.call("task", [self.task_key(task_id)], self._task_args(delta, rules))
        snapshot = task_snapshot_of(reply)
        self._remember(task_id, snapshot)
        return snapshot

    def task_snapshot(self, task_id: str) -> TaskSnapshot:
        """See :meth:`tiered_router.state.StateStore.task_snapshot` (one ``HGETALL``)."""
        snapshot = task_snapshot_of(self._link.call("task_read", [self.task_key(task_id)], []))
        self._remember(task_id, snapshot)
        return snapshot

    # -- async -------------------------------------------------------------------------------

    async def abreaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """Async twin of :meth:`breaker_allow`."""
        if self._fresh(name):
            return Admission(allowed=True, state="closed")
        reply = await self._link.acall(
            "allow", [self.breaker_key(name)], allow_args(self._now(now), config)
        )
        admission = admission_of(reply)
        self._seen(name, admission.state)
        return admission

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
        args = record_args(self._now(now), outcome, token, config)
        if (
            token is None
            and outcome == "success"
            and self._fresh(name)
            and len(self._link.pending) < _MAX_BEHIND
        ):
            # the common case: a success on a closed breaker changes nothing anyone waits
            # for, so it goes to Redis in the background, off the turn's path
            self._link.check_up()
            self._background(name, args)
            return "closed"
        waiting = self._behind.pop(name, None)
        if waiting is not None:  # successes before this outcome land before it
            count, earlier = waiting
            await self._write(name, [*earlier[:-1], count])
        state = state_of(await self._link.acall("record", [self.breaker_key(name)], args))
        self._seen(name, state)
        return state

    async def abreaker_snapshot(
        self, name: str, *, now: float, config: BreakerConfig
    ) -> BreakerSnapshot:
        """Async twin of :meth:`breaker_snapshot`."""
        args = snapshot_args(self._now(now), config)
        return breaker_snapshot_of(
            await self._link.acall("snapshot", [self.breaker_key(name)], args)
        )

    async def atask_record(
        self, task_id: str, delta: TaskDelta, *, rules: TaskRules
    ) -> TaskSnapshot:
        """Async twin of :meth:`task_record`.

        Unless ``confirm_writes``, a task read in this process lately has its record sent
        and confirmed in the background (see the module's docs); it returns the totals read
        last with this turn applied. Otherwise it waits for Redis's answer.
        """
        keys = [self.task_key(task_id)]
        base = self._known.get(task_id)
        cache = self.task_cache
        if cache is not None:
            cache.wrote(task_id)  # a read of the task in flight may miss this record
        if self.confirm_writes or base is None:
            args = self._task_args(delta, rules)
            mark = cache.mark() if cache is not None else None
            snapshot = task_snapshot_of(await self._link.acall("task", keys, args))
            if cache is not None and mark is not None:
                cache.confirmed(task_id, mark)
        else:
            args = self._task_args(delta, rules, answer=False)
            await self._link.send("task", keys, args, lost=lambda: self._lost_record(task_id))
            snapshot = apply_task_delta(base, delta, rules)
        self._remember(task_id, snapshot)
        return snapshot

    async def atask_snapshot(self, task_id: str) -> TaskSnapshot:
        """Async twin of :meth:`task_snapshot`.

        With ``task_cache_s``, a copy nobody else wrote since Redis confirmed it is
        returned without reading Redis.
        """
        cache = self.task_cache
        keys = [self.task_key(task_id)]
        if cache is None:
            reply = await self._link.acall("task_read", keys, [])
        else:
            known = self._known.get(task_id)
            if known is not None and cache.current(task_id):
                self.task_reads_saved += 1
                return known
            mark = cache.mark()
            if cache.listening:
                # the read also notes this process as holding a copy: the next record of the
                # task by anyone else tells it
                reply = await self._link.acall("task_hold", keys, [self.holder, self.ttl_ms])
            else:  # nobody would hear of it: a plain read, and no copy
                reply = await self._link.acall("task_read", keys, [])
        snapshot = task_snapshot_of(reply)
        self._remember(task_id, snapshot)
        if cache is not None:
            cache.confirmed(task_id, mark)
        return snapshot

    # -- sent records (confirmed in the background) ----------------------------------------

    def _remember(self, task_id: str, snapshot: TaskSnapshot) -> None:
        with self._lock:  # the sync path may run on other threads
            self._known[task_id] = snapshot
            self._known.move_to_end(task_id)
            while len(self._known) > _KNOWN_TASKS:
                self._known.popitem(last=False)

    def _lost_record(self, task_id: str) -> None:
        self.background_failures += 1
        if self.task_cache is not None:
            self.task_cache.drop(task_id)  # the copy counts a turn Redis may not have
        if not self._warnings.due():
            return  # counted; one warning per _WARN_EVERY_S is enough
        logger.warning(
            "Redis state store at %s did not confirm a record of task %r; its totals may "
            "miss that turn (records not confirmed so far: %d)",
            self.where,
            task_id,
            self.background_failures,
        )

    # -- per-client limits (the proxy's) ----------------------------------------------------

    async def alimit_admit(
        self, client: str, *, per_minute: int | None, spend_per_day: float | None
    ) -> tuple[bool, str, float]:
        """Count one request of ``client`` and say whether its limits let it through.

        Requests are counted per calendar minute, spend per UTC day (the server's clock).

        Returns:
            ``(allowed, reason, retry_after_s)``; ``reason`` is ``rate`` or ``spend``.
        """
        keys = [f"{self.prefix}:rate:{client}", f"{self.prefix}:spend:{client}"]
        args = [per_minute or 0, "" if spend_per_day is None else repr(float(spend_per_day))]
        allowed, reason, retry = await self._link.acall("limit_admit", keys, args)
        return bool(int(allowed)), text_of(reason), float(text_of(retry))

    async def alimit_spend(self, client: str, usd: float) -> None:
        """Add ``usd`` to ``client``'s spend today."""
        await self._link.acall("limit_spend", [f"{self.prefix}:spend:{client}"], [repr(float(usd))])
