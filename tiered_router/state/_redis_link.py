"""Talking to Redis for the state store: bounded waits, failing fast, and sent-only calls.

:class:`RedisLink` owns a sync and an asyncio redis-py client (each with a blocking pool of
at most ``_MAX_CONNECTIONS``), the scripts registered on them (:mod:`._lua`), and the rule
that a slow or dead Redis never holds a turn up for long. Two bounds, because they fail for
different reasons:

- getting a connection (a free one from the pool, or a new one opened: a TCP handshake and
  redis-py's hello) is bounded by ``connect_timeout_s`` (1 s by default). A burst of turns
  on a cold process opens many connections at once; on a busy machine one of them can take
  longer than a command ever should, and that is not Redis failing;
- the command itself, once written on a connection, is bounded by ``timeout_s`` (50 ms by
  default). The bound is measured on the event loop, so an answer that arrived while the
  loop was busy elsewhere is read before the bound is taken to have run out
  (:class:`_Bound`): a loaded proxy's own lag does not count as a slow Redis. Loading a
  script Redis lacks (its first use, or after a restart) is set-up, bounded like a
  connection (:meth:`RedisLink._exchange`).

redis-py's own retries are off. A failed command raises :class:`StateStoreUnavailable` (its
turn uses in-process state), but Redis is taken to be down only after ``_DOWN_AFTER``
failures in a row: then every call raises at once, without touching the network, for
``retry_s``. The first async use on a loop opens ``_WARM`` connections in the background, so
the first burst does not open them all at once.

:meth:`RedisLink.send` puts a script call on a connection and returns once its bytes are
written; Redis's answer is read in the background. :mod:`.redis_store` uses it for a task
turn's record, so the turn does not wait a round trip for an answer it does not need. Sent
calls share one connection of their own (pipelined: Redis answers them in the order they
were written, and one reader task takes the answers in that order), so sending costs no
pool checkout and a burst of records does not open a connection each.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tiered_router.exceptions import TieredRouterError
from tiered_router.state import _lua
from tiered_router.state._redis_replies import where_of

try:
    import redis
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.exceptions import NoScriptError, ResponseError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    from tiered_router.exceptions import missing_extra

    raise ImportError(missing_extra("redis", "the Redis state store needs redis-py")) from exc

__all__ = ["ERRORS", "RedisLink", "StateStoreUnavailable"]

logger = logging.getLogger(__name__)

_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # the same class from Python 3.11
ERRORS = (redis.RedisError, OSError, *_TIMEOUTS)
"""What a failed exchange with Redis raises."""

_MAX_CONNECTIONS = 64
"""Connections per client; more concurrent commands wait for one (``connect_timeout_s``)."""
_WARM = 8
"""Connections the async pool opens ahead of use, on the first call on a loop."""
_DOWN_AFTER = 3
"""Failures in a row after which Redis is taken to be down for ``retry_s``."""
_MAX_WAITING = 256
"""Sent calls whose answers are still to come, at most; past it a call is awaited."""

_Sent = tuple[str, Sequence[str], Sequence[object], Callable[[], None]]
"""A sent call waiting for its answer: script, keys, args, and what to do if it is lost."""


class StateStoreUnavailable(TieredRouterError):
    """The shared state store did not answer (down, slow, or refused): use local state.

    Attributes:
        store: Where the store is (``host:port``; never the password).
    """

    def __init__(self, message: str, *, store: str) -> None:
        super().__init__(message)
        self.store = store


class _Bound:
    """``asyncio.timeout(seconds)`` that lets the loop handle what already arrived first.

    When the loop is busy, an answer that came in on time and the timer can fall due in the
    same turn of the loop; a plain timeout then cancels a read whose bytes are already in
    the buffer. Here the timer, when due, waits one more turn of the loop before cancelling,
    so a wake-up scheduled by data that arrived with it runs first.
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_seconds", "_task")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._expired = False
        self._cancelling = 0
        self._handle: asyncio.Handle | None = None
        self._task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        cancelling = getattr(self._task, "cancelling", None)  # Python 3.11+
        self._cancelling = cancelling() if cancelling is not None else 0
        self._handle = loop.call_later(self._seconds, self._due)

    def _due(self) -> None:
        self._handle = asyncio.get_running_loop().call_soon(self._cancel)

    def _cancel(self) -> None:
        self._handle = None
        self._expired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, exc: Any, tb: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and kind is asyncio.CancelledError:
            # as asyncio.timeout: only this bound's own cancellation becomes a TimeoutError
            uncancel = getattr(self._task, "uncancel", None)  # Python 3.11+
            if uncancel is None or uncancel() <= self._cancelling:
                raise TimeoutError(f"no answer within {self._seconds:g} s") from exc


