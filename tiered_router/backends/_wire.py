"""The one request path to an OpenAI-compatible endpoint: JSON over HTTP (httpx2's API).

:class:`~tiered_router.backends.openai_compat.OpenAICompatBackend` builds a request body
(model, messages, the dialect applied) and hands it here as a :class:`Call`. This
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

Server-Sent Events are split by :class:`~tiered_router.backends._sse.SSEDecoder`, the
package's one SSE parser; errors are translated by :mod:`tiered_router.backends._errors`.
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
from tiered_router.backends._errors import caught, clip, scrub, status_error, translate
from tiered_router.backends._openai_convert import server_message
from tiered_router.backends._sse import SSEDecoder
from tiered_router.exceptions import (
    BackendError,
    BackendResponseError,
    BackendTimeout,
)

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from tiered_router import _http
    from tiered_router._http._direct import DirectTransport

    Sender = _http.AsyncClient | DirectTransport
    """What async calls are sent on: the backend's own pool, or a client it was given."""

__all__ = [
    "MAX_RESPONSE_BYTES",
    "Call",
    "acall",
    "body_of",
    "aevents",
    "call",
    "events",
]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Largest upstream answer read (a whole JSON body, or the sum of a stream's events)."""


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
            f"unreadable response body: expected JSON, got text: {clip(snippet)!r}",
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
        # header values as bytes: a server may send any latin-1 (httpx2 encodes str as ASCII)
        raw = [
            (k.encode("latin-1"), v.encode("latin-1", "replace"))
            for k, v in response.headers.items()
        ]
        cause = _http.Response(response.status_code, headers=raw, request=request)
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


def _is_json(response: _Answer | _http.Response) -> bool:
    kind = str(response.headers.get("content-type", "")).split(";")[0].strip().lower()
    return kind == "application/json"


def _whole(data: bytes, call: Call) -> Any:
    """A JSON answer to a stream request, as the one event of the stream."""
    event = _json(data, call)
    error = _event_error(event, call)
    if error is not None:
        raise error
    return event


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

    The lean :class:`tiered_router._http._direct.Exchange` (or aiohttp's, for a call through a
    proxy), or an ``httpx2.Response`` from
    a client the backend was given.
    """

    @property
    def status_code(self) -> int: ...  # pragma: no cover - a protocol

    @property
    def headers(self) -> Mapping[str, str]: ...  # pragma: no cover - a protocol

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...  # pragma: no cover - a protocol

    async def aclose(self) -> None: ...  # pragma: no cover - a protocol


async def _send(via: Sender, call: Call, deadline: float | None = None) -> _Answer:
    """Send on the backend's own transport, or on a client it was given.

    The transport is sent on without building httpx2 request and response objects. A
    ``deadline`` goes to a transport that :func:`_holds_deadline` only.
    """
    from tiered_router import _http

    if isinstance(via, _http.AsyncClient):
        return await via.send(call.request(), stream=True)
    if deadline is not None:
        return await via.exchange(
            call.url, call.headers, call.body, call.timeout_s, deadline=deadline
        )
    return await via.exchange(call.url, call.headers, call.body, call.timeout_s)


def _holds_deadline(via: Sender, call: Call) -> bool:
    """Whether ``via`` ends every wait of ``call`` by its deadline (our own connections)."""
    owns = getattr(via, "owns", None)
    return owns is not None and bool(owns(call.url))


async def _exchange(via: Sender, call: Call, deadline: float | None) -> tuple[_Answer, bytes]:
    response = await _send(via, call, deadline)
    try:
        return response, await _aread(response, call)
    finally:
        await response.aclose()


async def acall(client: Sender, call: Call) -> Any:
    """Send a JSON call and return the parsed answer; the whole exchange within the deadline.

    On our own connections every wait ends by the deadline; on another transport a timer
    (``asyncio.timeout_at``) bounds the exchange: one timer per call costs about 4 µs.

    Raises:
        BackendError: The most specific subclass for what went wrong.

    """
    deadline = _deadline(call)
    try:
        if deadline is not None and _holds_deadline(client, call):
            response, data = await _exchange(client, call, deadline)
        else:
            async with _until(deadline):
                response, data = await _exchange(client, call, None)
    except BackendError:
        raise
    except caught() as exc:
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
    except caught() as exc:
        raise _fail(exc, call) from exc
    try:
        if response.status_code >= 400:
            async with _until(deadline):
                data = await _aread(response, call)
            raise _status_fail(response, data, call)
        if _is_json(response):
            # a server that answers JSON to a stream request (ollada): one whole event
            async with _until(deadline):
                data = await _aread(response, call)
            yield _whole(data, call)
            return
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
    except caught() as exc:
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
    except caught() as exc:
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
            if _is_json(response):
                yield _whole(_read(response, call, deadline), call)
                return
            for part in response.iter_bytes():
                _check(deadline, call)
                yield from state.feed(part)
            yield from state.flush()
    except BackendError:
        raise
    except caught() as exc:
        raise _fail(exc, call) from exc
