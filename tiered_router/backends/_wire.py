"""The one request path to an OpenAI-compatible endpoint: JSON over HTTP with httpx2.

:class:`~tiered_router.backends.openai_compat.OpenAICompatBackend` builds a request body
(model, messages, dialect and quirks applied) and hands it here as a :class:`Call`. This
module sends it on the backend's own pooled client (from :mod:`tiered_router._http`), reads
the answer and turns every way it can go wrong into the most specific
:class:`~tiered_router.BackendError`, raised ``from`` the foreign exception:

- the whole exchange (waiting for a pooled connection, connecting, sending, reading the whole
  body, every event of a stream) is bounded by the call's ``timeout_s``, so an upstream that
  drips its answer cannot hold a turn past its deadline;
- a body larger than :data:`MAX_RESPONSE_BYTES`, JSON nested deeper than
  :data:`~tiered_router._limits.MAX_JSON_DEPTH`, an unreadable Server-Sent Event or an
  in-band error event is a :class:`~tiered_router.BackendResponseError`;
- the API key is scrubbed from every message, whatever its length.

Server-Sent Events are split by :class:`SSEDecoder`, the package's one SSE parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tiered_router import _limits
from tiered_router._json import dumps as _dumps
from tiered_router.backends._openai_convert import server_message
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendError,
    BackendRateLimited,
    BackendResponseError,
    BackendStatusError,
    BackendTimeout,
)

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from tiered_router import _http
    from tiered_router._http._aiohttp import AiohttpTransport

    Sender = _http.AsyncClient | _http.AsyncBaseTransport | AiohttpTransport
    """What async calls are sent on: a client, httpx2's transport, or aiohttp's."""

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_RESPONSE_BYTES",
    "Call",
    "SSEDecoder",
    "acall",
    "body_of",
    "aevents",
    "call",
    "events",
    "scrub",
    "status_error",
    "translate",
]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Largest upstream answer read (a whole JSON body, or the sum of a stream's events)."""

MAX_EVENT_BYTES = 1024 * 1024
"""Largest single Server-Sent Event."""

_MAX_MESSAGE = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One prepared HTTP call.

    Attributes:
        backend: The backend's name, for errors.
        url: The chat-completions URL (an ``httpx2.URL`` saves parsing it per call).
        headers: Request headers, the API key's ``authorization`` included.
        body: The JSON body.
        timeout_s: Seconds the whole exchange may take (``None``: no limit).
        secret: The API key, scrubbed from every error.
        max_bytes: Largest answer read.

    """

    backend: str
    url: str | _http.URL
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timeout_s: float | None
    secret: str | None = None
    max_bytes: int = MAX_RESPONSE_BYTES

    def request(self) -> _http.Request:
        """Build the httpx2 request."""
        from tiered_router import _http

        return _http.Request(
            "POST",
            self.url,
            headers=list(self.headers),
            content=self.body,
            extensions={"timeout": _http.call_timeout(self.timeout_s)},
        )


def body_of(kwargs: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """Flatten ``chat.completions.create``-shaped arguments into a JSON body and headers.

    ``extra_body`` is merged into the body (as the openai SDK does), ``extra_headers`` is
    returned apart and ``timeout`` is dropped (the call carries it).
    """
    body = dict(kwargs)
    body.pop("timeout", None)
    extra_body = body.pop("extra_body", None)
    extra_headers = body.pop("extra_headers", None)
    if extra_body:
        body.update(extra_body)
    headers = {_clean(k): _clean(v) for k, v in (extra_headers or {}).items()}
    return _dumps(body), headers


def _clean(value: object) -> str:
    """Return a header name or value without line breaks (no header injection)."""
    return str(value).replace("\r", " ").replace("\n", " ")


# -- errors -------------------------------------------------------------------------------


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def scrub(exc: BaseException, secret: str | None) -> None:
    """Replace ``secret`` with ``***`` in ``exc`` and its causes, whatever its length."""
    if not secret:
        return
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(isinstance(a, str) and secret in a for a in current.args):
            current.args = tuple(
                a.replace(secret, "***") if isinstance(a, str) else a for a in current.args
            )
        message = getattr(current, "message", None)
        if isinstance(message, str) and secret in message:
            with contextlib.suppress(AttributeError):
                current.message = message.replace(secret, "***")  # type: ignore[attr-defined]
        current = current.__cause__ or current.__context__


def status_error(
    status: int, headers: Mapping[str, str] | None, data: bytes, *, backend: str
) -> BackendError:
    """Return the error for an HTTP error status, with the server's message made readable."""
    from tiered_router import _http

    try:
        parsed: Any = _limits.loads(data)
    except ValueError:
        parsed = data.decode("utf-8", "replace")
    detail = server_message(parsed) or f"HTTP {status}"
    retry_after = _http.parse_retry_after(headers)
    if status == 429:
        return BackendRateLimited(
            f"HTTP 429 rate limited: {detail}", backend=backend, retry_after_s=retry_after
        )
    return BackendStatusError(
        f"HTTP {status}: {detail}",
        backend=backend,
        status_code=status,
        retry_after_s=retry_after,
    )


