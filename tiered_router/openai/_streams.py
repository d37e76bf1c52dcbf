"""The drop-in clients' stream objects: routed chunks as openai ``ChatCompletionChunk``s."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router.exceptions import TieredRouterError
from tiered_router.openai._wire import ChunkRenderer, RequestOptions, result_route, stream_route

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk

    from tiered_router.engine._machine import RoutedResult
    from tiered_router.engine._streaming import AsyncRoutedStream, RoutedStream
    from tiered_router.turn import Turn

__all__ = ["AsyncTieredStream", "TieredStream"]


def _translated(exc: BaseException) -> BaseException:
    from tiered_router.openai._compat import translate_error

    return translate_error(exc)


def _chunk_types() -> type[ChatCompletionChunk]:
    from openai.types.chat import ChatCompletionChunk

    return ChatCompletionChunk


class TieredStream:
    """A routed stream of ``ChatCompletionChunk`` objects (sync).

    Attributes:
        tiered_router: The routing decision, known before the first chunk (tier, score...).

    """

    def __init__(self, stream: RoutedStream, turn: Turn, options: RequestOptions, owner: Any):
        self._stream = stream
        self._iter = iter(stream)
        self._owner = owner
        self.tiered_router = stream_route(stream, owner.router.policy)
        self._renderer = ChunkRenderer(
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=self.tiered_router["backend"] or "",
            include_usage=options.include_usage,
        )
        self._gen = self._chunks()

    def _chunks(self) -> Generator[ChatCompletionChunk, None, None]:
        cls = _chunk_types()
        for chunk in self._iter:
            for obj in self._renderer.render(chunk):
                yield cls.model_validate(obj)
        result = self._stream.result
        self._owner.last_result = result
        for obj in self._renderer.finish(result_route(result, with_trace=True)):
            yield cls.model_validate(obj)

    @property
    def result(self) -> RoutedResult:
        """The routed result, once the stream has been read to its end."""
        return self._stream.result

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self

    def __next__(self) -> ChatCompletionChunk:
        try:
            return next(self._gen)
        except TieredRouterError as exc:
            raise _translated(exc) from exc

    def close(self) -> None:
        """Stop reading; the upstream stream is closed."""
        self._gen.close()
        close = getattr(self._iter, "close", None)
        if close is not None:
            close()
        self._stream.close()

    def __enter__(self) -> TieredStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTieredStream:
    """A routed stream of ``ChatCompletionChunk`` objects (async); see :class:`TieredStream`."""

    def __init__(
        self, stream: AsyncRoutedStream, turn: Turn, options: RequestOptions, owner: Any
    ) -> None:
        self._stream = stream
        self._iter = stream.__aiter__()
        self._owner = owner
        self.tiered_router = stream_route(stream, owner.router.policy)
        self._renderer = ChunkRenderer(
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=self.tiered_router["backend"] or "",
            include_usage=options.include_usage,
        )
        self._gen = self._chunks()

    async def _chunks(self) -> AsyncGenerator[ChatCompletionChunk, None]:
        cls = _chunk_types()
        async for chunk in self._iter:
            for obj in self._renderer.render(chunk):
                yield cls.model_validate(obj)
        result = self._stream.result
        self._owner.last_result = result
        for obj in self._renderer.finish(result_route(result, with_trace=True)):
            yield cls.model_validate(obj)

    @property
    def result(self) -> RoutedResult:
        """The routed result, once the stream has been read to its end."""
        return self._stream.result

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        try:
            return await self._gen.__anext__()
        except TieredRouterError as exc:
            raise _translated(exc) from exc

    async def close(self) -> None:
        """Stop reading; the upstream stream is closed."""
        await self._gen.aclose()
        aclose = getattr(self._iter, "aclose", None)
        if aclose is not None:
            await aclose()
        await self._stream.aclose()

    async def __aenter__(self) -> AsyncTieredStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
