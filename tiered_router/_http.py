"""The one module that imports the HTTP library (httpx2).

Everything else in tiered_router that needs HTTP (the OpenAI-compatible backend, the proxy,
tests) gets its clients and types from here, so the dependency has one seam. Importing httpx2
costs ~0.2 s, so callers on the ``import tiered_router`` path import this module lazily,
inside the function that first needs it.

Example:
    ```python
    from tiered_router import _http

    client = _http.build_async_client(transport=_http.MockTransport(handler))
    ```

"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping

import httpx2
from httpx2 import (
    AsyncBaseTransport,
    AsyncByteStream,
    AsyncClient,
    BaseTransport,
    Client,
    ConnectError,
    ConnectTimeout,
    Headers,
    HTTPError,
    Limits,
    MockTransport,
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
    "BaseTransport",
    "Client",
    "ConnectError",
    "ConnectTimeout",
    "HTTPError",
    "Headers",
    "Limits",
    "MockTransport",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "Request",
    "Response",
    "Timeout",
    "TimeoutException",
    "TransportError",
    "WriteError",
    "create_ssl_context",
    "build_async_client",
    "build_client",
    "parse_retry_after",
]

DEFAULT_TIMEOUT_S = 60.0
"""Whole-request timeout of a client built here; backends pass a per-call timeout anyway."""

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Connect timeout: a server that does not accept a connection in 5 s is down, not slow."""

DEFAULT_LIMITS = Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30.0)
"""Connection pool: keep-alive connections are reused across an agent's turns, which saves a
TLS handshake (~100 ms) per call to the same provider."""


def _timeout(timeout_s: float | None) -> Timeout:
    connect = (
        DEFAULT_CONNECT_TIMEOUT_S
        if timeout_s is None
        else min(timeout_s, DEFAULT_CONNECT_TIMEOUT_S)
    )
    return Timeout(timeout_s, connect=connect)


def build_client(
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    limits: Limits = DEFAULT_LIMITS,
    headers: Mapping[str, str] | None = None,
    transport: BaseTransport | None = None,
) -> Client:
    """Build a pooled, keep-alive sync client.

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
    )


def build_async_client(
    *,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    limits: Limits = DEFAULT_LIMITS,
    headers: Mapping[str, str] | None = None,
    transport: AsyncBaseTransport | None = None,
) -> AsyncClient:
    """Build a pooled, keep-alive async client; the async twin of :func:`build_client`.

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
