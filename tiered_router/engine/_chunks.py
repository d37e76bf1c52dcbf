"""One try of a streamed call: a backend's draft read whole, or opened up to its content.

The routed streams (:mod:`tiered_router.engine._streaming`) call a tier through the
dispatcher with one of these: :func:`acollect` reads a whole draft as chunks (a draft the
gate must see whole before the caller does), :func:`aopen_stream` reads up to the first chunk
with content and hands back the rest of the stream (a draft streamed straight through).
A backend that cannot stream answers whole, as chunks. Each has its sync twin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from tiered_router.engine._dispatch import unexpected_error
from tiered_router.exceptions import BackendError
from tiered_router.turn import Completion, CompletionChunk, ToolCallDelta, assemble

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend, CompletionRequest

__all__ = [
    "aclose_stream",
    "acollect",
    "aopen_stream",
    "as_chunks",
    "close_stream",
    "collect",
    "open_stream",
    "typed_error",
]


def typed_error(exc: Exception, backend: Backend) -> BackendError:
    if isinstance(exc, BackendError):
        return exc
    typed = unexpected_error(exc, backend.name)
    typed.__cause__ = exc
    return typed


def has_content(chunk: CompletionChunk) -> bool:
    return bool(chunk.text or chunk.tool_calls)


def as_chunks(completion: Completion) -> list[CompletionChunk]:
    """Chunks for a backend that cannot stream: the whole completion at once."""
    calls = tuple(
        ToolCallDelta(index=i, id=c.id, name=c.name, arguments=c.arguments)
        for i, c in enumerate(completion.tool_calls)
    )
    return [
        CompletionChunk(
            text=completion.text,
            tool_calls=calls,
            model=completion.model,
            reasoning=completion.reasoning,
        ),
        CompletionChunk(
            finish_reason=completion.finish_reason, usage=completion.usage, model=completion.model
        ),
    ]


async def acollect(
    backend: Backend, request: CompletionRequest
) -> tuple[Completion, list[CompletionChunk]]:
    """One try: read a whole draft as chunks."""
    astream = getattr(backend, "astream", None)
    if astream is None:
        completion = await backend.acomplete(request)
        return completion, as_chunks(completion)
    chunks = [chunk async for chunk in astream(request)]
    return assemble(chunks, backend=backend.name), chunks


def collect(
    backend: Backend, request: CompletionRequest
) -> tuple[Completion, list[CompletionChunk]]:
    """Sync twin of :func:`acollect`."""
    stream = getattr(backend, "stream", None)
    if stream is None:
        completion = backend.complete(request)
        return completion, as_chunks(completion)
    chunks = [chunk for chunk in stream(request)]  # as its async twin reads
    return assemble(chunks, backend=backend.name), chunks


async def aopen_stream(
    backend: Backend, request: CompletionRequest
) -> tuple[list[CompletionChunk], AsyncIterator[CompletionChunk] | None]:
    """One try: open a stream and read up to the first chunk with content.

    Returns the chunks read and the rest of the stream (``None`` when it ended).
    """
    astream = getattr(backend, "astream", None)
    if astream is None:
        return as_chunks(await backend.acomplete(request)), None
    rest: AsyncIterator[CompletionChunk] = aiter(astream(request))
    held: list[CompletionChunk] = []
    try:
        async for chunk in rest:
            held.append(chunk)
            if has_content(chunk):
                return held, rest
    except BaseException:
        await aclose_stream(rest)
        raise
    return held, None


def open_stream(
    backend: Backend, request: CompletionRequest
) -> tuple[list[CompletionChunk], Iterator[CompletionChunk] | None]:
    """Sync twin of :func:`aopen_stream`."""
    stream = getattr(backend, "stream", None)
    if stream is None:
        return as_chunks(backend.complete(request)), None
    rest: Iterator[CompletionChunk] = iter(stream(request))
    held: list[CompletionChunk] = []
    try:
        for chunk in rest:
            held.append(chunk)
            if has_content(chunk):
                return held, rest
    except BaseException:
        close_stream(rest)
        raise
    return held, None


async def aclose_stream(it: object) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()


def close_stream(it: object) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()