def translate(exc: BaseException, *, backend: str) -> BackendError:
    """Translate an HTTP or decoding exception to the most specific backend error.

    The caller scrubs the key and raises the result ``from exc``.
    """
    from tiered_router import _http

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, _http.TimeoutException)):
        return BackendTimeout(f"request timed out: {type(exc).__name__}", backend=backend)
    if isinstance(exc, _http.HTTPError):
        return BackendConnectionError(
            f"connection failed: {type(exc).__name__}: {_clip(str(exc))}", backend=backend
        )
    if isinstance(exc, _limits.JSONTooDeep):
        return BackendResponseError(f"unreadable response body: {exc}", backend=backend)
    if isinstance(exc, (ValueError, RecursionError)):
        return BackendResponseError(
            f"unreadable response body: {type(exc).__name__}: {_clip(str(exc))}", backend=backend
        )
    return BackendError(f"{type(exc).__name__}: {_clip(str(exc))}", backend=backend)


def _caught() -> tuple[type[BaseException], ...]:
    from tiered_router import _http

    return (_http.HTTPError, ValueError, RecursionError, TimeoutError, asyncio.TimeoutError)


def _fail(exc: BaseException, call: Call) -> BackendError:
    error = translate(exc, backend=call.backend)
    scrub(error, call.secret)
    scrub(exc, call.secret)  # it becomes __cause__ and shows in tracebacks
    return error


def _too_large(call: Call) -> BackendResponseError:
    return BackendResponseError(
        f"response larger than {call.max_bytes} bytes", backend=call.backend
    )


def _json(data: bytes, call: Call) -> Any:
    try:
        return _limits.loads(data)
    except _limits.JSONTooDeep as exc:
        raise _fail(exc, call) from exc
    except ValueError as exc:
        snippet = data[:200].decode("utf-8", "replace")
        error = BackendResponseError(
            f"unreadable response body: expected JSON, got text: {_clip(snippet)!r}",
            backend=call.backend,
        )
        scrub(error, call.secret)
        scrub(exc, call.secret)
        raise error from exc


def _status_fail(response: _Answer, data: bytes, call: Call) -> BackendError:
    """Return the error for an error status, caused by httpx2's own ``HTTPStatusError``."""
    from tiered_router import _http

    error = status_error(response.status_code, response.headers, data, backend=call.backend)
    scrub(error, call.secret)
    if isinstance(response, _http.Response):
        request, cause = response.request, response
    else:  # the lean path built no httpx2 objects: build them for the error's cause
        request = call.request()
        cause = _http.Response(
            response.status_code, headers=list(response.headers.items()), request=request
        )
    error.__cause__ = _http.HTTPStatusError(
        f"HTTP {response.status_code}", request=request, response=cause
    )
    return error


