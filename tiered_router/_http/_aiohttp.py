"""The fast path for async calls when aiohttp is installed: :class:`AiohttpTransport`.

httpx2's own transport (httpcore2 with the pure-Python h11 parser) plus the
``httpx2.Request`` and ``httpx2.Response`` objects around each call cost about 0.58 ms of CPU
per call on loopback (send, read, parse); aiohttp's client, with its C HTTP parser, 0.34 ms
(``python benchmarks/bench_http.py``). A proxy spends much of its time there, so when aiohttp
is installed (the ``server`` extra installs it) each backend's async calls go over an
:class:`AiohttpTransport`; without it, over httpx2's transport.

The rest of the package does not see the difference: the one request path
(:mod:`tiered_router.backends._wire`) reads an :class:`Exchange` as it reads an
``httpx2.Response`` (``status_code``, ``headers``, ``aiter_bytes``, ``aclose``), and every
aiohttp failure is raised as the httpx2 exception of the same meaning (connect and read
timeouts, connection errors, protocol errors), so errors are translated in one place.

- Waiting for a pooled connection, connecting and each read are bounded by the call's
  remaining time (the caller bounds the whole exchange by its deadline on top).
- The body is handed over as it arrives (Server-Sent Events stream).
- One pool per transport (``httpx2.Limits``: connections, keep-alive expiry); TLS from
  ``httpx2.create_ssl_context`` (``SSL_CERT_FILE`` honoured). With a proxy set in the
  environment, :func:`tiered_router._http.build_async_transport` does not use this
  transport (httpx2's client routes through the proxy).

Set ``TIERED_ROUTER_ASYNC_HTTP=httpcore`` to use httpx2's own transport although aiohttp is
installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING

from tiered_router import _http

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ENV_VAR", "AiohttpTransport", "Exchange", "enabled", "preload"]

ENV_VAR = "TIERED_ROUTER_ASYNC_HTTP"
"""Environment variable choosing the async transport: ``aiohttp``, ``httpcore`` or unset
(aiohttp when installed)."""

_CHOICES = ("aiohttp", "httpcore")


def enabled() -> bool:
    """Return whether async calls should go over :class:`AiohttpTransport`.

    Raises:
        ValueError: ``TIERED_ROUTER_ASYNC_HTTP`` has a value other than ``aiohttp`` or
            ``httpcore``, or asks for aiohttp when it is not installed.

    """
    choice = os.environ.get(ENV_VAR, "").strip().lower()
    if choice and choice not in _CHOICES:
        raise ValueError(f"{ENV_VAR}={choice!r}: expected one of {', '.join(_CHOICES)}")
    installed = importlib.util.find_spec("aiohttp") is not None
    if choice == "aiohttp" and not installed:
        from tiered_router.exceptions import install_command

        raise ValueError(
            f"{ENV_VAR}=aiohttp but aiohttp is not installed: {install_command('server')}"
        )
    return installed and choice != "httpcore"


def preload() -> None:
    """Import aiohttp now when it will be used (a server calls this at start-up).

    Raises:
        ValueError: ``TIERED_ROUTER_ASYNC_HTTP`` is set to something it cannot honour, so a
            server refuses to start rather than failing its first request.

    """
    if enabled():
        import aiohttp  # noqa: F401
        import yarl  # noqa: F401


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    content = response.content
    while True:
        try:
            chunk = await content.readany()
        except BaseException as exc:
            translated = _translate(exc, reading=True)
            if translated is exc:
                raise
            raise translated from exc
        if not chunk:
            return
        yield chunk


class Exchange:
    """An answer from :meth:`AiohttpTransport.exchange`, read like an ``httpx2.Response``.

    Attributes:
        status_code: The HTTP status.
        headers: The response headers (case-insensitive mapping).

    """

    __slots__ = ("_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code: int = response.status
        self.headers: Mapping[str, str] = response.headers

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives (decoded if the server compressed it)."""
        return _chunks(self._response)

    async def aclose(self) -> None:
        """Return the connection to the pool if the body was read, else close it."""
        self._response.release()


def _translate(exc: BaseException, *, reading: bool) -> BaseException:
    """Return the httpx2 exception for an aiohttp failure (others are returned as they are)."""
    import aiohttp

    if isinstance(exc, asyncio.CancelledError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # waiting for the pool, or connecting
        return _http.ConnectTimeout(f"timed out connecting: {exc}")
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return _http.ReadTimeout(f"timed out reading: {type(exc).__name__}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _http.ConnectError(f"cannot connect: {exc}")
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return _http.RemoteProtocolError(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return _http.RemoteProtocolError(f"bad HTTP response: {exc.message}")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        kind = _http.ReadError if reading else _http.ConnectError
        return kind(f"{type(exc).__name__}: {exc}")
    return exc


_DEFAULTS = (("accept", "*/*"), ("accept-encoding", "identity"), ("user-agent", "tiered-router"))
"""Headers aiohttp would otherwise add (asking for compression among them)."""


def _with_defaults(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    out = list(headers)
    present = {name.lower() for name, _ in out}
    out.extend(item for item in _DEFAULTS if item[0] not in present)
    return out


class AiohttpTransport:
    """Sends the package's async calls over one aiohttp connection pool.

    The pool belongs to the event loop that first sends on it, as any asyncio connection
    does; a transport used from a new loop opens a new pool.

    Args:
        limits: Pool limits: ``max_connections`` (``None``: no limit) and
            ``keepalive_expiry``.

    """

    def __init__(self, *, limits: _http.Limits = _http.DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            import aiohttp

            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                limit_per_host=0,
                keepalive_timeout=self._limits.keepalive_expiry or 15.0,
                ssl=_http.create_ssl_context(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # a proxy in the environment never reaches this transport
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._loop = loop
        return self._session

    async def exchange(
        self,
        url: str | _http.URL,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        timeout_s: float | None,
    ) -> Exchange:
        """POST ``body`` to ``url``; return the answer with its body still to be read.

        Args:
            url: Where to send it.
            headers: Request headers (``Host`` and ``Content-Length`` are added).
            body: The request body.
            timeout_s: Bounds waiting for a pooled connection, connecting and each read.

        Raises:
            httpx2.TransportError: The subclass matching what failed.

        """
        import aiohttp
        import yarl

        session = self._session_for_loop()
        timeout = _http.call_timeout(timeout_s)
        try:
            response = await session.request(
                "POST",
                yarl.URL(str(url), encoded=True),
                headers=_with_defaults(headers),
                data=body or None,
                allow_redirects=False,
                compress=None,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
            )
        except BaseException as exc:
            translated = _translate(exc, reading=False)
            if translated is exc:
                raise
            raise translated from exc
        return Exchange(response)

    async def aclose(self) -> None:
        """Close the pool's connections."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                await session.close()
            except RuntimeError:  # its loop is closed: the sockets went with it
                pass
