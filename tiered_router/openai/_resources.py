"""The drop-in clients' ``chat.completions``, ``chat``, ``beta`` and ``models`` resources.

``client.chat.completions.create`` / ``.parse`` route the call through the client's
:class:`~tiered_router.router.Router`; whatever the router does not route is passed through
to the frontier backend's own openai client. :mod:`tiered_router.openai` builds the clients
around these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tiered_router.exceptions import TieredRouterError
from tiered_router.openai._streams import AsyncTieredStream, TieredStream
from tiered_router.openai._wire import (
    RequestOptions,
    UnknownModel,
    completion_body,
    model_ids,
    resolve_model,
    result_route,
)
from tiered_router.router import RoutedResult, Router

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from tiered_router._types import Tier
    from tiered_router.turn import Turn


class _Owner(Protocol):
    """What the resources need of the client that owns them (``openai._client._Base``)."""

    router: Router
    last_result: RoutedResult | None
    _options: dict[str, Any]

    @property
    def chat(self) -> Chat: ...

    def _prepare(self, kwargs: Mapping[str, Any]) -> tuple[Turn, RequestOptions]: ...

    def _passthrough(self) -> Any: ...


__all__ = [
    "AsyncCompletions",
    "Beta",
    "Chat",
    "Completions",
    "Models",
    "chat_completion",
    "translated",
]


def chat_completion(result: RoutedResult, turn: Turn) -> ChatCompletion:
    from openai.types.chat import ChatCompletion

    body = completion_body(
        result.completion,
        completion_id=f"chatcmpl-tr-{turn.id}",
        model=result.trace.backend or "",
        route=result_route(result, with_trace=True),
    )
    return ChatCompletion.model_validate(body)


def translated(exc: BaseException) -> BaseException:
    from tiered_router.openai._compat import translate_error

    return translate_error(exc)


class CompletionsBase:
    """What the sync and async ``chat.completions`` share: pass-through and arguments."""

    def __init__(self, owner: _Owner, inner: Any = None) -> None:
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


class Completions(CompletionsBase):
    """``client.chat.completions`` of the sync client."""

    @property
    def with_raw_response(self) -> Any:
        """``create`` / ``parse`` returning a raw response (``.headers``, ``.parse()``)."""
        from tiered_router.openai._compat import RawCompletions

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
                raise translated(exc) from exc
            return self._inner.create(**kwargs)  # type: ignore[no-any-return]
        except (TieredRouterError, ValueError) as exc:
            raise translated(exc) from exc
        owner = self._owner
        router = owner.router
        try:
            if options.stream:
                stream = router.stream(turn, tier=tier, deadline_s=options.deadline_s)
                stream.start()
                return TieredStream(stream, turn, options, owner)
            result = router.complete(turn, tier=tier, deadline_s=options.deadline_s)
        except TieredRouterError as exc:
            raise translated(exc) from exc
        owner.last_result = result
        return chat_completion(result, turn)

    def parse(self, **kwargs: Any) -> Any:
        """Route one chat completion and parse it; same arguments as ``openai``'s ``parse``.

        ``response_format`` may be a pydantic class (sent as its strict JSON schema, against
        which the gate checks fast drafts); ``message.parsed`` holds the parsed object, and
        tools made with ``openai.pydantic_function_tool`` get ``parsed_arguments``.
        """
        from tiered_router.openai._compat import parse_arguments, parsed_completion

        create_kwargs, response_format, tools = parse_arguments(kwargs)
        if self._inner is not None:
            try:
                self._resolve(self._args(create_kwargs))
            except UnknownModel:
                return self._inner.parse(**kwargs)
            except (TieredRouterError, ValueError):
                pass  # create() raises it translated
        completion = self.create(**create_kwargs)
        return parsed_completion(
            completion,  # type: ignore[arg-type]
            response_format,
            tools,
            result=self._owner.last_result,
        )


class AsyncCompletions(CompletionsBase):
    """``client.chat.completions`` of the async client."""

    @property
    def with_raw_response(self) -> Any:
        """``create`` / ``parse`` returning a raw response (``.headers``, ``.parse()``)."""
        from tiered_router.openai._compat import AsyncRawCompletions

        return AsyncRawCompletions(self)

    async def create(self, **kwargs: Any) -> ChatCompletion | AsyncTieredStream:
        """Route one chat completion; same arguments and errors as the sync ``create``."""
        kwargs = self._args(kwargs)
        try:
            turn, options, tier = self._resolve(kwargs)
        except UnknownModel as exc:
            if self._inner is None:
                raise translated(exc) from exc
            return await self._inner.create(**kwargs)  # type: ignore[no-any-return]
        except (TieredRouterError, ValueError) as exc:
            raise translated(exc) from exc
        owner = self._owner
        router = owner.router
        try:
            if options.stream:
                stream = router.astream(turn, tier=tier, deadline_s=options.deadline_s)
                await stream.start()
                return AsyncTieredStream(stream, turn, options, owner)
            result = await router.acomplete(turn, tier=tier, deadline_s=options.deadline_s)
        except TieredRouterError as exc:
            raise translated(exc) from exc
        owner.last_result = result
        return chat_completion(result, turn)

    async def parse(self, **kwargs: Any) -> Any:
        """Route and parse one chat completion; see the sync ``parse``."""
        from tiered_router.openai._compat import parse_arguments, parsed_completion

        create_kwargs, response_format, tools = parse_arguments(kwargs)
        if self._inner is not None:
            try:
                self._resolve(self._args(create_kwargs))
            except UnknownModel:
                return await self._inner.parse(**kwargs)
            except (TieredRouterError, ValueError):
                pass
        completion = await self.create(**create_kwargs)
        return parsed_completion(
            completion,  # type: ignore[arg-type]
            response_format,
            tools,
            result=self._owner.last_result,
        )


class Chat:
    def __init__(self, owner: _Owner, completions: Any, inner: Any = None) -> None:
        self._owner = owner
        self.completions = completions
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._inner is not None:
            return getattr(self._inner, name)
        return getattr(self._owner._passthrough().chat, name)


class Beta:
    """``client.beta``: ``beta.chat.completions.parse`` routes, the rest passes through."""

    def __init__(self, owner: _Owner) -> None:
        self._owner = owner
        self.chat = owner.chat

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._owner._passthrough().beta, name)


class Models:
    """``client.models``: ``list()`` names what the router serves; the rest passes through."""

    def __init__(self, owner: _Owner, *, asynchronous: bool) -> None:
        self._owner = owner
        self._async = asynchronous

    def list(self, **kwargs: Any) -> Any:
        """Return ``auto``, the tiers, their backends and their models, as openai's page."""
        from tiered_router.openai._compat import AsyncModelList, model_page

        ids = model_ids(self._owner.router.policy)
        return AsyncModelList(ids) if self._async else model_page(ids)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._owner._passthrough().models, name)
