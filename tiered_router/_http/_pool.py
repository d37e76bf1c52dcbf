"""The connections under :class:`~tiered_router._http._direct.DirectTransport`, and their pool.

A :class:`Connection` is an asyncio protocol: it feeds the bytes it receives to a
:class:`~tiered_router._http._parser.ResponseParser` and wakes the one reader waiting for
them, each wait bounded by a read timeout. A :class:`Pool` keeps a transport's connections
on one event loop, by origin: idle ones are reused last-in first-out, never once expired
(``keepalive_expiry``) or closed by the server (a close the loop has not seen yet is looked
for on a connection idle a second or more); ``max_connections`` bounds the open ones, and
waiting for a place is bounded by the call's pool timeout.
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from typing import TYPE_CHECKING

from httpx2 import ConnectError, ConnectTimeout, Limits, ReadError, ReadTimeout, create_ssl_context

from tiered_router._http._parser import ResponseParser

if TYPE_CHECKING:
    import socket
    import ssl

__all__ = ["Connection", "Origin", "Pool"]

_HIGH = 1 << 20
"""Body bytes waiting to be taken at which the connection stops reading (and resumes below
a quarter of it): a slow reader does not buffer a large answer whole."""

_STALE_AFTER_S = 1.0
"""A pooled connection idle this long is checked for a close not yet seen before reuse
(no server closes an idle connection sooner; the check costs a system call)."""

_EARLY_S = 0.001
"""A read timer armed for a wait's time that fires this close to it has expired: uvloop
rounds timers to the millisecond and fires them up to that early (armed again, it would
fire at once until the next millisecond), as a timer per wait did."""

Origin = tuple[str, str, int]
"""Where a connection goes: scheme, host, port."""


def _within(timeout: float | None, deadline: float | None, now: float) -> float | None:
    """``timeout`` seconds, cut to what is left until ``deadline`` (loop time) when given."""
    if deadline is None:
        return timeout
    left = deadline - now
    return left if timeout is None else min(timeout, left)


def _readable(sock: socket.socket) -> bool:
    """Whether ``sock`` has bytes (or an end) waiting; ``poll`` has no limit on descriptors."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])  # pragma: no cover - Windows