def _event_error(event: Any, call: Call) -> BackendResponseError | None:
    if isinstance(event, dict) and event.get("error"):
        error = BackendResponseError(
            f"error event in the response: {server_message(event['error'])}",
            backend=call.backend,
        )
        scrub(error, call.secret)
        return error
    return None


# -- Server-Sent Events -------------------------------------------------------------------


class SSEDecoder:
    r"""Split a byte stream into the ``data`` of its Server-Sent Events.

    Example:
        ```python
        decoder = SSEDecoder()
        decoder.feed(b'data: {"a": 1}\n\ndata: [DO')  # [b'{"a": 1}']
        decoder.feed(b"NE]\n\n")  # [b"[DONE]"]
        ```

    Args:
        max_event_bytes: Largest event; a longer one raises ``ValueError``.

    """

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._max = max_event_bytes

    def feed(self, part: bytes) -> list[bytes]:
        """Add bytes; return the data of every event they complete."""
        buffer = self._buffer + part
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[bytes] = []
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            data = _event_data(buffer[:end])
            buffer = buffer[end + 2 :]
            if data is not None:
                out.append(data)
        if len(buffer) > self._max:
            raise ValueError(f"a Server-Sent Event is larger than {self._max} bytes")
        self._buffer = buffer
        return out

    def flush(self) -> list[bytes]:
        """Return the data of a last event the stream did not end with a blank line."""
        buffer, self._buffer = self._buffer, b""
        data = _event_data(buffer) if buffer.strip() else None
        return [] if data is None else [data]


def _event_data(event: bytes) -> bytes | None:
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None  # a comment, or only event/id/retry fields
    return b"\n".join(line[6:] if line[5:6] == b" " else line[5:] for line in lines)


