"""A lean HTTP/1.1 transport for httpx2, on plain asyncio streams.

httpx2's default transport (httpcore2 + h11 + anyio) spends about 0.7 ms of CPU on a small
JSON request; the proxy's upstream leg cannot afford that (its budget is about 1 ms per
request in total). :class:`LeanAsyncTransport` implements httpx2's ``AsyncBaseTransport``
with keep-alive connections, one ``write`` per request and a hand-written response parser,
at about a tenth of the cost. It takes httpx2 ``Request`` objects and returns httpx2
``Response`` objects, so anything built on the transport interface (and every test double,
such as ``MockTransport``) works unchanged.

What it does not do, by design: HTTP/2, proxies from the environment, redirects, cookies,
compressed bodies (it asks for ``identity``). The httpx2 types come from
:mod:`tiered_router._http`, the one module that imports httpx2.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from tiered_router import _http

__all__ = ["LeanAsyncTransport", "LeanResponse"]

_MAX_HEAD = 64 * 1024
_READ_SIZE = 64 * 1024
_Origin = tuple[str, str, int]

if sys.version_info >= (3, 11):

    def _deadline(seconds: float | None) -> AbstractAsyncContextManager[Any]:
        return asyncio.timeout(seconds)

else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _deadline(seconds: float | None) -> AsyncIterator[None]:
        import anyio

        with anyio.fail_after(seconds):
            yield


@dataclass(slots=True, eq=False)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    origin: _Origin
    idle_since: float = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        return (
            now - self.idle_since < expiry
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(slots=True)
class _Pool:
    loop: asyncio.AbstractEventLoop
    limit: asyncio.Semaphore
    idle: dict[_Origin, deque[_Conn]] = field(default_factory=dict)


def _timeouts(request: _http.Request) -> tuple[float | None, float | None]:
    found = request.extensions.get("timeout") or {}
    return found.get("connect"), found.get("read")


class LeanAsyncTransport(_http.AsyncBaseTransport):
    """HTTP/1.1 keep-alive transport on asyncio streams (see the module docstring).

    Example:
        ```python
        transport = LeanAsyncTransport()
        request = _http.Request("POST", url, headers=headers, content=body,
                                extensions={"timeout": {"connect": 5, "read": 30}})
        response = await transport.handle_async_request(request)
        await response.aread()
        ```

    Args:
        max_connections: Most connections open at once (a request waits for a free one).
        keepalive_expiry: Idle seconds after which a pooled connection is not reused.
        ssl_context: TLS settings for ``https`` origins; httpx2's defaults when ``None``.

    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._max = max_connections
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._pool: _Pool | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"LeanAsyncTransport(max_connections={self._max})"

    def _get_pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.loop is not loop:
            # connections belong to one event loop: a new loop starts a new pool
            pool = self._pool = _Pool(loop=loop, limit=asyncio.Semaphore(self._max))
        return pool

    async def handle_async_request(self, request: _http.Request) -> _http.Response:
        """Send ``request`` and return the response with its body still to be read.

        Raises:
            httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.ReadTimeout,
            httpx2.ReadError, httpx2.RemoteProtocolError: as httpx2's own transport would.

        """
        url = request.url
        origin: _Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        connect_timeout, read_timeout = _timeouts(request)
        body = await request.aread()
        head = self._request_head(request, origin, len(body))
        status, headers, stream = await self._send(
            origin, head + body, request.method, connect_timeout, read_timeout, request
        )
        return _http.Response(status, headers=headers, stream=stream, request=request)

    async def send(
        self,
        origin: tuple[str, str, int],
        data: bytes,
        *,
        method: str = "POST",
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> LeanResponse:
        """Send a request given as bytes (head and body) and return the lean response.

        The fast path for callers that build the request themselves (the raw-HTTP backend
        keeps its request head prebuilt): no httpx2 ``Request`` or ``Response`` objects.

        Args:
            origin: ``(scheme, host, port)``.
            data: The whole request: request line, headers (with ``host`` and
                ``content-length``), blank line and body.
            method: The request's method (a ``HEAD`` answer has no body).
            connect_timeout: Seconds to connect (``None``: no limit).
            read_timeout: Seconds for each read of the answer (``None``: no limit).

        Raises:
            httpx2.TransportError: As :meth:`handle_async_request`.

        """
        status, headers, stream = await self._send(
            origin, data, method, connect_timeout, read_timeout, None
        )
        return LeanResponse(status, headers, stream)

    async def _send(
        self,
        origin: _Origin,
        data: bytes,
        method: str,
        connect_timeout: float | None,
        read_timeout: float | None,
        request: _http.Request | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], _Body]:
        if self._closed:
            raise _http.ConnectError("the transport is closed", request=request)
        pool = self._get_pool()
        await pool.limit.acquire()
        try:
            # an idle connection the server closed shows as at_eof() and is not reused; a
            # close racing with this request fails it, and the router's retry loop decides
            conn = self._take(pool, origin) or await self._connect(origin, connect_timeout, request)
            return await self._exchange(pool, conn, data, method, request, read_timeout)
        except BaseException:
            pool.limit.release()
            raise

    @staticmethod
    def _request_head(request: _http.Request, origin: _Origin, length: int) -> bytes:
        url = request.url
        lines = [b"%s %s HTTP/1.1" % (request.method.encode(), url.raw_path)]
        seen_host = False
        for name, value in request.headers.raw:
            lowered = name.lower()
            if lowered in (b"content-length", b"transfer-encoding", b"connection"):
                continue
            if lowered == b"host":
                seen_host = True
            lines.append(name + b": " + value)
        if not seen_host:
            default = 443 if origin[0] == "https" else 80
            host = url.host if origin[2] == default else f"{url.host}:{origin[2]}"
            lines.append(b"host: " + host.encode("idna"))
        if length or request.method not in ("GET", "HEAD"):
            lines.append(b"content-length: %d" % length)
        lines.append(b"accept-encoding: identity")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def _take(self, pool: _Pool, origin: _Origin) -> _Conn | None:
        idle = pool.idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable(now, self._expiry):
                return conn
            conn.close()
        return None

    async def _connect(
        self, origin: _Origin, timeout: float | None, request: _http.Request | None
    ) -> _Conn:
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        if scheme == "https":
            context = self._ssl = self._ssl or _http.create_ssl_context()
        try:
            async with _deadline(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, limit=_MAX_HEAD
                )
        except TimeoutError as exc:
            raise _http.ConnectTimeout(
                f"connect to {host}:{port} timed out", request=request
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise _http.ConnectError(f"{type(exc).__name__}: {exc}", request=request) from exc
        return _Conn(reader=reader, writer=writer, origin=origin)

    async def _exchange(
        self,
        pool: _Pool,
        conn: _Conn,
        data: bytes,
        method: str,
        request: _http.Request | None,
        timeout: float | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], _Body]:
        try:
            conn.writer.write(data)
            async with _deadline(timeout):
                head = await conn.reader.readuntil(b"\r\n\r\n")
                status, headers = _parse_head(head)
                while 100 <= status < 200:  # informational answers come before the real one
                    head = await conn.reader.readuntil(b"\r\n\r\n")
                    status, headers = _parse_head(head)
        except asyncio.IncompleteReadError as exc:
            conn.close()
            raise _http.RemoteProtocolError(
                "server closed the connection without a full response", request=request
            ) from exc
        except TimeoutError as exc:
            conn.close()
            raise _http.ReadTimeout("timed out waiting for the response", request=request) from exc
        except (ConnectionError, OSError) as exc:
            conn.close()
            raise _http.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc
        except ValueError as exc:
            conn.close()
            raise _http.RemoteProtocolError(str(exc), request=request) from exc
        except asyncio.LimitOverrunError as exc:
            conn.close()
            raise _http.RemoteProtocolError(
                "response header block too large", request=request
            ) from exc
        return status, headers, _Body(self, pool, conn, headers, status, method, request, timeout)

    def _release(self, pool: _Pool, conn: _Conn | None) -> None:
        pool.limit.release()
        if conn is None:
            return
        if self._closed or pool.loop.is_closed():
            conn.close()
            return
        conn.idle_since = time.monotonic()
        pool.idle.setdefault(conn.origin, deque()).append(conn)

    async def aclose(self) -> None:
        """Close every pooled connection; later requests fail."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            for idle in pool.idle.values():
                for conn in idle:
                    conn.close()
            pool.idle.clear()


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError(f"malformed status line: {lines[0][:80]!r}")
    status = int(parts[1])
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"malformed header line: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return status, headers


class _Chunked:
    """Incremental decoder of a chunked transfer-encoded body."""

    __slots__ = ("_buffer", "finished")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        """Add received bytes; return the payload of every chunk now complete.

        Raises:
            ValueError: On a malformed chunk-size line.
        """
        buffer = self._buffer
        buffer += data
        out = bytearray()
        while True:
            end = buffer.find(b"\r\n")
            if end < 0:
                break
            size = int(bytes(buffer[:end]).split(b";", 1)[0].strip(), 16)
            if size == 0:
                trailer = (
                    buffer.find(b"\r\n\r\n", end) if buffer[end + 2 : end + 4] != b"\r\n" else end
                )
                if trailer < 0:
                    break  # trailers not complete yet
                self.finished = True
                buffer.clear()
                break
            start = end + 2
            if len(buffer) < start + size + 2:
                break  # the rest of this chunk is still on its way
            out += buffer[start : start + size]
            del buffer[: start + size + 2]
        return bytes(out)


class LeanResponse:
    """An answer from :meth:`LeanAsyncTransport.send`: status, headers, body stream.

    Attributes:
        status_code: The HTTP status.
        raw_headers: Header names and values as received.
        stream: The body, as an async iterator of bytes (read it, or :meth:`aclose`).

    """

    __slots__ = ("_headers", "raw_headers", "status_code", "stream")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], stream: _Body) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.stream = stream
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Headers with lower-case names (repeated ones joined with ``", "``)."""
        if self._headers is None:
            found: dict[str, str] = {}
            for name, value in self.raw_headers:
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                found[key] = f"{found[key]}, {text}" if key in found else text
            self._headers = found
        return self._headers

    async def aread(self) -> bytes:
        """Read the whole body."""
        return b"".join([part async for part in self.stream])

    async def aclose(self) -> None:
        """Release the connection (closed when the body was not read to its end)."""
        await self.stream.aclose()


