"""uvicorn's HTTP protocol with a time limit on a request's headers (no slowloris).

uvicorn limits how long an idle keep-alive connection may stay open, but not how long a
client may take to send a request's headers: a client that sends half a request line and
then nothing holds a connection (and a file descriptor) forever.
:class:`GuardedHttpToolsProtocol` is uvicorn's httptools protocol with a timer armed when a
connection opens and when a request's first byte arrives, and disarmed when its headers are
complete; when it fires, the connection is closed. The body has its own limit, in the app
(``read_timeout_s`` around reading it; a slow body gets 408).

With ``--workers`` the protocol is named to uvicorn by its import path (worker processes
cannot receive a class made at run time) and reads its limit from
``TIERED_ROUTER_HEADER_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HEADER_TIMEOUT_ENV", "PROTOCOL_PATH", "GuardedHttpToolsProtocol", "guarded_protocol"]

HEADER_TIMEOUT_ENV = "TIERED_ROUTER_HEADER_TIMEOUT_S"
"""Environment variable with the header limit, for worker processes."""

PROTOCOL_PATH = "tiered_router.server._protocol:GuardedHttpToolsProtocol"
"""Import path of :class:`GuardedHttpToolsProtocol`, for uvicorn's ``http`` option."""

_DEFAULT_S = 10.0


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol that closes connections whose headers take too long."""

    header_timeout_s: float | None = None
    """The limit; ``None`` reads ``TIERED_ROUTER_HEADER_TIMEOUT_S`` (10 s when unset)."""

    _header_timer: asyncio.TimerHandle | None = None

    def _limit(self) -> float:
        if self.header_timeout_s is not None:
            return self.header_timeout_s
        try:
            return float(os.environ.get(HEADER_TIMEOUT_ENV, _DEFAULT_S))
        except ValueError:
            return _DEFAULT_S

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self._limit(), self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.logger.info(
                "closing a connection that sent no complete request headers in %.1f s",
                self._limit(),
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


def guarded_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """Return :class:`GuardedHttpToolsProtocol` with a ``header_timeout_s`` header limit."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s},
    )