class RedisLink:
    """The store's connections to one Redis (see the module's docs).

    Args:
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS, ``unix://``).
        timeout_s: Longest wait for Redis's answer to a command written on a connection.
        retry_s: After ``_DOWN_AFTER`` failures in a row, how long to refuse at once before
            trying Redis again.
        connect_timeout_s: Longest wait for a connection (from the pool, or opened).

    Raises:
        ValueError: ``url`` is not a ``redis://``, ``rediss://`` or ``unix://`` URL.
    """

    def __init__(
        self, url: str, *, timeout_s: float, retry_s: float, connect_timeout_s: float = 1.0
    ) -> None:
        from tiered_router.policy._ops import redis_url_problem

        problem = redis_url_problem(url)
        if problem:
            raise ValueError(f"Redis state store URL {problem}")
        self._url = url
        self.where = where_of(url)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_s = retry_s
        self._down_until = 0.0
        self._failures = 0  # in a row
        self._warm: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._sync: redis.Redis | None = None
        self._async: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scripts: dict[str, Any] = {}
        self._ascripts: dict[str, Any] = {}
        self.pending: set[asyncio.Future[Any]] = set()
        """Background work in flight (answers of sent calls, batched writes)."""
        self._loaded: set[str] = set()  # scripts Redis has run for this process
        self._sender: Any = None  # the connection sent calls go on
        self._connecting: asyncio.Lock | None = None
        self._waiting: deque[_Sent] = deque()  # sent on _sender, answers to come, in order
        self._reader: asyncio.Future[None] | None = None
        self._reading: Any = None  # the connection self._reader reads from

    def _options(self, *, asyncio_pool: bool = False) -> dict[str, Any]:
        # each client kind takes its own Retry class: redis-py 8 warns when an asyncio pool
        # gets the sync one (and converts it), which a warnings-as-errors program cannot run
        return {
            "socket_timeout": None if asyncio_pool else self.timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
            "retry": AsyncRetry(NoBackoff(), 0) if asyncio_pool else Retry(NoBackoff(), 0),
            "health_check_interval": 0,
            "max_connections": _MAX_CONNECTIONS,
        }

    def _sync_scripts(self) -> dict[str, Any]:
        if self._sync is None:
            with self._lock:
                if self._sync is None:
                    pool = redis.BlockingConnectionPool.from_url(
                        self._url, timeout=self.connect_timeout_s, **self._options()
                    )
                    client = redis.Redis.from_pool(pool)
                    self._scripts = _lua.register(client)
                    self._sync = client
        return self._scripts

    def _async_scripts(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self._async is None or self._loop is not loop:
            # a redis.asyncio client belongs to the loop it first ran on. Its connections
            # have no socket timeout: redis-py would bound every write with
            # asyncio.wait_for (a task per command); each call is bounded here instead,
            # with one timeout around the whole exchange
            apool = aioredis.BlockingConnectionPool.from_url(
                self._url, timeout=self.connect_timeout_s, **self._options(asyncio_pool=True)
            )
            client = aioredis.Redis.from_pool(apool)
            self._ascripts = _lua.register(client)
            self._async, self._loop = client, loop
            if self._sender is not None:  # it belonged to the last loop
                self._lose_sent(self._sender, close=False)
            self._connecting = asyncio.Lock()
            self._warm = asyncio.ensure_future(self._warm_pool(apool))
            self.track(self._warm)
        return self._ascripts

    async def _warm_pool(self, pool: Any) -> None:
        """Open ``_WARM`` connections of a new pool ahead of use (failures are left to use)."""

        async def one() -> Any:
            async with _Bound(self.connect_timeout_s):
                return await pool.get_connection()

        got = await asyncio.gather(*(one() for _ in range(_WARM)), return_exceptions=True)
        for connection in got:
            if not isinstance(connection, BaseException):
                await pool.release(connection)

    def check_up(self) -> None:
        """Raise :class:`StateStoreUnavailable` while Redis is taken to be down."""
        if self._down_until and time.monotonic() < self._down_until:
            raise StateStoreUnavailable(
                f"Redis state store at {self.where} is unavailable; retrying after "
                f"{self.retry_s:g} s",
                store=self.where,
            )

    def failed(self, exc: BaseException) -> StateStoreUnavailable:
        """Note a failure and return the error to raise.

        After ``_DOWN_AFTER`` failures in a row, Redis is refused at once for ``retry_s``.
        """
        self._failures += 1
        if self._failures >= _DOWN_AFTER:
            self._down_until = time.monotonic() + self.retry_s
        return StateStoreUnavailable(
            f"Redis state store at {self.where} failed: {type(exc).__name__}", store=self.where
        )

    def succeeded(self) -> None:
        """Note an answer: the count of failures in a row starts again."""
        self._failures = 0
        self._down_until = 0.0

    def call(self, script: str, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Run ``script`` (a name in :func:`._lua.register`) and return Redis's answer."""
        self.check_up()
        try:
            reply = self._sync_scripts()[script](keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            raise self.failed(exc) from exc
        self.succeeded()
        return reply

    async def acall(self, script: str, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Async twin of :meth:`call`.

        The connection is taken from the pool within ``connect_timeout_s``; the command on
        it is bounded by ``timeout_s`` (see the module's docs).
        """
        self.check_up()
        scripts = self._async_scripts()
        assert self._async is not None
        pool = self._async.connection_pool
        try:
            async with _Bound(self.connect_timeout_s):
                connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        except ERRORS as exc:
            raise self.failed(exc) from exc
        try:
            reply = await self._exchange(connection, scripts[script], keys, args)
        except BaseException as exc:
            # an answer may still be on its way: this connection cannot carry another
            await connection.disconnect(nowait=True)
            await pool.release(connection)
            if isinstance(exc, ERRORS):
                raise self.failed(exc) from exc
            raise
        await pool.release(connection)
        self._loaded.add(script)
        self.succeeded()
        return reply

    async def _exchange(
        self, connection: Any, script: Any, keys: Sequence[str], args: Sequence[object]
    ) -> Any:
        """``EVALSHA`` of ``script`` on ``connection``; loads the script if Redis lacks it.

        Each round trip has a bound of its own: the call ``timeout_s``, and loading the
        script (a Redis that never ran it, or restarted) ``connect_timeout_s``, because it
        is set-up, as opening a connection is. Under one bound for all three round trips, a
        busy loop let the first through (:class:`_Bound`) and cut the load short every
        time, so a cold or restarted Redis stayed without the script while the process
        was loaded. The one operation that is no script (``task_read``) is a plain
        ``HGETALL`` of ``keys[0]``; its reply stays the flat list of fields and values.
        """
        if not hasattr(script, "sha"):
            async with _Bound(self.timeout_s):
                await connection.send_command("HGETALL", keys[0])
                return await connection.read_response()
        try:
            async with _Bound(self.timeout_s):
                await connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                return await connection.read_response()
        except NoScriptError:
            pass
        async with _Bound(self.connect_timeout_s):
            await connection.send_command("SCRIPT", "LOAD", script.script)
            await connection.read_response()
        async with _Bound(self.timeout_s):
            await connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
            return await connection.read_response()

    def pubsub(self) -> Any:
        """A new redis.asyncio ``PubSub`` on this loop's client (its own connection)."""
        self._async_scripts()
        assert self._async is not None
        return self._async.pubsub()

    def track(self, work: asyncio.Future[Any]) -> None:
        """Keep background ``work`` until it ends (:meth:`drain` waits for it)."""
        self.pending.add(work)
        work.add_done_callback(self._settled)

    def _settled(self, work: asyncio.Future[Any]) -> None:
        # background work has no one to raise to: its failure is retrieved here, so asyncio
        # never prints "Task exception was never retrieved", and logged once by type
        self.pending.discard(work)
        if work.cancelled():
            return
        exc = work.exception()
        if exc is not None and not isinstance(exc, StateStoreUnavailable):
            logger.warning(
                "Redis state store at %s: background write failed: %s",
                self.where,
                type(exc).__name__,
            )

    async def send(
        self,
        script: str,
        keys: Sequence[str],
        args: Sequence[object],
        *,
        lost: Callable[[], None],
    ) -> None:
        """Write a call of ``script`` and return; its answer is read in the background.

        When it returns, the call's bytes are on the connection, ahead of any command sent
        after. A Redis that answers with an error, or not within ``timeout_s``, calls
        ``lost`` (and counts as a failure; a connection that fails loses every call still
        waiting on it); a Redis that lost the script (a restart) gets it loaded and the
        call run again, later. The first call of a script in this process is awaited
        instead, so that Redis has the script before a call is sent without waiting, and
        so is a call made while ``_MAX_WAITING`` answers are still to come.

        Raises:
            StateStoreUnavailable: When the call could not be written (nothing was sent).
        """
        if script not in self._loaded or len(self._waiting) >= _MAX_WAITING:
            await self.acall(script, keys, args)
            return
        self.check_up()
        scripts = self._async_scripts()
        connection = self._sender
        if connection is None or not connection.is_connected:
            try:
                async with _Bound(self.connect_timeout_s):
                    connection = await self._sending_connection()
            except ERRORS as exc:
                raise self.failed(exc) from exc
        # nothing suspends between queueing the call and writing its bytes, so the queue
        # keeps the order Redis answers in
        sent: _Sent = (script, keys, args, lost)
        self._waiting.append(sent)
        command = connection.pack_command("EVALSHA", scripts[script].sha, len(keys), *keys, *args)
        try:
            async with _Bound(self.timeout_s):
                await connection.send_packed_command(command, check_health=False)
        except BaseException as exc:
            if sent in self._waiting:
                self._waiting.remove(sent)  # the caller hears of this one, not ``lost``
            self._lose_sent(connection)  # redis-py closed it: what waited on it is lost
            if isinstance(exc, ERRORS):
                raise self.failed(exc) from exc
            raise
        if self._reader is None or self._reader.done() or self._reading is not connection:
            self._reading = connection
            self._reader = asyncio.ensure_future(self._read_answers(connection))
            self.track(self._reader)

    async def _sending_connection(self) -> Any:
        assert self._async is not None and self._connecting is not None
        async with self._connecting:  # one connect, however many calls are sent meanwhile
            if self._sender is not None and self._sender.is_connected:
                return self._sender
            if self._sender is not None:  # closed under its calls (a cancelled read)
                self._lose_sent(self._sender, close=False)
            fresh = self._async.connection_pool.make_connection()  # type: ignore[no-untyped-call]
            await fresh.connect()
            self._sender = fresh
            return fresh

    async def _read_answers(self, connection: Any) -> None:
        """Take the answers of the calls sent on ``connection``, oldest first."""
        while self._waiting and self._sender is connection:
            script, keys, args, lost = self._waiting[0]
            try:
                async with _Bound(self.timeout_s):
                    await connection.read_response()
            except NoScriptError:  # the call ran nothing: load the script, run it now
                self._waiting.popleft()
                self.track(asyncio.ensure_future(self._run_again(script, keys, args, lost)))
            except (
                ResponseError
            ) as exc:  # this call failed (as acall would); the connection is fine
                self._waiting.popleft()
                self.failed(exc)
                lost()
            except ERRORS as exc:  # no answer in time, or the connection is gone
                self.failed(exc)
                self._lose_sent(connection)
                return
            else:
                self._waiting.popleft()
                self.succeeded()

    async def _run_again(
        self, script: str, keys: Sequence[str], args: Sequence[object], lost: Callable[[], None]
    ) -> None:
        try:
            await self.acall(script, keys, args)
        except StateStoreUnavailable:
            lost()

    def _lose_sent(self, connection: Any, *, close: bool = True) -> None:
        """Give ``connection`` up: every call still waiting on it is lost."""
        if self._sender is not connection:
            return  # given up already
        self._sender = None
        waiting, self._waiting = self._waiting, deque()
        for *_, lost in waiting:
            lost()
        if close:  # on this loop; a connection of a loop that is gone is left to it
            self.track(asyncio.ensure_future(connection.disconnect(nowait=True)))

    async def drain(self) -> None:
        """Wait for the background work in flight."""
        while self.pending:
            # failures were retrieved and logged by _settled; drain only waits
            await asyncio.gather(*list(self.pending), return_exceptions=True)

    def close(self) -> None:
        """Close the sync client's connections."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close both clients' connections (the async ones only from their own loop)."""
        self.close()
        if self._async is not None:
            client, self._async = self._async, None
            sender, self._sender = self._sender, None
            if self._loop is asyncio.get_running_loop():
                if sender is not None:
                    await sender.disconnect()
                await client.aclose()

    def ping(self) -> bool:
        """Whether Redis answers now (for readiness checks); never raises."""
        try:
            self._sync_scripts()
            assert self._sync is not None
            return bool(self._sync.ping())
        except (redis.RedisError, OSError, ValueError):
            return False
