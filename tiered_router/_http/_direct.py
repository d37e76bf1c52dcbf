"""The async transport for upstream calls: :class:`DirectTransport`, a lean HTTP/1.1 client.

A backend's async calls go straight to its upstream over our own HTTP/1.1 client: an
asyncio protocol per connection, the response read by
:class:`~tiered_router._http._parser.ResponseParser`, one keep-alive pool per transport and
event loop. It costs less CPU per call than aiohttp's client, which it replaced for direct
calls (figures in docs/proxy.md, "The fourth pass"); a call to a URL that goes through a
proxy from the environment is handed to
:class:`~tiered_router._http._aiohttp.AiohttpTransport`, as is a URL with credentials in it.

An answer is an :class:`Exchange`, read like an ``httpx2.Response`` (``status_code``,
``headers``, ``aiter_bytes``, ``aclose``), and every failure is raised as the httpx2
exception the aiohttp transport raises for it:

- waiting for a free connection (``Limits.max_connections``) and connecting are bounded by
  the call's timeouts (:func:`~tiered_router._http._settings.call_timeout`):
  ``ConnectTimeout``; a refused connection or a failed TLS handshake: ``ConnectError``;
- each read is bounded too (``ReadTimeout``); a lost connection is ``ReadError``, a
  malformed or cut-short answer ``RemoteProtocolError``;
- the body is handed over as it arrives (Server-Sent Events), framed by length, chunks or
  the server closing; ``gzip`` and ``deflate`` are undone if a server compresses anyway;
- a connection goes back to the pool only when its answer was read whole; a cancelled or
  abandoned read closes it. A pooled connection idle past ``keepalive_expiry``, or that the
  server closed, is never sent on; one whose write fails at once, before any answer, is
  replaced once (over plain TCP: a TLS transport reports the failure later, and the call
  fails then, never sent twice).
- TLS from ``httpx2.create_ssl_context`` (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from httpx2 import URL, Limits, ReadError

from tiered_router._http._aiohttp import _bypassed
from tiered_router._http._parser import BodyDecoder, Headers
from tiered_router._http._pool import Connection, Origin, Pool
from tiered_router._http._settings import DEFAULT_LIMITS, call_timeout, env_proxies

if TYPE_CHECKING:
    from tiered_router._http import _aiohttp

__all__ = ["DirectTransport", "Exchange", "preload"]

_DEFAULTS = (("accept", "*/*"), ("accept-encoding", "identity"), ("user-agent", "tiered-router"))
_FRAMING = frozenset({"content-length", "transfer-encoding"})
"""Request headers this client sets from the body it sends (a caller's are dropped)."""
_OURS = _FRAMING | {"host"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control bytes no header may hold (CR and LF are counted apart: one pair ends a line)."""


def preload() -> None:
    """Import what sending needs now (a server calls this at start-up).

    aiohttp is imported only when a proxy is set in the environment, the one case that
    needs it.
    """
    proxies = env_proxies()
    if any(proxies.get(scheme) for scheme in ("http", "https", "all")):
        from tiered_router._http import _aiohttp

        _aiohttp.preload()


async def _closed_with_its_loop(
    pool: Pool, pools: dict[asyncio.AbstractEventLoop, _Pooled]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        pool.close()
        if pools.get(pool.loop, (None,))[0] is pool:
            del pools[pool.loop]


_Pooled = tuple[Pool, AsyncGenerator[None, None]]
"""A loop's pool, and the generator that closes it when the loop shuts down."""


class _Target(NamedTuple):
    """Where one URL's calls go, worked out once."""

    origin: Origin
    start: str  # request line and Host header


class Exchange:
    """An answer from :meth:`DirectTransport.exchange`, read like an ``httpx2.Response``.

    Attributes:
        status_code: The HTTP status.
        headers: The response headers (case-insensitive mapping).

    """

    __slots__ = ("_conn", "_deadline", "_read_timeout", "headers", "status_code")

    def __init__(
        self, conn: Connection, read_timeout: float | None, deadline: float | None = None
    ) -> None:
        self._conn: Connection | None = conn
        self._read_timeout = read_timeout
        self._deadline = deadline
        self.status_code: int = conn.parser.status_code
        headers = conn.parser.headers
        assert headers is not None
        self.headers: Headers = headers

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives (decoded if the server compressed it)."""
        return _Body(self)

    async def aclose(self) -> None:
        """Return the connection to the pool if the answer was read whole, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        parser = conn.parser
        if parser.complete and parser.reusable and conn.error is None and not conn.closed:
            conn.pool.release(conn)
        else:
            conn.close()

    def __del__(self) -> None:
        conn = self._conn
        if conn is not None and not conn.pool.loop.is_closed():  # abandoned unread
            conn.close()


class _Body:
    """The body of an :class:`Exchange`, piece by piece."""

    __slots__ = ("_decoder", "_exchange", "_finished")

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._decoder: BodyDecoder | None = None
        coding = exchange.headers.get("content-encoding")
        if coding and coding.strip(" \t").lower() != "identity":
            self._decoder = BodyDecoder(coding)
        self._finished = False

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        conn = self._exchange._conn
        if conn is None:
            raise ReadError("the answer was closed before its body was read")
        parser = conn.parser
        decoder = self._decoder
        while True:
            if decoder is not None and decoder.has_more:
                piece = decoder.decode()
                if piece:
                    return piece
            if parser.body:
                piece = parser.body.popleft()
                conn.taken(len(piece))
                if decoder is not None:
                    piece = decoder.decode(piece)
                    if not piece:
                        continue
                return piece
            if conn.error is not None:
                raise conn.error
            if parser.complete:
                if decoder is not None and not self._finished:
                    self._finished = True
                    piece = decoder.finish()
                    if piece:
                        return piece
                raise StopAsyncIteration
            await conn.wait(self._exchange._read_timeout, self._exchange._deadline)


class DirectTransport:
    """Sends the package's async calls over a pool of our own HTTP/1.1 connections.

    The pool belongs to the event loop that first sends on it, as any asyncio connection
    does; a transport used from a new loop opens a new pool. Calls to a URL that a proxy in
    the environment applies to (or with credentials in it) go over an
    :class:`~tiered_router._http._aiohttp.AiohttpTransport` made on first need.

    Args:
        limits: Pool limits: ``max_connections`` (``None``: no limit) and
            ``keepalive_expiry`` (``max_keepalive_connections`` is not used: every
            connection is kept, as aiohttp's pool does).
        proxies: Proxy settings by scheme (``http``, ``https``, ``all``, ``no``); by
            default read from the environment now
            (:func:`tiered_router._http.env_proxies`).

    """

    def __init__(
        self,
        *,
        limits: Limits = DEFAULT_LIMITS,
        proxies: dict[str, str] | None = None,
    ) -> None:
        self._limits = limits
        self._proxies = dict(env_proxies() if proxies is None else proxies)
        self._targets: dict[str, _Target | None] = {}
        self._last: tuple[object, _Target | None] = (None, None)
        # one pool per event loop: a router shared by threads, each with its own loop (a
        # threaded app calling asyncio.run per request), keeps each thread's connections apart
        self._pools: dict[asyncio.AbstractEventLoop, _Pooled] = {}
        self._proxied: _aiohttp.AiohttpTransport | None = None

    def _target(self, url: str | URL) -> _Target | None:
        """Return where ``url``'s calls go, or ``None`` when aiohttp sends them."""
        last, target = self._last
        if url is last:  # a backend sends every call to one URL object
            return target
        key = str(url)
        if key in self._targets:
            target = self._targets[key]
        else:
            target = self._targets[key] = self._parse(key)
        self._last = (url, target)
        return target

    def _parse(self, url: str) -> _Target | None:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
        if scheme not in ("http", "https") or not host or "@" in parts.netloc:
            return None  # aiohttp says what is wrong, or sends the credentials
        port = parts.port or (443 if scheme == "https" else 80)
        proxy = self._proxies.get(scheme) or self._proxies.get("all")
        if proxy and not _bypassed(host, port, self._proxies.get("no", "")):
            return None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return _Target((scheme, host, port), f"POST {path} HTTP/1.1\r\nhost: {parts.netloc}\r\n")

    async def _pool(self) -> Pool:
        """The running loop's pool (opened on first use, closed when the loop shuts down)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "tiered_router's async HTTP calls run on asyncio; under another event loop "
                "(trio), give the backend async_http_client=httpx2.AsyncClient()"
            ) from None
        pooled = self._pools.get(loop)
        if pooled is not None and not pooled[0].closed:
            return pooled[0]
        for gone in [other for other in self._pools if other.is_closed()]:
            del self._pools[gone]  # closed without shutting down its generators
        pool = Pool(loop, self._limits)
        # the loop closes live async generators when it shuts down (asyncio.run does): the
        # pool's sockets are closed on their own loop, not leaked when the loop goes
        closer = _closed_with_its_loop(pool, self._pools)
        self._pools[loop] = (pool, closer)
        await closer.asend(None)  # runs to its first yield without giving the loop a turn
        return pool

    async def exchange(
        self,
        url: str | URL,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        timeout_s: float | None,
        *,
        deadline: float | None = None,
    ) -> Exchange | _aiohttp.Exchange:
        """POST ``body`` to ``url``; return the answer with its body still to be read.

        Args:
            url: Where to send it.
            headers: Request headers (``Host`` and ``Content-Length`` are added).
            body: The request body.
            timeout_s: Bounds waiting for a pooled connection, connecting and each read.
            deadline: When the whole exchange must be over, reading the body included
                (loop time; only for a ``url`` this transport :meth:`owns`): every wait
                ends by then, so the caller needs no timer of its own.

        Raises:
            httpx2.TransportError: The subclass matching what failed.
            ValueError: A header holds a line break.
            RuntimeError: No asyncio event loop is running.

        """
        pool = await self._pool()
        target = self._target(url)
        if target is None:
            if deadline is not None:
                raise ValueError("a deadline is only for a URL this transport owns (owns())")
            return await self._via_aiohttp().exchange(url, headers, body, timeout_s)
        headers = tuple(headers)
        present = {name.lower() for name, _ in headers}
        start = target.start
        if not present.isdisjoint(_OURS):  # the caller's Host replaces ours; we frame the body
            headers = tuple(h for h in headers if h[0].lower() not in _FRAMING)
            if "host" in present:
                start = target.start[: target.start.index("\r\n") + 2]
        fields = "".join([f"{name}: {value}\r\n" for name, value in headers])
        if (
            fields.count("\n") != len(headers)
            or fields.count("\r") != len(headers)
            or _CONTROL.search(fields) is not None
        ):
            raise ValueError("a request header name or value holds a line break or control byte")
        extra = "".join([f"{n}: {v}\r\n" for n, v in _DEFAULTS if n not in present])
        data = f"{start}content-length: {len(body)}\r\n{fields}{extra}\r\n".encode() + body
        timeouts = call_timeout(timeout_s)
        read_timeout = timeouts["read"]
        for attempt in (1, 2):
            conn = await pool.acquire(
                target.origin, timeouts["pool"], timeouts["connect"], deadline
            )
            transport = conn.transport
            assert transport is not None
            transport.write(data)
            if conn.reused and transport.is_closing() and attempt == 1:
                conn.close()  # the write failed: the server saw none of the request
                continue
            break
        parser = conn.parser
        try:
            while parser.headers is None:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(read_timeout, deadline)
        except BaseException:
            conn.close()
            raise
        return Exchange(conn, read_timeout, deadline)

    def owns(self, url: str | URL) -> bool:
        """Whether calls to ``url`` go over this transport's own connections (not aiohttp's).

        Only those take a ``deadline`` in :meth:`exchange`.
        """
        return self._target(url) is not None

    def _via_aiohttp(self) -> _aiohttp.AiohttpTransport:
        if self._proxied is None:
            from tiered_router._http._aiohttp import AiohttpTransport

            self._proxied = AiohttpTransport(limits=self._limits, proxies=self._proxies)
        return self._proxied

    async def aclose(self) -> None:
        """Close the running loop's pool (and aiohttp's, if a proxied call opened it).

        Another event loop's pool (a thread with its own loop sharing this transport) is
        left to that thread: it closes when its loop shuts down, or when ``aclose`` is
        awaited there.
        """
        running = asyncio.get_running_loop()
        pooled = self._pools.pop(running, None)
        for gone in [loop for loop in self._pools if loop.is_closed()]:
            del self._pools[gone]  # closed without shutting down its generators
        if pooled is not None:
            pool, closer = pooled
            pool.close()
            await closer.aclose()
            await asyncio.sleep(0)  # let the transports finish closing on this loop
        proxied, self._proxied = self._proxied, None
        if proxied is not None:
            await proxied.aclose()
