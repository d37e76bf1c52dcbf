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

import importlib.util
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router.exceptions import TieredRouterError
from tiered_router.openai._resources import (
    AsyncCompletions,
    Beta,
    Chat,
    Completions,
    Models,
    translated,
)
from tiered_router.openai._streams import AsyncTieredStream, TieredStream
from tiered_router.openai._wire import (
    RequestOptions,
    UnknownModel,
    parse_request,
)
from tiered_router.router import RoutedResult, Router

if TYPE_CHECKING:
    from tiered_router._types import PolicySource
    from tiered_router.backends._base import Backend
    from tiered_router.policy._schema import Policy
    from tiered_router.trace import TraceSink
    from tiered_router.turn import Turn

if importlib.util.find_spec("openai") is None:  # the SDK itself is imported on first use
    from tiered_router.exceptions import missing_extra

    raise ImportError(
        missing_extra("openai", "tiered_router.openai returns the openai SDK's own types")
    )

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
            from tiered_router.openai._compat import passthrough_client

            try:
                client = passthrough_client(self.router, asynchronous=self._asynchronous)
            except TieredRouterError as exc:
                raise translated(exc) from exc
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
        self.chat = Chat(self, Completions(self))
        self.models = Models(self, asynchronous=False)
        self.beta = Beta(self)

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
        self.chat = Chat(self, AsyncCompletions(self))
        self.models = Models(self, asynchronous=True)
        self.beta = Beta(self)

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
        self.chat = Chat(self, self._completions_cls(self, client.chat.completions), client.chat)

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
    completions = AsyncCompletions if isinstance(client, openai.AsyncOpenAI) else Completions
    return _Wrapped(client, router, completions)