class _Events:
    """What a stream's events have been so far (shared by the sync and async readers)."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.decoder = SSEDecoder()
        self.size = 0
        self.done = False

    def feed(self, part: bytes) -> list[Any]:
        self.size += len(part)
        if self.size > self.call.max_bytes:
            raise _too_large(self.call)
        return self._parse(self.decoder.feed(part))

    def flush(self) -> list[Any]:
        return self._parse(self.decoder.flush())

    def _parse(self, datas: list[bytes]) -> list[Any]:
        events = []
        for data in datas:
            if self.done or data == b"[DONE]":
                # read on after [DONE] so the keep-alive connection goes back to the pool
                self.done = True
                continue
            event = _json(data, self.call)
            error = _event_error(event, self.call)
            if error is not None:
                raise error
            events.append(event)
        return events


# -- async --------------------------------------------------------------------------------

if sys.version_info >= (3, 11):

    def _until(when: float | None) -> AbstractAsyncContextManager[Any]:
        return asyncio.timeout_at(when)

else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _until(when: float | None) -> AsyncIterator[None]:
        import anyio

        if when is None:
            yield
        else:
            with anyio.fail_after(max(0.0, when - asyncio.get_running_loop().time())):
                yield


def _deadline(call: Call) -> float | None:
    if call.timeout_s is None:
        return None
    return asyncio.get_running_loop().time() + call.timeout_s


async def _aread(response: _Answer, call: Call) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        size += len(part)
        if size > call.max_bytes:
            raise _too_large(call)
        parts.append(part)
    return b"".join(parts)


class _Answer(Protocol):
    """What the async path reads of an answer.

    An ``httpx2.Response``, or the lean :class:`tiered_router._aiohttp.Exchange`.
    """

    @property
    def status_code(self) -> int: ...  # pragma: no cover - a protocol

    @property
    def headers(self) -> Mapping[str, str]: ...  # pragma: no cover - a protocol

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...  # pragma: no cover - a protocol

    async def aclose(self) -> None: ...  # pragma: no cover - a protocol


async def _send(via: Sender, call: Call) -> _Answer:
    """Send on a client, or straight on the backend's own transport (when no proxy).

    aiohttp's transport is sent on without building httpx2 request and response objects.
    """
    from tiered_router import _http

    if isinstance(via, _http.AsyncClient):
        return await via.send(call.request(), stream=True)
    if isinstance(via, _http.AsyncBaseTransport):
        request = call.request()
        response = await via.handle_async_request(request)
        response.request = request
        return response
    return await via.exchange(call.url, call.headers, call.body, call.timeout_s)


async def acall(client: Sender, call: Call) -> Any:
    """Send a JSON call and return the parsed answer; the whole exchange within the deadline.

    Raises:
        BackendError: The most specific subclass for what went wrong.

    """
    try:
        async with _until(_deadline(call)):
            response = await _send(client, call)
            try:
                data = await _aread(response, call)
            finally:
                await response.aclose()
    except BackendError:
        raise
    except _caught() as exc:
        raise _fail(exc, call) from exc
    if response.status_code >= 400:
        raise _status_fail(response, data, call)
    return _json(data, call)


async def aevents(client: Sender, call: Call) -> AsyncGenerator[Any, None]:
    """Send a streaming call; yield each parsed event (``[DONE]`` ends it).

    Every read is bounded by what is left of the deadline, so the whole stream is.

    Raises:
        BackendError: From the iterator, for what went wrong.

    """
    deadline = _deadline(call)
    state = _Events(call)
    try:
        async with _until(deadline):
            response = await _send(client, call)
    except _caught() as exc:
        raise _fail(exc, call) from exc
    try:
        if response.status_code >= 400:
            async with _until(deadline):
                data = await _aread(response, call)
            raise _status_fail(response, data, call)
        parts = response.aiter_bytes().__aiter__()
        while True:
            async with _until(deadline):
                part = await anext(parts, None)
            if part is None:
                break
            for event in state.feed(part):
                yield event
        for event in state.flush():
            yield event
    except BackendError:
        raise
    except _caught() as exc:
        raise _fail(exc, call) from exc
    finally:
        await response.aclose()


# -- sync ---------------------------------------------------------------------------------


def _read(response: _http.Response, call: Call, deadline: float | None) -> bytes:
    parts: list[bytes] = []
    size = 0
    for part in response.iter_bytes():
        size += len(part)
        if size > call.max_bytes:
            raise _too_large(call)
        parts.append(part)
        _check(deadline, call)
    return b"".join(parts)


def _check(deadline: float | None, call: Call) -> None:
    # the sync client bounds each read by the timeout; this bounds their sum
    if deadline is not None and time.monotonic() > deadline:
        raise BackendTimeout("the response took longer than the deadline", backend=call.backend)


def _sync_deadline(call: Call) -> float | None:
    return None if call.timeout_s is None else time.monotonic() + call.timeout_s


def call(client: _http.Client, call: Call) -> Any:
    """Sync twin of :func:`acall` (the deadline is checked after every read)."""
    from tiered_router import _http

    deadline = _sync_deadline(call)
    try:
        with client.stream(
            "POST",
            call.url,
            headers=list(call.headers),
            content=call.body,
            extensions={"timeout": _http.call_timeout(call.timeout_s)},
        ) as response:
            data = _read(response, call, deadline)
    except BackendError:
        raise
    except _caught() as exc:
        raise _fail(exc, call) from exc
    if response.status_code >= 400:
        raise _status_fail(response, data, call)
    return _json(data, call)


def events(client: _http.Client, call: Call) -> Generator[Any, None, None]:
    """Sync twin of :func:`aevents`."""
    from tiered_router import _http

    deadline = _sync_deadline(call)
    state = _Events(call)
    try:
        with client.stream(
            "POST",
            call.url,
            headers=list(call.headers),
            content=call.body,
            extensions={"timeout": _http.call_timeout(call.timeout_s)},
        ) as response:
            if response.status_code >= 400:
                data = _read(response, call, deadline)
                raise _status_fail(response, data, call)
            for part in response.iter_bytes():
                _check(deadline, call)
                yield from state.feed(part)
            yield from state.flush()
    except BackendError:
        raise
    except _caught() as exc:
        raise _fail(exc, call) from exc
