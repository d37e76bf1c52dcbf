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

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router._openai_streams import AsyncTieredStream, TieredStream
from tiered_router._openai_wire import (
    RequestOptions,
    UnknownModel,
    completion_body,
    model_ids,
    parse_request,
    resolve_model,
    result_route,
)
from tiered_router.exceptions import TieredRouterError
from tiered_router.router import RoutedResult, Router

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from tiered_router._types import PolicySource, Tier
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


class _Base:
    """What both clients share: the router, the side channel, the pinning."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.last_result: RoutedResult | None = None
        """The last finished :class:`RoutedResult` (with a concurrent client, read
        ``response.tiered_router`` instead: this holds whichever call finished last)."""

        self._options: dict[str, Any] = {}
        self._pt: Any = None
        self._opened: list[Any] = []  # pass-through clients of this client and its copies
        self._asynchronous = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.router!r})"

    def _prepare(self, kwargs: Mapping[str, Any]) -> tuple[Turn, RequestOptions]:
        return parse_request(kwargs)

    def _passthrough(self) -> Any:
        """The frontier backend's own openai client, for what the router does not route."""
        if self._pt is None:
            from tiered_router._dropin import passthrough_client

            try:
                client = passthrough_client(self.router, asynchronous=self._asynchronous)
            except TieredRouterError as exc:
                raise _translated(exc) from exc
            self._pt = client.with_options(**self._options) if self._options else client
            self._opened.append(self._pt)
        return self._pt

    def __getattr__(self, name: str) -> Any:
        # embeddings, responses, files, audio, images, ...: the frontier backend's client
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._passthrough(), name)

    def with_options(self, **options: Any) -> Any:
        """Return a copy with openai client options (``timeout``, ``max_retries``...).

        ``timeout`` becomes the deadline of routed turns (the router owns retries, so
        ``max_retries`` applies only to resources passed through); every option applies
        to resources passed through to the frontier backend.
        """
        import copy

        clone = copy.copy(self)
        clone._options = {**self._options, **options}
        clone._pt = None
        clone._rebind()
        return clone

    def _rebind(self) -> None:
        """Point the resource objects of a copy at the copy."""


def _translated(exc: BaseException) -> BaseException:
    from tiered_router._dropin import translate_error

    return translate_error(exc)


class _CompletionsBase:
    """What the sync and async ``chat.completions`` share: pass-through and arguments."""

    def __init__(self, owner: _Base, inner: Any = None) -> None:
        self._owner = owner
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._inner is not None:
            return getattr(self._inner, name)
        return getattr(self._owner._passthrough().chat.completions, name)

    def _args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        timeout = self._owner._options.get("timeout")
        if timeout is not None and "timeout" not in kwargs:
            return {**kwargs, "timeout": timeout}
        return kwargs

    def _resolve(self, kwargs: Mapping[str, Any]) -> tuple[Turn, RequestOptions, Tier | None]:
        """Parse and resolve the model; raises UnknownModel for the wrapped client to take."""
        turn, options = self._owner._prepare(kwargs)
        return turn, options, resolve_model(self._owner.router.policy, options.model)


class _Completions(_CompletionsBase):
    """``client.chat.completions`` of the sync client."""

    @property
    def with_raw_response(self) -> Any:
        """``create`` / ``parse`` returning a raw response (``.headers``, ``.parse()``)."""
        from tiered_router._dropin import RawCompletions

        return RawCompletions(self)

    def create(self, **kwargs: Any) -> ChatCompletion | TieredStream:
        """Route one chat completion; same arguments as ``openai``'s ``create``.

        Raises:
            openai.NotFoundError: An unknown model (without a wrapped client).
            openai.BadRequestError: Malformed arguments.
            openai.APIError: No tier produced a completion (``AllTiersFailed``, as the
                subclass matching the last failure: ``RateLimitError``,
                ``APITimeoutError``...), or the last draft failed the gate and the policy
                says ``raise`` (``GateFailed``). Each is also our own class, with the trace.

        """
        kwargs = self._args(kwargs)
        try:
            turn, options, tier = self._resolve(kwargs)
        except UnknownModel as exc:
            if self._inner is None:
                raise _translated(exc) from exc
            return self._inner.create(**kwargs)  # type: ignore[no-any-return]
        except (TieredRouterError, ValueError) as exc:
            raise _translated(exc) from exc
        owner = self._owner
        router = owner.router
        try:
            if options.stream:
                stream = router.stream(turn, tier=tier, deadline_s=options.deadline_s)
                stream.start()
                return TieredStream(stream, turn, options, owner)
            result = router.complete(turn, tier=tier, deadline_s=options.deadline_s)
        except TieredRouterError as exc:
            raise _translated(exc) from exc
        owner.last_result = result
        return _chat_completion(result, turn)

    def parse(self, **kwargs: Any) -> Any:
        """Route one chat completion and parse it; same arguments as ``openai``'s ``parse``.

        ``response_format`` may be a pydantic class (sent as its strict JSON schema, against
        which the gate checks fast drafts); ``message.parsed`` holds the parsed object, and
        tools made with ``openai.pydantic_function_tool`` get ``parsed_arguments``.
        """
        from tiered_router._dropin import parse_arguments, parsed_completion

        create_kwargs, response_format, tools = parse_arguments(kwargs)
        if self._inner is not None:
            try:
                self._resolve(self._args(create_kwargs))
            except UnknownModel:
                return self._inner.parse(**kwargs)
            except (TieredRouterError, ValueError):
                pass  # create() raises it translated
        completion = self.create(**create_kwargs)
        return parsed_completion(completion, response_format, tools)  # type: ignore[arg-type]


