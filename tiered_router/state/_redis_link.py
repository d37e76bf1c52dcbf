"""Talking to Redis for the state store: bounded waits, failing fast, and sent-only calls.

:class:`RedisLink` owns a sync and an asyncio redis-py client (each with a blocking pool of
at most ``_MAX_CONNECTIONS``), the scripts registered on them (:mod:`._lua`), and the rule
that a slow or dead Redis never holds a turn up for long: every command is bounded by
``timeout_s``, redis-py's own retries are off, and after a failure every call raises
:class:`StateStoreUnavailable` at once, without touching the network, for ``retry_s``.

:meth:`RedisLink.send` puts a script call on a connection and returns once its bytes are
written; Redis's answer is read in the background. :mod:`.redis_store` uses it for a task
turn's record, so the turn does not wait a round trip for an answer it does not need. Sent
calls share one connection of their own (pipelined: Redis answers them in the order they
were written, and one reader task takes the answers in that order), so sending costs no
pool checkout and a burst of records does not open a connection each.
"""

from __future__ import annotations

import asyncio
import sys
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
    from redis.backoff import NoBackoff
    from redis.exceptions import NoScriptError, ResponseError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    from tiered_router.exceptions import missing_extra

    raise ImportError(missing_extra("redis", "the Redis state store needs redis-py")) from exc

if sys.version_info >= (3, 11):
    from asyncio import timeout as _bounded
else:  # pragma: no cover - Python 3.10 (redis-py depends on async-timeout there)
    from async_timeout import timeout as _bounded  # type: ignore[import-not-found,unused-ignore]

__all__ = ["ERRORS", "RedisLink", "StateStoreUnavailable"]

_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # the same class from Python 3.11
ERRORS = (redis.RedisError, OSError, *_TIMEOUTS)
"""What a failed exchange with Redis raises."""

_MAX_CONNECTIONS = 64
"""Connections per client; more concurrent commands wait for one (within ``timeout_s``)."""
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


class RedisLink:
    """The store's connections to one Redis (see the module's docs).

    Args:
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS, ``unix://``).
        timeout_s: Longest wait for a connection or an answer, per command.
        retry_s: After a failure, how long to refuse at once before trying Redis again.
    """

    def __init__(self, url: str, *, timeout_s: float, retry_s: float) -> None:
        self._url = url
        self.where = where_of(url)
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._down_until = 0.0
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

    def _options(self, *, socket_timeout: bool = True) -> dict[str, Any]:
        return {
            "socket_timeout": self.timeout_s if socket_timeout else None,
            "socket_connect_timeout": self.timeout_s,
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 0,
            "max_connections": _MAX_CONNECTIONS,
        }

    def _sync_scripts(self) -> dict[str, Any]:
        if self._sync is None:
            with self._lock:
                if self._sync is None:
                    pool = redis.BlockingConnectionPool.from_url(
                        self._url, timeout=self.timeout_s, **self._options()
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
                self._url, timeout=self.timeout_s, **self._options(socket_timeout=False)
            )
            client = aioredis.Redis.from_pool(apool)
            self._ascripts = _lua.register(client)
            self._async, self._loop = client, loop
            if self._sender is not None:  # it belonged to the last loop
                self._lose_sent(self._sender, close=False)
            self._connecting = asyncio.Lock()
        return self._ascripts

    def check_up(self) -> None:
        """Raise :class:`StateStoreUnavailable` while a recent failure's ``retry_s`` runs."""
        if self._down_until and time.monotonic() < self._down_until:
            raise StateStoreUnavailable(
                f"Redis state store at {self.where} is unavailable; retrying after "
                f"{self.retry_s:g} s",
                store=self.where,
            )

    def failed(self, exc: Exception) -> StateStoreUnavailable:
        """Note a failure (refuse for ``retry_s``) and return the error to raise."""
        self._down_until = time.monotonic() + self.retry_s
        return StateStoreUnavailable(
            f"Redis state store at {self.where} failed: {type(exc).__name__}", store=self.where
        )

    def call(self, script: str, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Run ``script`` (a name in :func:`._lua.register`) and return Redis's answer."""
        self.check_up()
        try:
            return self._sync_scripts()[script](keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            raise self.failed(exc) from exc

    async def acall(self, script: str, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Async twin of :meth:`call`."""
        self.check_up()
        try:
            async with _bounded(self.timeout_s):
                reply = await self._async_scripts()[script](keys=keys, args=args)
        except ERRORS as exc:
            raise self.failed(exc) from exc
        self._loaded.add(script)
        return reply

    def pubsub(self) -> Any:
        """A new redis.asyncio ``PubSub`` on this loop's client (its own connection)."""
        self._async_scripts()
        assert self._async is not None
        return self._async.pubsub()

    def track(self, work: asyncio.Future[Any]) -> None:
        """Keep background ``work`` until it ends (:meth:`drain` waits for it)."""
        self.pending.add(work)
        work.add_done_callback(self.pending.discard)

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
                async with _bounded(self.timeout_s):
                    connection = await self._sending_connection()
            except ERRORS as exc:
                raise self.failed(exc) from exc
        # nothing suspends between queueing the call and writing its bytes, so the queue
        # keeps the order Redis answers in
        sent: _Sent = (script, keys, args, lost)
        self._waiting.append(sent)
        command = connection.pack_command("EVALSHA", scripts[script].sha, len(keys), *keys, *args)
        try:
            async with _bounded(self.timeout_s):
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
                async with _bounded(self.timeout_s):
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
            await asyncio.gather(*list(self.pending))

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
        except (redis.RedisError, OSError):
            return False
