"""The HTTP seam's settings: default timeouts and pool limits, per-call timeouts, proxies.

Shared by the face (:mod:`tiered_router._http`) and the async transports (ours and
aiohttp's), which import this module and httpx2 only, never the face that builds them.
"""

from __future__ import annotations

import urllib.request

from httpx2 import Limits, Timeout

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT_S",
    "call_timeout",
    "env_proxies",
]

DEFAULT_TIMEOUT_S = 60.0
"""Whole-request timeout of a client built here; backends pass a per-call timeout anyway."""

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Connect timeout: a server that does not accept a connection in 5 s is down, not slow."""

DEFAULT_LIMITS = Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30.0)
"""Connection pool of one client (each backend builds its own, so one hung upstream cannot
take the connections another needs): keep-alive connections are reused across an agent's
turns, which saves a TLS handshake (~100 ms) per call to the same provider."""


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
    """Return the proxy settings in the environment, by scheme (``http``, ``https``, ``all``).

    ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (under ``no``), upper or
    lower case, as urllib reads them (and httpx2, for sync calls).
    """
    return urllib.request.getproxies_environment()
