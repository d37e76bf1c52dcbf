"""The one package that imports HTTP libraries (httpx2 and aiohttp).

Everything else in tiered_router that needs HTTP (the OpenAI-compatible backend, the proxy,
tests) gets its clients and types from here, so the dependency has one seam: httpx2's API
(requests, responses, exceptions). Importing httpx2 costs ~0.2 s, so callers on the
``import tiered_router`` path import this package lazily, inside the function that first
needs it.

Under that API, sync calls go over httpx2's client and async calls over one transport,
:class:`~tiered_router._http._direct.DirectTransport` (our own lean HTTP/1.1 client, which
hands calls through a proxy from the environment to aiohttp's client); each backend has its
own pool. Its failures are raised as httpx2's exceptions. A caller may hand a backend its own
``httpx2.AsyncClient`` instead (tests do, with :class:`MockTransport`).

Example:
    ```python
    from tiered_router import _http

    transport = _http.build_async_transport()  # our own HTTP/1.1 client, one pool
    client = _http.build_client()  # httpx2's, for sync calls
    ```

Wing (docs/architecture.md): the one seam to HTTP libraries; may import only the root's
shared values. Backends, the proxy and the test server get their clients here; nothing here
knows a model or a policy.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

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
    ProxyError,
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

from tiered_router._http._settings import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUT_S,
    _timeout,
    call_timeout,
    env_proxies,
)

if TYPE_CHECKING:
    from tiered_router._http._direct import DirectTransport

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT_S",
    "AsyncBaseTransport",
    "AsyncByteStream",
    "AsyncClient",
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
    "ProxyError",
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


def build_async_transport(*, limits: Limits = DEFAULT_LIMITS) -> DirectTransport:
    """Build the transport a backend's async calls go over: our own HTTP/1.1 pool.

    Proxies are read from the environment now (see :func:`env_proxies`); calls that go
    through one are handed to aiohttp's client. Sending on the transport skips a client's
    per-request work (cookies, auth, redirects, merging defaults); the caller builds
    complete requests.

    Args:
        limits: Connection-pool limits.

    """
    from tiered_router._http._direct import DirectTransport

    return DirectTransport(limits=limits)


def build_async_client(
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    limits: Limits = DEFAULT_LIMITS,
    headers: Mapping[str, str] | None = None,
    transport: AsyncBaseTransport | None = None,
) -> AsyncClient:
    """Build an httpx2 async client to hand a backend as its ``async_http_client``.

    The backends' own async calls never use one (they go over :func:`build_async_transport`);
    this is for callers who bring their own client: tests with a :class:`MockTransport`, or
    an application on another event loop than asyncio (trio).

    Args:
        timeout_s: Default timeout of a request in seconds (``None`` for none).
        limits: Connection-pool limits.
        headers: Headers sent with every request.
        transport: A transport to use instead of the network (e.g. :class:`MockTransport`).

    Returns:
        A new client; the caller closes it (``await client.aclose()``).

    """
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