class _Body(_http.AsyncByteStream):
    """The response body: content-length, chunked, or until the server closes."""

    def __init__(
        self,
        transport: LeanAsyncTransport,
        pool: _Pool,
        conn: _Conn,
        headers: list[tuple[bytes, bytes]],
        status: int,
        method: str,
        request: _http.Request | None,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._pool = pool
        self._conn: _Conn | None = conn
        self._request = request
        self._timeout = timeout
        self._length: int | None = None
        self._chunked = False
        keep_alive = True
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                self._length = int(value)
            elif lowered == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif lowered == b"connection":
                keep_alive = b"close" not in value.lower()
        if status in (204, 304) or method == "HEAD":
            self._length = 0
        if self._chunked:
            self._length = None
        self._keep_alive = keep_alive and (self._chunked or self._length is not None)
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        reader, timeout = conn.reader, self._timeout
        # one timeout per read (httpx semantics), never held across a yield: the consumer's
        # own time between pieces is not the server's
        try:
            if self._length is not None:
                left = self._length
                while left:
                    async with _deadline(timeout):
                        part = await reader.read(min(left, _READ_SIZE))
                    if not part:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(part)
                    yield part
            elif self._chunked:
                # decode every chunk that one read brought in, and yield them as one piece:
                # an SSE answer is many small chunks, often all in one packet
                frames = _Chunked()
                while not frames.finished:
                    async with _deadline(timeout):
                        data = await reader.read(_READ_SIZE)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", None)
                    part = frames.feed(data)
                    if part:
                        yield part
            else:
                while True:
                    async with _deadline(timeout):
                        part = await reader.read(_READ_SIZE)
                    if not part:
                        break
                    yield part
            self._done = True
        except TimeoutError as exc:
            raise _http.ReadTimeout(
                "timed out reading the response", request=self._request
            ) from exc
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            raise _http.ReadError(
                f"connection lost while reading the response: {type(exc).__name__}",
                request=self._request,
            ) from exc
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise _http.RemoteProtocolError(
                "malformed chunked body", request=self._request
            ) from exc
        finally:
            await self.aclose()  # back to the pool when read to the end, else closed

    async def aclose(self) -> None:
        """Give the connection back to the pool, or close it when the body was not read."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not (self._done and self._keep_alive):
            conn.close()
            conn = None
        self._transport._release(self._pool, conn)
