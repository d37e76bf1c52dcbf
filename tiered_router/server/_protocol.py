"""uvicorn's HTTP protocol with a time limit on a request's headers (no slowloris).

uvicorn limits how long an idle keep-alive connection may stay open, but not how long a
client may take to send a request's headers: a client that sends half a request line and
then nothing holds a connection (and a file descriptor) forever.
:class:`GuardedHttpToolsProtocol` is uvicorn's httptools protocol with a timer armed when a
connection opens and when a request's first byte arrives, and disarmed when its headers are
complete; when it fires, the connection is closed (one timer per connection: a request only
notes the time its first byte came). The body has its own limit, in the app
(``read_timeout_s`` around reading it; a slow body gets 408).

With ``--workers`` the protocol is named to uvicorn by its import path (worker processes
cannot receive a class made at run time) and reads its limit from
``TIERED_ROUTER_HEADER_TIMEOUT_S``.

The protocol also tells the request it serves whether its body is already in (then it is
read with no timer) and when the client goes away: it puts itself in
the ASGI scope (:data:`~tiered_router.server._exchange.CONNECTION`), and the chat handler
sets :attr:`GuardedHttpToolsProtocol.on_client_lost` instead of running a task per request
that waits for ``http.disconnect``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tiered_router.server._exchange import CONNECTION

__all__ = ["HEADER_TIMEOUT_ENV", "PROTOCOL_PATH", "GuardedHttpToolsProtocol", "guarded_protocol"]

HEADER_TIMEOUT_ENV = "TIERED_ROUTER_HEADER_TIMEOUT_S"
"""Environment variable with the header limit, for worker processes."""

PROTOCOL_PATH = "tiered_router.server._protocol:GuardedHttpToolsProtocol"
"""Import path of :class:`GuardedHttpToolsProtocol`, for uvicorn's ``http`` option."""

_DEFAULT_S = 10.0


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol that closes connections whose headers take too long.

    It also tells the request being served when its client goes away (see the module).
    """

    header_timeout_s: float | None = None
    """The limit; ``None`` reads ``TIERED_ROUTER_HEADER_TIMEOUT_S`` (10 s when unset)."""

    _header_timer: asyncio.TimerHandle | None = None
    _limit_s: float = _DEFAULT_S
    _headers_since: float | None = None
    """When the headers being waited for began (loop time); ``None``: none awaited."""
    client_lost: bool = False
    """Whether the connection has closed."""
    on_client_lost: Callable[[], None] | None = None
    """Called once when the connection closes (set by the request being served)."""
    _begun = 0
    _complete = 0

    @property
    def bodies_received(self) -> bool:
        """Whether every request begun on this connection has come in whole, body too."""
        return self._complete == self._begun

    def _limit(self) -> float:
        if self.header_timeout_s is not None:
            return self.header_timeout_s
        try:
            return float(os.environ.get(HEADER_TIMEOUT_ENV, _DEFAULT_S))
        except ValueError:
            return _DEFAULT_S

    # one timer per connection, not one per request: a request's first byte only notes the
    # time, and the timer, when it fires, closes the connection or sleeps for what is left
    def _awaiting_headers(self) -> None:
        self._headers_since = self.loop.time()
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self._limit_s, self._check_headers)

    def _check_headers(self) -> None:
        self._header_timer = None
        since = self._headers_since
        if since is None:  # no headers awaited: the next request's first byte re-arms it
            return
        left = since + self._limit_s - self.loop.time()
        if left > 0:
            self._header_timer = self.loop.call_later(left, self._check_headers)
        elif not self.transport.is_closing():
            self.logger.info(
                "closing a connection that sent no complete request headers in %.1f s",
                self._limit_s,
            )
            self.transport.close()

    def connection_made(self, transport: Any) -> None:
        self._limit_s = self._limit()
        super().connection_made(transport)
        self._awaiting_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_since = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self.client_lost = True
        super().connection_lost(exc)
        notify, self.on_client_lost = self.on_client_lost, None
        if notify is not None:
            notify()

    def on_message_begin(self) -> None:
        super().on_message_begin()  # makes the request's scope
        self.scope[CONNECTION] = self  # type: ignore[literal-required]
        self._begun += 1
        self._awaiting_headers()

    def on_message_complete(self) -> None:
        self._complete += 1
        super().on_message_complete()

    def on_headers_complete(self) -> None:
        self._headers_since = None
        super().on_headers_complete()


def guarded_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """Return :class:`GuardedHttpToolsProtocol` with a ``header_timeout_s`` header limit."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s},
    )
