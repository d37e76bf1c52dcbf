"""The one module that imports the HTTP library (httpx2).

Everything else in tiered_router that needs HTTP (the OpenAI-compatible backend, the proxy,
tests) gets its clients and types from here, so the dependency has one seam. Importing httpx2
costs ~0.2 s, so callers on the ``import tiered_router`` path import this module lazily,
inside the function that first needs it.

Clients built here are httpx2 clients with httpx2's own transport (httpcore2 + h11: its
connection pool, HTTP/1.1 parser, TLS, proxies from the environment). One piece is tuned: the
socket layer under httpcore2 (its documented ``network_backend`` seam) is
:class:`AsyncioNetworkBackend`, plain asyncio protocols instead of anyio streams, which sends
each request in one write and takes about 0.25 ms of CPU off every call. When a proxy is set
in the environment, the client is httpx2's stock one (proxies and ``NO_PROXY`` handled by
httpx2 itself).

Example:
    ```python
    from tiered_router import _http

    client = _http.build_async_client(transport=_http.MockTransport(handler))
    ```

"""

from __future__ import annotations

import asyncio
import email.utils
import math
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpcore2
import httpx2
from httpx2 import (
    URL,
    AsyncBaseTransport,
    AsyncByteStream,
    AsyncClient,
    BaseTransport,
    Client,
    ConnectError,
    ConnectTimeout,
    Headers,
    HTTPError,
    HTTPStatusError,
    Limits,
    MockTransport,
    PoolTimeout,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    Request,
    Response,
    Timeout,
    TimeoutException,
    TransportError,
    WriteError,
    create_ssl_context,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT_S",
    "AsyncBaseTransport",
    "AsyncByteStream",
    "AsyncClient",
    "AsyncioNetworkBackend",
    "BaseTransport",
    "Client",
    "ConnectError",
    "ConnectTimeout",
    "HTTPError",
    "HTTPStatusError",
    "Headers",
    "Limits",
    "MockTransport",
    "PoolTimeout",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "Request",
    "Response",
    "Timeout",
    "TimeoutException",
    "TransportError",
    "URL",
    "WriteError",
    "build_async_client",
    "build_async_transport",
    "build_client",
    "call_timeout",
    "create_ssl_context",
    "env_proxies",
    "parse_retry_after",
]

DEFAULT_TIMEOUT_S = 60.0
"""Whole-request timeout of a client built here; backends pass a per-call timeout anyway."""

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Connect timeout: a server that does not accept a connection in 5 s is down, not slow."""

DEFAULT_LIMITS = Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30.0)
"""Connection pool of one client (each backend builds its own, so one hung upstream cannot
take the connections another needs): keep-alive connections are reused across an agent's
turns, which saves a TLS handshake (~100 ms) per call to the same provider."""

_READ_PAUSE = 256 * 1024  # stop reading the socket while this much is buffered unread
_READ_RESUME = 64 * 1024


def _timeout(timeout_s: float | None) -> Timeout:
    connect = (
        DEFAULT_CONNECT_TIMEOUT_S
        if timeout_s is None
        else min(timeout_s, DEFAULT_CONNECT_TIMEOUT_S)
    )
    return Timeout(timeout_s, connect=connect)


def call_timeout(seconds: float | None) -> dict[str, float | None]:
    """Return the ``timeout`` request extension for a call with ``seconds`` left.

    Every phase (waiting for a pooled connection, connecting, writing, each read) is bounded
    by what is left; connecting by at most :data:`DEFAULT_CONNECT_TIMEOUT_S` too.
    """
    connect = (
        DEFAULT_CONNECT_TIMEOUT_S if seconds is None else min(seconds, DEFAULT_CONNECT_TIMEOUT_S)
    )
    return {"connect": connect, "read": seconds, "write": seconds, "pool": seconds}


def env_proxies() -> dict[str, str]:
    """Return the proxies set in the environment (``HTTPS_PROXY``, ``ALL_PROXY``, ...)."""
    return {k: v for k, v in urllib.request.getproxies().items() if k != "no"}


# -- the tuned socket layer ---------------------------------------------------------------


class _Protocol(asyncio.Protocol):
    """Buffers what the socket receives for :class:`_AsyncioStream`."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.eof = False
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        if self.size > _READ_PAUSE and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpcore2.ReadTimeout("timed out reading from the server"))


class _AsyncioStream(httpcore2.AsyncNetworkStream):
    """A connection for httpcore2: writes are held until the next read, then sent at once.

    httpcore2 writes a request as head, body and end-of-message; holding them until it
    starts reading the response sends the request in one segment (one syscall, one
    loopback wake-up) instead of two or three.
    """

    def __init__(self, protocol: _Protocol) -> None:
        self._protocol = protocol
        self._out: list[bytes] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if self._out:
            self._flush()
        while not p.chunks:
            if p.eof:
                return b""
            loop = asyncio.get_running_loop()
            waiter = p.waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                p.waiter = None
                if timer is not None:
                    timer.cancel()
        data = p.chunks[0]
        if len(data) > max_bytes:
            p.chunks[0] = data[max_bytes:]
            data = data[:max_bytes]
        else:
            del p.chunks[0]
        p.size -= len(data)
        if p.paused and p.size < _READ_RESUME:
            p.paused = False
            p.transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._out.append(buffer)

    def _flush(self) -> None:
        data = b"".join(self._out)
        self._out.clear()
        transport = self._protocol.transport
        if transport.is_closing():
            raise httpcore2.WriteError("the connection was closed")
        transport.write(data)

    async def aclose(self) -> None:
        self._out.clear()
        self._protocol.transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await asyncio.wait_for(
                loop.start_tls(
                    self._protocol.transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                ),
                timeout,
            )
        except asyncio.TimeoutError as exc:
            self._protocol.transport.close()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from exc
        except (OSError, ssl.SSLError) as exc:
            self._protocol.transport.close()
            raise httpcore2.ConnectError(f"TLS handshake failed: {exc}") from exc
        self._protocol.transport = transport
        return self

    def get_extra_info(self, info: str) -> Any:
        p = self._protocol
        if info == "is_readable":  # an idle connection with data or EOF is not reusable
            return bool(p.chunks) or p.eof or p.transport.is_closing()
        names = {"client_addr": "sockname", "server_addr": "peername"}
        return p.transport.get_extra_info(names.get(info, info))


class AsyncioNetworkBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's socket layer on plain asyncio (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        local = None if local_address is None else (local_address, 0)
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: protocol, host, port, local_addr=local), timeout
            )
        except asyncio.TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        sock = protocol.transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _AsyncioStream(protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        try:
            await asyncio.wait_for(loop.create_unix_connection(lambda: protocol, path), timeout)
        except asyncio.TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {path}") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot connect to {path}: {exc}") from exc
        return _AsyncioStream(protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _tuned(transport: httpx2.AsyncHTTPTransport) -> httpx2.AsyncHTTPTransport:
    """Put :class:`AsyncioNetworkBackend` under a fresh transport's connection pool."""
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore2.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = AsyncioNetworkBackend()
    return transport


# -- clients ------------------------------------------------------------------------------


def build_client(
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    limits: Limits = DEFAULT_LIMITS,
    headers: Mapping[str, str] | None = None,
    transport: BaseTransport | None = None,
) -> Client:
    """Build a pooled, keep-alive sync client that honours proxy environment variables.

    Args:
        timeout_s: Default timeout of a request in seconds (``None`` for none); the
            connect phase is capped at :data:`DEFAULT_CONNECT_TIMEOUT_S`.
        limits: Connection-pool limits.
        headers: Headers sent with every request.
        transport: A transport to use instead of the network (e.g. :class:`MockTransport`).

    Returns:
        A new client; the caller closes it.

    """
    return httpx2.Client(
        timeout=_timeout(timeout_s),
        limits=limits,
        headers=dict(headers or {}),
        transport=transport,
        follow_redirects=True,
        trust_env=True,
    )


def build_async_transport(*, limits: Limits = DEFAULT_LIMITS) -> AsyncBaseTransport | None:
    """Build httpx2's own async transport with :class:`AsyncioNetworkBackend` under its pool.

    Sending on the transport directly skips the client's per-request work (cookies, auth,
    redirects, merging defaults); the caller builds complete requests. Returns ``None`` when
    a proxy is set in the environment or no asyncio loop is running (trio): then use
    :func:`build_async_client`, whose client routes through the proxy.

    Args:
        limits: Connection-pool limits.

    """
    if env_proxies():
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return _tuned(httpx2.AsyncHTTPTransport(limits=limits, trust_env=True))


def build_async_client(
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    limits: Limits = DEFAULT_LIMITS,
    headers: Mapping[str, str] | None = None,
    transport: AsyncBaseTransport | None = None,
) -> AsyncClient:
    """Build a pooled, keep-alive async client; the async twin of :func:`build_client`.

    Without ``transport`` and without a proxy in the environment, the client's transport
    is httpx2's own with :class:`AsyncioNetworkBackend` under its pool; with a proxy set,
    it is httpx2's stock client, which routes through the proxy and honours ``NO_PROXY``.

    Args:
        timeout_s: Default timeout of a request in seconds (``None`` for none).
        limits: Connection-pool limits.
        headers: Headers sent with every request.
        transport: A transport to use instead of the network (e.g. :class:`MockTransport`).

    Returns:
        A new client; the caller closes it (``await client.aclose()``).

    """
    if transport is None:
        transport = build_async_transport(limits=limits)
    return httpx2.AsyncClient(
        timeout=_timeout(timeout_s),
        limits=limits,
        headers=dict(headers or {}),
        transport=transport,
        follow_redirects=True,
        trust_env=True,
    )


def parse_retry_after(
    headers: Mapping[str, str] | None,
    *,
    now: Callable[[], float] = time.time,
) -> float | None:
    """Return the wait in seconds a response asked for, or ``None`` when it asked for none.

    ``retry-after-ms`` (milliseconds, OpenAI's header) is read first, then ``retry-after``
    as seconds or as an HTTP date. A date in the past gives ``0.0``; a malformed,
    negative or non-finite value counts as not given.

    Args:
        headers: Response headers (a case-insensitive mapping such as httpx2's ``Headers``,
            or a plain dict with lower-case names).
        now: Clock for the HTTP-date form, in seconds since the epoch.

    Returns:
        Seconds to wait, or ``None``.

    Example:
        ```python
        parse_retry_after({"retry-after-ms": "1500"})  # 1.5
        parse_retry_after({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"})
        ```

    """
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw.strip())
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value / scale
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        parsed = email.utils.parsedate_tz(raw.strip())
        if parsed is None:
            return None
        when = email.utils.mktime_tz(parsed)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, float(when) - now())
