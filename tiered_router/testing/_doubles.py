"""In-process test doubles that implement the Backend protocol."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from tiered_router._types import BackendKind
from tiered_router.backends._base import CompletionRequest
from tiered_router.exceptions import BackendError, CapabilityError
from tiered_router.turn import Completion, CompletionChunk, ToolCallDelta, Usage

__all__ = ["FunctionBackend", "ScriptError", "ScriptItem", "ScriptedBackend"]

ScriptItem = Completion | BackendError | Callable[[CompletionRequest], Completion] | str
"""One scripted answer: a completion, a text, an error to raise, or a function of the request."""


class ScriptError(BaseException):
    """A test double was used against its script: the test is wrong, not the backend.

    A ``BaseException``, as pytest's own outcomes are: the router translates whatever
    ``Exception`` a backend raises into a ``BackendError`` (and may escalate past it), and a
    test's mistake must not be taken for a backend's. Raised when a :class:`ScriptedBackend`
    runs out of script, and for an ``AssertionError`` raised by a :class:`FunctionBackend`'s
    function (the original is its ``__cause__``).
    """


class ScriptedBackend:
    """A backend that answers from a script, one item per call, and records every request.

    Example:
        ```python
        fast = ScriptedBackend("fast", [Completion(text="{}"), BackendTimeout("slow")])
        router = Router(policy, backends={"fast": fast})
        ...
        fast.assert_complete()  # every scripted item was used
        ```

    Args:
        name: The backend's policy name.
        script: Answers in call order. A ``str`` is a plain text completion.
        default: What to answer once the script is used up; ``None`` raises
            :class:`ScriptError`.
        model: Model name reported in completions and traces.
        kind: ``diffusion`` or ``autoregressive``.
        supports_tools: ``False`` makes tool requests raise :class:`CapabilityError`.
        usage: Usage reported on text items (a completion item keeps its own).
    """

    def __init__(
        self,
        name: str,
        script: Iterable[ScriptItem] = (),
        *,
        default: ScriptItem | None = None,
        model: str = "scripted",
        kind: BackendKind = "autoregressive",
        supports_tools: bool = True,
        usage: Usage | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.kind: BackendKind = kind
        self.supports_tools = supports_tools
        self.requests: list[CompletionRequest] = []
        self._script: deque[ScriptItem] = deque(script)
        self._default = default
        self._usage = usage or Usage(input_tokens=10, output_tokens=5)

    def extend(self, items: Iterable[ScriptItem]) -> None:
        """Append items to the script."""
        self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Scripted items not used yet."""
        return len(self._script)

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` if some scripted items were never used."""
        if self._script:
            raise AssertionError(f"{self.name}: {len(self._script)} scripted item(s) unused")

    def _next(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if request.tools and not self.supports_tools:
            raise CapabilityError("this backend cannot call tools", backend=self.name)
        if self._script:
            item = self._script.popleft()
        elif self._default is not None:
            item = self._default
        else:
            raise ScriptError(f"{self.name}: script exhausted after {len(self.requests)} calls")
        if isinstance(item, BackendError):
            if item.backend == "?":
                item.for_backend(self.name)
            raise item
        if isinstance(item, str):
            return Completion(text=item, usage=self._usage, model=self.model, backend=self.name)
        if isinstance(item, Completion):
            return _stamp(item, self)
        return _stamp(item(request), self)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Answer with the next scripted item."""
        return self._next(request)

    def complete(self, request: CompletionRequest) -> Completion:
        """Sync twin of :meth:`acomplete`."""
        return self._next(request)

    async def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
        """Stream the next scripted item in a few chunks."""
        for chunk in _chunks(self._next(request)):
            yield chunk

    def stream(self, request: CompletionRequest) -> Iterator[CompletionChunk]:
        """Sync twin of :meth:`astream`."""
        yield from _chunks(self._next(request))

    def __repr__(self) -> str:
        return f"ScriptedBackend({self.name!r}, remaining={self.remaining})"


class FunctionBackend:
    """A backend whose answers come from a function (sync or async) of the request.

    Args:
        name: The backend's policy name.
        fn: ``fn(request) -> Completion | str``, or an async function returning one.
        model: Model name reported.
        kind: ``diffusion`` or ``autoregressive``.
        supports_tools: Whether tool turns may come here.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[[CompletionRequest], Any],
        *,
        model: str = "function",
        kind: BackendKind = "autoregressive",
        supports_tools: bool = True,
    ) -> None:
        self.name = name
        self.model = model
        self.kind: BackendKind = kind
        self.supports_tools = supports_tools
        self.calls = 0
        self._fn = fn

    def _call(self, request: CompletionRequest) -> Any:
        self.calls += 1
        try:
            return self._fn(request)
        except AssertionError as exc:  # the test's own check failed: not a backend's error
            raise ScriptError(f"{self.name}: {exc}") from exc

    def _wrap(self, value: Completion | str) -> Completion:
        if isinstance(value, str):
            return Completion(text=value, model=self.model, backend=self.name)
        return _stamp(value, self)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Call the function (awaiting it when it is async)."""
        value = self._call(request)
        if inspect.isawaitable(value):
            try:
                value = await value
            except AssertionError as exc:
                raise ScriptError(f"{self.name}: {exc}") from exc
        return self._wrap(value)

    def complete(self, request: CompletionRequest) -> Completion:
        """Call the function; an async function is refused on the sync path."""
        value = self._call(request)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if close is not None:
                close()
            raise TypeError(f"{self.name}: an async function cannot serve the sync path")
        return self._wrap(value)

    def __repr__(self) -> str:
        return f"FunctionBackend({self.name!r})"


def _stamp(completion: Completion, backend: Any) -> Completion:
    from dataclasses import replace

    return replace(completion, backend=backend.name, model=completion.model or backend.model)


def _chunks(completion: Completion) -> Iterator[CompletionChunk]:
    text = completion.text
    cut = max(1, len(text) // 3) if text else 0
    pieces = [text[i : i + cut] for i in range(0, len(text), cut)] if cut else []
    for piece in pieces:
        yield CompletionChunk(text=piece, model=completion.model)
    for i, call in enumerate(completion.tool_calls):
        yield CompletionChunk(
            tool_calls=(ToolCallDelta(index=i, id=call.id, name=call.name, arguments=""),)
        )
        yield CompletionChunk(tool_calls=(ToolCallDelta(index=i, arguments=call.arguments),))
    yield CompletionChunk(
        finish_reason=completion.finish_reason, usage=completion.usage, model=completion.model
    )
