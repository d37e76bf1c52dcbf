"""The async transport for calls through a proxy: :class:`AiohttpTransport`.

A backend's async calls go over :class:`~tiered_router._http._direct.DirectTransport`, our
own HTTP/1.1 client, which hands a call to this transport (aiohttp's client, its C HTTP
parser) when a proxy from the environment applies to its URL, or the URL carries
credentials. aiohttp was chosen by measurement against httpx2's own async transport, and
carried every async call until our client measured lighter (``benchmarks/bench_http.py``,
``benchmarks/bench_server_layer.py``; docs/proxy.md, "The upstream leg" and "The fourth
pass"). Sync calls use httpx2's client.

The rest of the package does not see aiohttp: the one request path
(:mod:`tiered_router.backends._wire`) reads an :class:`Exchange` as it reads an
``httpx2.Response`` (``status_code``, ``headers``, ``aiter_bytes``, ``aclose``), and every
aiohttp failure is raised as the httpx2 exception of the same meaning (connect and read
timeouts, connection errors, protocol errors), so errors are translated in one place.

- Waiting for a pooled connection, connecting and each read are bounded by the call's
  remaining time (the caller bounds the whole exchange by its deadline on top).
- The body is handed over as it arrives (Server-Sent Events stream).
- One pool per transport (``httpx2.Limits``: connections, keep-alive expiry); TLS from
  ``httpx2.create_ssl_context`` (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured).
- Proxies as httpx2 reads them: ``HTTP_PROXY`` for ``http://`` URLs, ``HTTPS_PROXY`` for
  ``https://`` ones (tunnelled with ``CONNECT``), ``ALL_PROXY`` for either, lower-case
  spellings too, and ``NO_PROXY`` (``*``, host names, domain suffixes, ``host:port``).
  They are read when the transport is built; credentials in a proxy URL are sent as
  ``Proxy-Authorization`` and never appear in an error.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from httpx2 import (
    URL,
    ConnectError,
    ConnectTimeout,
    Limits,
    ProxyError,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    create_ssl_context,
)

from tiered_router._http._settings import DEFAULT_LIMITS, call_timeout, env_proxies

if TYPE_CHECKING:
    import aiohttp
    import yarl

__all__ = ["AiohttpTransport", "Exchange", "preload"]


def preload() -> None:
    """Import aiohttp now (a server calls this at start-up, not on its first request)."""
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
        return ConnectTimeout(f"timed out connecting: {exc}")
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return ReadTimeout(f"timed out reading: {type(exc).__name__}")
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return ProxyError(f"cannot connect to the proxy: {exc.os_error}")
    if isinstance(exc, aiohttp.ClientHttpProxyError):  # the proxy refused the tunnel
        return ProxyError(f"the proxy answered {exc.status}: {exc.message}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectError(f"cannot connect: {exc}")
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return RemoteProtocolError(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return RemoteProtocolError(f"bad HTTP response: {exc.message}")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        kind = ReadError if reading else ConnectError
        return kind(f"{type(exc).__name__}: {exc}")
    return exc


_DEFAULTS = (("accept", "*/*"), ("accept-encoding", "identity"), ("user-agent", "tiered-router"))
"""Headers aiohttp would otherwise add (asking for compression among them)."""


def _with_defaults(
    headers: Iterable[tuple[str, str]], extra: tuple[tuple[str, str], ...]
) -> list[tuple[str, str]]:
    out = [*headers, *extra]
    present = {name.lower() for name, _ in out}
    out.extend(item for item in _DEFAULTS if item[0] not in present)
    return out


class _Route(NamedTuple):
    """Where a URL's calls go, worked out once per URL."""

    target: yarl.URL
    proxy: yarl.URL | None = None  # None: straight to the target
    auth: tuple[tuple[str, str], ...] = ()  # the proxy's credentials, as request headers
    tunnel_auth: dict[str, str] | None = None  # ... or as headers of the CONNECT request


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names ``host`` (``*``, a name or ``.suffix``, ``name:port``)."""
    host = host.lower().strip("[]")
    for entry in no_proxy.replace(" ", "").lower().split(","):
        if entry == "*":
            return True
        name, want = entry, ""
        if entry.startswith("["):  # [::1]:8000
            name, _, rest = entry[1:].partition("]")
            want = rest.removeprefix(":")
        elif entry.count(":") == 1:  # host:port (more colons: an IPv6 address)
            name, _, want = entry.partition(":")
        name = name.lstrip(".")
        if not name or (want and want != str(port)):
            continue
        if host == name or host.endswith("." + name):
            return True
    return False


def _route(url: str, proxies: Mapping[str, str]) -> _Route:
    """Parse ``url`` once and pick its proxy from ``proxies`` (see the module docstring).

    Raises:
        httpx2.ProxyError: The proxy that applies is not an ``http://`` or ``https://`` URL.

    """
    import yarl

    target = yarl.URL(url, encoded=True)
    scheme = target.scheme
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or scheme not in ("http", "https"):
        return _Route(target)
    if _bypassed(target.host or "", target.port, proxies.get("no", "")):
        return _Route(target)
    if "://" not in proxy:  # HTTP_PROXY=host:3128, as urllib and httpx2 read it
        proxy = f"http://{proxy}"
    parsed = yarl.URL(proxy)
    if parsed.scheme not in ("http", "https"):
        name = f"{scheme.upper()}_PROXY" if proxies.get(scheme) else "ALL_PROXY"
        raise ProxyError(
            f"{name}: a {parsed.scheme}:// proxy is not supported for async calls; "
            "use an http:// or https:// proxy"
        )
    if parsed.user is None:
        return _Route(target, parsed)
    pair = f"{parsed.user}:{parsed.password or ''}".encode()
    header = ("Proxy-Authorization", "Basic " + base64.b64encode(pair).decode("ascii"))
    if scheme == "https":  # tunnelled: the credentials go with CONNECT, not to the target
        return _Route(target, parsed.with_user(None), tunnel_auth=dict([header]))
    return _Route(target, parsed.with_user(None), auth=(header,))


class AiohttpTransport:
    """Sends the package's async calls over one aiohttp connection pool.

    The pool belongs to the event loop that first sends on it, as any asyncio connection
    does; a transport used from a new loop opens a new pool.

    Args:
        limits: Pool limits: ``max_connections`` (``None``: no limit) and
            ``keepalive_expiry``.
        proxies: Proxy settings by scheme (``http``, ``https``, ``all``, ``no``); by
            default read from the environment now
            (:func:`tiered_router._http.env_proxies`).

    """

    def __init__(
        self,
        *,
        limits: Limits = DEFAULT_LIMITS,
        proxies: Mapping[str, str] | None = None,
    ) -> None:
        self._limits = limits
        self._proxies = dict(env_proxies() if proxies is None else proxies)
        self._routes: dict[str, _Route] = {}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "tiered_router's async HTTP calls run on asyncio; under another event loop "
                "(trio), give the backend async_http_client=httpx2.AsyncClient()"
            ) from None
        if self._session is None or self._loop is not loop or self._session.closed:
            import aiohttp

            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                limit_per_host=0,
                keepalive_timeout=self._limits.keepalive_expiry or 15.0,
                ssl=create_ssl_context(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # proxies are picked once per URL here, not per request
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._loop = loop
        return self._session

    def _route_of(self, url: str) -> _Route:
        route = self._routes.get(url)
        if route is None:
            route = self._routes[url] = _route(url, self._proxies)
        return route

    async def exchange(
        self,
        url: str | URL,
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
            httpx2.TransportError: The subclass matching what failed (``ProxyError`` when
                the proxy set for ``url`` in the environment is not supported).
            RuntimeError: No asyncio event loop is running.

        """
        import aiohttp

        session = self._session_for_loop()
        route = self._route_of(str(url))
        timeout = call_timeout(timeout_s)
        try:
            response = await session.request(
                "POST",
                route.target,
                headers=_with_defaults(headers, route.auth),
                data=body or None,
                allow_redirects=False,
                compress=None,
                proxy=route.proxy,
                proxy_headers=route.tunnel_auth,
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