class _AsyncCompletions(_CompletionsBase):
    """``client.chat.completions`` of the async client."""

    @property
    def with_raw_response(self) -> Any:
        """``create`` / ``parse`` returning a raw response (``.headers``, ``.parse()``)."""
        from tiered_router._dropin import AsyncRawCompletions

        return AsyncRawCompletions(self)

    async def create(self, **kwargs: Any) -> ChatCompletion | AsyncTieredStream:
        """Route one chat completion; same arguments and errors as the sync ``create``."""
        kwargs = self._args(kwargs)
        try:
            turn, options, tier = self._resolve(kwargs)
        except UnknownModel as exc:
            if self._inner is None:
                raise _translated(exc) from exc
            return await self._inner.create(**kwargs)  # type: ignore[no-any-return]
        except (TieredRouterError, ValueError) as exc:
            raise _translated(exc) from exc
        owner = self._owner
        router = owner.router
        try:
            if options.stream:
                stream = router.astream(turn, tier=tier, deadline_s=options.deadline_s)
                await stream.start()
                return AsyncTieredStream(stream, turn, options, owner)
            result = await router.acomplete(turn, tier=tier, deadline_s=options.deadline_s)
        except TieredRouterError as exc:
            raise _translated(exc) from exc
        owner.last_result = result
        return _chat_completion(result, turn)

    async def parse(self, **kwargs: Any) -> Any:
        """Route and parse one chat completion; see the sync ``parse``."""
        from tiered_router._dropin import parse_arguments, parsed_completion

        create_kwargs, response_format, tools = parse_arguments(kwargs)
        if self._inner is not None:
            try:
                self._resolve(self._args(create_kwargs))
            except UnknownModel:
                return await self._inner.parse(**kwargs)
            except (TieredRouterError, ValueError):
                pass
        completion = await self.create(**create_kwargs)
        return parsed_completion(completion, response_format, tools)  # type: ignore[arg-type]


class _Chat:
    def __init__(self, owner: _Base, completions: Any, inner: Any = None) -> None:
        self._owner = owner
        self.completions = completions
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._inner is not None:
            return getattr(self._inner, name)
        return getattr(self._owner._passthrough().chat, name)


class _Beta:
    """``client.beta``: ``beta.chat.completions.parse`` routes, the rest passes through."""

    def __init__(self, owner: _Base) -> None:
        self._owner = owner
        self.chat = owner.chat

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._owner._passthrough().beta, name)


class _Models:
    """``client.models``: ``list()`` names what the router serves; the rest passes through."""

    def __init__(self, owner: _Base, *, asynchronous: bool) -> None:
        self._owner = owner
        self._async = asynchronous

    def list(self, **kwargs: Any) -> Any:
        """Return ``auto``, the tiers, their backends and their models, as openai's page."""
        from tiered_router._dropin import AsyncModelList, model_page

        ids = model_ids(self._owner.router.policy)
        return AsyncModelList(ids) if self._async else model_page(ids)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._owner._passthrough().models, name)


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
        self._rebind()

    def _rebind(self) -> None:
        self.chat = _Chat(self, _Completions(self))
        self.models = _Models(self, asynchronous=False)
        self.beta = _Beta(self)

    def close(self) -> None:
        """Close the HTTP clients of the backends the router built (and of pass-through)."""
        self.router.close()
        while self._opened:
            self._opened.pop().close()
        self._pt = None

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
        self._asynchronous = True
        self._rebind()

    def _rebind(self) -> None:
        self.chat = _Chat(self, _AsyncCompletions(self))
        self.models = _Models(self, asynchronous=True)
        self.beta = _Beta(self)

    async def close(self) -> None:
        """Close the HTTP clients of the backends the router built (and of pass-through)."""
        await self.router.aclose()
        while self._opened:
            await self._opened.pop().close()
        self._pt = None

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
        self._completions_cls = completions
        self._rebind()

    def _rebind(self) -> None:
        client = self._client
        self.chat = _Chat(self, self._completions_cls(self, client.chat.completions), client.chat)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._client, name)

    def with_options(self, **options: Any) -> Any:
        """Return a copy whose wrapped client has these options (``timeout`` is the deadline)."""
        clone: _Wrapped = super().with_options(**options)
        clone._client = self._client.with_options(**options)
        clone._rebind()
        return clone

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
