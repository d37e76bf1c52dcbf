"""One HTTP exchange on plain ASGI: the request's headers and body, the client leaving, the reply.

The chat endpoint is served here without a framework: the headers are read from the ASGI
scope once, the body from ``receive`` under its size and time limits, and the reply is two
``send`` calls (or a stream of them). Starlette serves the other endpoints; :class:`Reply`
is an ASGI callable, so its handlers return it too.

A client that goes away is noticed by a watcher (:meth:`Exchange.watch`): it reads
``receive`` until ``http.disconnect`` and then, until the first byte of the answer, cancels
the task serving the request, so the upstream call (JSON, or a stream not yet started) is
cancelled at once; :attr:`Exchange.gone` tells that cancellation from the server's own (a
graceful shutdown that ran out). A stream already sending ends at its next event.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any

__all__ = ["ClientGone", "Exchange", "Reply", "TooLarge", "uncancel"]

Scope = MutableMapping[str, Any]


class TooLarge(Exception):
    """The request body is over the size limit."""


class ClientGone(Exception):
    """The client closed the connection before its request was answered."""


def uncancel() -> None:
    """Take back the cancellation just handled, so later timeouts in this task still work."""
    task = asyncio.current_task()
    if task is not None and sys.version_info >= (3, 11):
        task.uncancel()


def _raw(headers: Mapping[str, str], media_type: str, length: int | None) -> list[Any]:
    raw = [(b"content-type", media_type.encode("latin-1"))]
    if length is not None:
        raw.append((b"content-length", str(length).encode("latin-1")))
    raw.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    return raw


class Reply:
    """A whole response (status, body, headers), sent in two ASGI messages.

    Args:
        body: The body.
        status_code: The HTTP status.
        headers: Extra headers (``content-type`` and ``content-length`` are set here).
        media_type: The ``content-type``.

    """

    __slots__ = ("body", "headers", "media_type", "status_code")

    def __init__(
        self,
        body: bytes,
        status_code: int = 200,
        *,
        headers: Mapping[str, str] | None = None,
        media_type: str = "application/json",
    ) -> None:
        self.body = body
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers or {}
        self.media_type = media_type

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Send the response (an ASGI app, so Starlette's handlers may return it)."""
        raw = _raw(self.headers, self.media_type, len(self.body))
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})


class Exchange:
    """One request being served: its path and headers, its body, whether the client left.

    Args:
        scope: The ASGI scope (``type`` ``http``).
        receive: The ASGI ``receive``.
        send: The ASGI ``send``.

    """

    __slots__ = (
        "_armed",
        "_headers",
        "_raw_headers",
        "_task",
        "_watcher",
        "gone",
        "path",
        "receive",
        "send",
    )

    def __init__(self, scope: Scope, receive: Any, send: Any) -> None:
        self.path: str = scope["path"]
        self.receive = receive
        self.send = send
        # ASGI servers give header names in lower case; the first of a repeated header wins
        self._raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        self._headers: dict[bytes, bytes] = dict(reversed(self._raw_headers))
        self.gone = False
        """Whether the client closed the connection (then the task was cancelled)."""
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Future[None] | None = None
        self._armed = False

    def header(self, name: bytes) -> str | None:
        """The value of header ``name`` (lower case), or ``None``."""
        value = self._headers.get(name)
        return None if value is None else value.decode("latin-1")

    def header_values(self, name: bytes) -> list[str]:
        """Every value of header ``name`` (lower case), in order; ``[]`` when it is absent."""
        if name not in self._headers:
            return []
        return [v.decode("latin-1") for k, v in self._raw_headers if k == name]

    async def body(self, limit: int) -> bytes:
        """Read the whole body.

        Raises:
            TooLarge: The body (or its declared ``content-length``) is over ``limit`` bytes.
            ClientGone: The client left before sending all of it.

        """
        declared = self._headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise TooLarge
        parts: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            part = message.get("body", b"")
            size += len(part)
            if size > limit:
                raise TooLarge
            parts.append(part)
            if not message.get("more_body", False):
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def watch(self) -> None:
        """From now on, cancel the current task when the client goes away.

        Call it once the body has been read: the watcher (one task for the rest of the
        request) reads ``receive`` for the ``http.disconnect`` that comes when the
        connection closes. :meth:`close` ends it.
        """
        self._task = asyncio.current_task()
        self._armed = True
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._armed:
            self._armed = False
            if self._task is not None:
                self._task.cancel()

    def disarm(self) -> None:
        """Stop cancelling the task when the client goes (a whole reply is about to go out)."""
        self._armed = False

    def close(self) -> None:
        """Stop watching: the request is over."""
        self._armed = False
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    async def stream(self, headers: Mapping[str, str], events: AsyncIterator[bytes]) -> None:
        """Send a ``200 text/event-stream`` response, one body message per event.

        Each ``send`` waits while the client's socket is backed up (backpressure), so a
        slow reader slows the upstream read instead of filling memory. A client that
        leaves ends the stream at the next event; the stream (and the upstream call under
        it) is closed before this returns.
        """
        raw = _raw(headers, "text/event-stream", None)
        send = self.send
        # from the first byte on, a client that leaves ends the stream at its next event:
        # closing the routed stream there traces it as abandoned by its client
        self._armed = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            async for event in events:
                if self.gone:
                    break
                await send({"type": "http.response.body", "body": event, "more_body": True})
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self.gone:
                raise
            uncancel()  # the client left: nothing more to send, the close below is the end
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()  # closes the routed stream and the upstream connection
