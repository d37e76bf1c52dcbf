"""Drop-in OpenAI clients that route every chat completion through a :class:`Router`.

Change one import and keep the rest of the code:

```python
from tiered_router.openai import TieredOpenAI

client = TieredOpenAI(policy="policy.yaml")
resp = client.chat.completions.create(
    model="auto",                                   # or "fast" / "frontier" / a backend name
    messages=[{"role": "user", "content": "hi"}],
    extra_body={"tiered_router": {"final": True, "step": 3}},
)
resp.choices[0].message.content                     # a real openai ChatCompletion
resp.tiered_router["tier"], resp.tiered_router["escalated"]   # the routing decision
client.last_result.trace                            # the whole RoutedResult, side channel
```

``model="auto"`` lets the router decide. A tier name, the name of the backend serving a
tier, or that backend's configured ``model`` pins the turn to that tier: the router skips
scoring-based choice but still gates the draft and escalates by the policy (a pinned fast
draft that fails the gate goes to the frontier tier, and says so). Any other model raises
:class:`~tiered_router.exceptions.UnknownModel` (a ``ValueError``), except under
:func:`wrap_openai`, which hands such calls to the wrapped client unchanged.

Streams (``stream=True``) yield ``ChatCompletionChunk`` objects; a failure before the first
chunk raises from ``create`` (like the SDK), one after it raises from the iterator
(:class:`~tiered_router.StreamInterrupted`), never silently. The last chunk carries the
``tiered_router`` object with the trace.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router._openai_wire import (
    ChunkRenderer,
    RequestOptions,
    UnknownModel,
    completion_body,
    parse_request,
    resolve_model,
    result_route,
    stream_route,
)
from tiered_router.router import RoutedResult, Router

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from tiered_router._streaming import AsyncRoutedStream, RoutedStream
    from tiered_router._types import PolicySource
    from tiered_router.backends._base import Backend
    from tiered_router.policy import Policy
    from tiered_router.trace import TraceSink
    from tiered_router.turn import Turn

__all__ = [
    "AsyncTieredOpenAI",
    "AsyncTieredStream",
    "TieredOpenAI",
    "TieredStream",
    "UnknownModel",
    "wrap_openai",
]


def _router(
    policy: Policy | PolicySource | Router,
    sinks: Sequence[TraceSink],
    backends: Mapping[str, Backend] | None,
) -> Router:
    if isinstance(policy, Router):
        if sinks or backends:
            raise ValueError("pass sinks and backends to the Router, not with a ready Router")
        return policy
    return Router(policy, sinks=sinks, backends=backends)


def _chat_completion(result: RoutedResult, turn: Turn) -> ChatCompletion:
    from openai.types.chat import ChatCompletion

    body = completion_body(
        result.completion,
        completion_id=f"chatcmpl-tr-{turn.id}",
        model=result.trace.backend or "",
        route=result_route(result, with_trace=True),
    )
    return ChatCompletion.model_validate(body)


def _chunk_types() -> type[ChatCompletionChunk]:
    from openai.types.chat import ChatCompletionChunk

    return ChatCompletionChunk


class _Base:
    """What both clients share: the router, the side channel, the pinning."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.last_result: RoutedResult | None = None
        """The last finished :class:`RoutedResult` (with a concurrent client, read
        ``response.tiered_router`` instead: this holds whichever call finished last)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.router!r})"

    def _prepare(self, kwargs: Mapping[str, Any]) -> tuple[Turn, RequestOptions]:
        return parse_request(kwargs)


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
        return next(self._gen)

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
        return await self._gen.__anext__()

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


class _Completions:
    """``client.chat.completions`` of the sync client."""

    def __init__(self, owner: _Base, inner: Any = None) -> None:
        self._owner = owner
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def create(self, **kwargs: Any) -> ChatCompletion | TieredStream:
        """Route one chat completion; same arguments as ``openai``'s ``create``.

        Raises:
            ValueError: Malformed arguments or an unknown model (without a wrapped client).
            AllTiersFailed: No tier produced a completion.
            GateFailed: The last draft failed the gate and the policy says ``raise``.

        """
        owner = self._owner
        router = owner.router
        turn, options = owner._prepare(kwargs)
        try:
            tier = resolve_model(router.policy, options.model)
        except UnknownModel:
            if self._inner is None:
                raise
            return self._inner.create(**kwargs)  # type: ignore[no-any-return]
        if options.stream:
            stream = router.stream(turn, tier=tier, deadline_s=options.deadline_s)
            stream.start()
            return TieredStream(stream, turn, options, owner)
        result = router.complete(turn, tier=tier, deadline_s=options.deadline_s)
        owner.last_result = result
        return _chat_completion(result, turn)


class _AsyncCompletions:
    """``client.chat.completions`` of the async client."""

    def __init__(self, owner: _Base, inner: Any = None) -> None:
        self._owner = owner
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def create(self, **kwargs: Any) -> ChatCompletion | AsyncTieredStream:
        """Route one chat completion; same arguments as ``openai``'s ``create``.

        Raises:
            ValueError: Malformed arguments or an unknown model (without a wrapped client).
            AllTiersFailed: No tier produced a completion.
            GateFailed: The last draft failed the gate and the policy says ``raise``.

        """
        owner = self._owner
        router = owner.router
        turn, options = owner._prepare(kwargs)
        try:
            tier = resolve_model(router.policy, options.model)
        except UnknownModel:
            if self._inner is None:
                raise
            return await self._inner.create(**kwargs)  # type: ignore[no-any-return]
        if options.stream:
            stream = router.astream(turn, tier=tier, deadline_s=options.deadline_s)
            await stream.start()
            return AsyncTieredStream(stream, turn, options, owner)
        result = await router.acomplete(turn, tier=tier, deadline_s=options.deadline_s)
        owner.last_result = result
        return _chat_completion(result, turn)


class _Chat:
    def __init__(self, completions: Any, inner: Any = None) -> None:
        self.completions = completions
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)


class TieredOpenAI(_Base):
    """A drop-in for ``openai.OpenAI`` whose ``chat.completions.create`` is routed.

    Example:
        ```python
        client = TieredOpenAI(policy="policy.yaml")
        resp = client.chat.completions.create(model="auto", messages=[...])
        print(resp.tiered_router["tier"], resp.choices[0].message.content)
        ```

    Args:
        policy: A policy (path, YAML text, mapping or :class:`Policy`) or a ready
            :class:`Router`.
        sinks: Trace sinks for the router it builds.
        backends: Backends by name for the router it builds (override the policy's).

    Attributes:
        router: The router.
        chat: ``chat.completions.create(...)`` as in the SDK.
        last_result: The last finished :class:`RoutedResult`.

    """

    def __init__(
        self,
        policy: Policy | PolicySource | Router,
        *,
        sinks: Sequence[TraceSink] = (),
        backends: Mapping[str, Backend] | None = None,
    ) -> None:
        super().__init__(_router(policy, sinks, backends))
        self.chat = _Chat(_Completions(self))

    def close(self) -> None:
        """Close the HTTP clients of the backends the router built."""
        self.router.close()

    def __enter__(self) -> TieredOpenAI:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTieredOpenAI(_Base):
    """A drop-in for ``openai.AsyncOpenAI``; see :class:`TieredOpenAI`.

    Example:
        ```python
        client = AsyncTieredOpenAI(policy="policy.yaml")
        resp = await client.chat.completions.create(model="auto", messages=[...])
        ```

    """

    def __init__(
        self,
        policy: Policy | PolicySource | Router,
        *,
        sinks: Sequence[TraceSink] = (),
        backends: Mapping[str, Backend] | None = None,
    ) -> None:
        super().__init__(_router(policy, sinks, backends))
        self.chat = _Chat(_AsyncCompletions(self))

    async def close(self) -> None:
        """Close the HTTP clients of the backends the router built."""
        await self.router.aclose()

    async def __aenter__(self) -> AsyncTieredOpenAI:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _Wrapped(_Base):
    """An existing client with a routed ``chat.completions.create``; the rest passes through."""

    def __init__(self, client: Any, router: Router, completions: type[Any]) -> None:
        super().__init__(router)
        self._client = client
        self.chat = _Chat(completions(self, client.chat.completions), client.chat)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def __repr__(self) -> str:
        return f"wrap_openai({type(self._client).__name__}, {self.router!r})"


def wrap_openai(
    client: Any,
    policy: Policy | PolicySource | Router,
    *,
    sinks: Sequence[TraceSink] = (),
    backends: Mapping[str, Backend] | None = None,
) -> Any:
    """Wrap an existing ``openai.OpenAI`` / ``AsyncOpenAI`` so its chat completions route.

    ``chat.completions.create(model="auto" | tier | backend, ...)`` goes through the router
    (unknown keyword arguments are passed to the backend unchanged); any other model, and
    every other attribute of the client (``embeddings``, ``models``, ...), goes to the
    wrapped client untouched.

    Example:
        ```python
        client = wrap_openai(AsyncOpenAI(), "policy.yaml")
        resp = await client.chat.completions.create(model="auto", messages=m, seed=7)
        other = await client.chat.completions.create(model="gpt-4o-mini", messages=m)
        ```

    Args:
        client: An ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a compatible object).
        policy: A policy or a ready :class:`Router`.
        sinks: Trace sinks for the router it builds.
        backends: Backends by name for the router it builds.

    Returns:
        The wrapped client (``.router`` and ``.last_result`` added).

    """
    import openai

    router = _router(policy, sinks, backends)
    completions = _AsyncCompletions if isinstance(client, openai.AsyncOpenAI) else _Completions
    return _Wrapped(client, router, completions)
