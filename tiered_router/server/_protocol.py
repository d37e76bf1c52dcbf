"""uvicorn's HTTP protocol with a time limit on a request's headers (no slowloris).

uvicorn limits how long an idle keep-alive connection may stay open, but not how long a
client may take to send a request's headers: a client that sends half a request line and
then nothing holds a connection (and a file descriptor) forever. :func:`guarded_protocol`
returns uvicorn's httptools protocol with a timer armed when a connection opens and when a
request's first byte arrives, and disarmed when its headers are complete; when it fires,
the connection is closed. The body has its own limit, in the app (``read_timeout_s``
around reading it; a slow body gets 408).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["guarded_protocol"]


def guarded_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """Return uvicorn's httptools protocol class with a ``header_timeout_s`` header limit."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        """httptools protocol that closes connections whose headers take too long."""

        _header_timer: asyncio.TimerHandle | None = None

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.logger.info(
                    "closing a connection that sent no complete request headers in %.1f s",
                    header_timeout_s,
                )
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()

    return GuardedHttpToolsProtocol


HEADER_TIMEOUT_ENV = "TIERED_ROUTER_HEADER_TIMEOUT_S"
"""Where ``serve --workers N`` passes the header time limit to its worker processes."""

WORKER_PROTOCOL = "tiered_router.server._protocol:WorkerProtocol"
"""Import path uvicorn's workers load the guarded protocol from (a class built in a function
cannot be pickled into a spawned worker; a module attribute can be imported there)."""


def __getattr__(name: str) -> Any:
    if name == "WorkerProtocol":
        import os

        return guarded_protocol(float(os.environ.get(HEADER_TIMEOUT_ENV, "10")))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