class Connection(asyncio.Protocol):
    """One connection to an origin: feeds the parser, wakes the one reader waiting."""

    __slots__ = (
        "_due",
        "_paused",
        "_timer",
        "_timer_at",
        "_waiter",
        "closed",
        "error",
        "idle_since",
        "origin",
        "parser",
        "pool",
        "reused",
        "transport",
    )

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.parser = ResponseParser()
        self.transport: asyncio.Transport | None = None
        self.error: Exception | None = None
        self.idle_since = -1.0  # < 0: in use
        self.reused = False
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._due: float | None = None  # when the wait under way times out (loop time)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport (called by the loop once connected)."""
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` to the parser and wake the reader (a parse error closes it)."""
        if self.idle_since >= 0:  # nobody asked: the connection cannot be trusted
            self.close()
            return
        parser = self.parser
        try:
            parser.feed(data)
        except Exception as exc:  # RemoteProtocolError: it says what was wrong
            self.error = exc
            self.close()
        else:
            if parser.pending > _HIGH and not self._paused:
                self._paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        """Note the end: an answer it cuts short becomes the reader's error."""
        if self.idle_since < 0 and self.error is None and not self.parser.complete:
            if exc is None or not self.parser.started:
                try:
                    self.parser.feed_eof()
                except Exception as error:  # RemoteProtocolError
                    self.error = error
            else:
                self.error = ReadError(f"connection lost while reading: {type(exc).__name__}")
        self.parser.reusable = False
        self._forget()
        self._wake()

    def rest(self) -> None:
        """Ready the connection for the pool: its answer read, reading on again (if paused)."""
        self.parser.reset()
        if self._paused:
            self._paused = False
            if not self.closed:
                self.transport.resume_reading()  # type: ignore[union-attr]

    def taken(self, size: int) -> None:
        """Note that a reader took ``size`` body bytes (reading resumes when few are left)."""
        self.parser.pending -= size
        if self._paused and self.parser.pending < _HIGH // 4 and not self.closed:
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    async def wait(self, timeout: float | None, deadline: float | None = None) -> None:
        """Wait for bytes or the end of the connection, at most ``timeout`` seconds.

        ``deadline`` (loop time), when given, ends the wait sooner if it comes first: the
        whole call's limit (see :meth:`DirectTransport.exchange
        <tiered_router._http._direct.DirectTransport.exchange>`).

        One timer per connection, not one per wait: a wait notes when it times out, and
        the timer is armed only when none is or the one armed is due later. When it fires
        it fails the wait under way if that wait's time is up, else sleeps until it is
        (a call reads its answer in one to three waits).

        Raises:
            httpx2.ReadTimeout: Nothing came in time.

        """
        loop = self.pool.loop
        waiter = self._waiter = loop.create_future()
        now = loop.time()
        seconds = _within(timeout, deadline, now)
        if seconds is not None:
            due = self._due = now + seconds
            if self._timer is None or self._timer_at > due:
                self._arm(due)
        try:
            await waiter
        finally:
            self._waiter = self._due = None

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.pool.loop.call_at(due, self._check_wait)
        self._timer_at = due

    def _check_wait(self) -> None:
        self._timer = None
        due, waiter = self._due, self._waiter
        if due is None or waiter is None:  # no wait under way: the next one arms it again
            return
        # armed by an earlier wait (due sooner): sleep until this one's time; armed for this
        # time and fired early by at most _EARLY_S (uvloop's rounding): its time has come
        if due > self._timer_at or due - self.pool.loop.time() > _EARLY_S:
            self._arm(due)
        elif not waiter.done():
            waiter.set_exception(ReadTimeout("timed out reading"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def stale(self, now: float) -> bool:
        """Whether this idle connection must not be sent on (expired, or closed by the server)."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return True
        idle = now - self.idle_since
        expiry = self.pool.expiry
        if expiry is not None and idle > expiry:
            return True
        if idle < _STALE_AFTER_S:
            return False
        sock = transport.get_extra_info("socket")
        try:  # readable while idle: the server closed it (or sent what nobody asked for)
            return sock is None or _readable(sock)
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        """Close the connection (idempotent); its place in the pool is freed at once."""
        if self.transport is not None:
            self.transport.close()
        self._forget()

    def _forget(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.closed:
            self.closed = True
            self.pool.forget(self)


class Pool:
    """The connections of one transport on one event loop, by origin."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: Limits) -> None:
        self.loop = loop
        self.limit = limits.max_connections
        self.expiry = limits.keepalive_expiry
        self._idle: dict[Origin, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl: ssl.SSLContext | None = None
        self.closed = False

    async def acquire(
        self,
        origin: Origin,
        pool_timeout: float | None,
        connect_timeout: float | None,
        call_deadline: float | None = None,
    ) -> Connection:
        """Return an idle connection to ``origin``, or a new one when there is room.

        ``call_deadline`` (loop time), when given, ends the wait for room and the connect
        by then too: what the wait for room took is not given to the connect again.

        Raises:
            httpx2.ConnectTimeout: No room in time, or connecting took too long.
            httpx2.ConnectError: The connection was refused or TLS failed.

        """
        deadline = None
        pool_timeout = _within(pool_timeout, call_deadline, self.loop.time())
        while True:
            if self.closed:
                raise ConnectError("the transport was closed")
            idle = self._idle.get(origin)
            if idle:
                now = self.loop.time()
                while idle:
                    conn = idle.pop()
                    if conn.stale(now):
                        conn.close()
                        continue
                    conn.idle_since = -1.0
                    conn.reused = True
                    return conn
            if self.limit is None or len(self._open) + self._opening < self.limit:
                self._opening += 1  # the place is taken now, not once connected
                # what is left of the call after any wait for room
                timeout = _within(connect_timeout, call_deadline, self.loop.time())
                try:
                    return await self._connect(origin, timeout)
                finally:
                    self._opening -= 1
                    self._wake_one()
            if self._evict():
                continue
            if deadline is None and pool_timeout is not None:
                deadline = self.loop.time() + pool_timeout
            await self._wait(deadline)

    def _evict(self) -> bool:
        """Close the longest-idle connection to any origin; whether there was one."""
        oldest = min(
            (conns[0] for conns in self._idle.values() if conns),
            key=lambda conn: conn.idle_since,
            default=None,
        )
        if oldest is None:
            return False
        oldest.close()
        return True

    async def _wait(self, deadline: float | None) -> None:
        waiter = self.loop.create_future()
        self._waiters.append(waiter)
        timer = None
        if deadline is not None:
            timer = self.loop.call_at(deadline, _no_room, waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._wake_one()  # woken, then cancelled: pass the turn on
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if not waiter.done():
                self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, origin: Origin, timeout: float | None) -> Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = create_ssl_context()
            context = self._ssl
        place = f"{host}:{port}"
        pending: list[Connection] = []

        def made() -> Connection:
            conn = Connection(self, origin)
            self._open.add(conn)
            pending.append(conn)
            return conn

        try:
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(
                    made, host, port, ssl=context, server_hostname=host if context else None
                ),
                timeout,
            )
        except BaseException as exc:
            for made_conn in pending:  # a protocol built for a connection that failed
                made_conn.close()
            if isinstance(exc, asyncio.TimeoutError):
                raise ConnectTimeout(f"timed out connecting to {place}") from exc
            if isinstance(exc, OSError):
                raise ConnectError(f"cannot connect to {place}: {exc}") from exc
            raise
        if self.closed:  # closed while connecting: the new connection goes too
            conn.close()
            raise ConnectError("the transport was closed")
        return conn

    def release(self, conn: Connection) -> None:
        """Put ``conn``, its answer read whole, back in the pool (closed if the pool is)."""
        if self.closed:
            conn.close()
            return
        conn.rest()
        now = conn.idle_since = self.loop.time()
        idle = self._idle.setdefault(conn.origin, [])
        idle.append(conn)
        if self.expiry is not None and now - idle[0].idle_since > self.expiry:
            idle[0].close()  # expired while the newer ones were in use
        self._wake_one()

    def forget(self, conn: Connection) -> None:
        """Drop ``conn``, closed, from the pool."""
        self._open.discard(conn)
        if conn.idle_since >= 0:
            idle = self._idle.get(conn.origin)
            if idle and conn in idle:
                idle.remove(conn)
        self._wake_one()

    def close(self) -> None:
        """Close every connection, idle or in use; calls waiting for a place fail."""
        self.closed = True
        for conn in list(self._open):
            if not self.loop.is_closed():
                conn.close()
        self._open.clear()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectError("the transport was closed"))


def _no_room(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(ConnectTimeout("timed out connecting: no free connection"))
