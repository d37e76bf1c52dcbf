"""The backend protocol and the request a backend receives."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tiered_router._types import BackendKind, Message
from tiered_router.turn import Completion, CompletionChunk, Turn

__all__ = ["Backend", "CompletionRequest", "StreamingBackend"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionRequest:
    """Everything one backend call needs.

    Attributes:
        messages: The conversation, OpenAI-shaped.
        tools: Tools in OpenAI's request shape, or ``None``.
        response_format: OpenAI's ``response_format``, or ``None``.
        params: Other chat.completions arguments (temperature, max_tokens, stop, ...).
        timeout_s: Time left for this call (the smaller of the backend timeout and what is
            left of the turn's deadline); ``None`` for no limit.
        turn_id: The turn's id, for logs.
        output_tokens: Output tokens the router expects of the turn (the policy's
            ``task.expected_output_tokens``); a server that must be told a length
            (dlmserve's canvas) is sent it when the request has no ``max_tokens``.

    """

    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] | None = None
    response_format: Mapping[str, Any] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    turn_id: str = ""
    output_tokens: int | None = None

    @classmethod
    def from_turn(
        cls, turn: Turn, *, timeout_s: float | None = None, output_tokens: int | None = None
    ) -> CompletionRequest:
        """Build the request for ``turn``."""
        return cls(
            messages=turn.messages,
            tools=turn.openai_tools(),
            response_format=turn.response_format,
            params=turn.params,
            timeout_s=timeout_s,
            turn_id=turn.id,
            output_tokens=output_tokens,
        )


@runtime_checkable
class Backend(Protocol):
    """A model endpoint. One call is one try: the router owns retries.

    Implementations raise :class:`~tiered_router.BackendError` subclasses, translated at
    the seam, and never retry on their own.

    Attributes:
        name: The backend's name in the policy.
        kind: ``diffusion`` or ``autoregressive``.
        model: The model name it sends.
        supports_tools: ``False`` keeps tool turns away from it.

    """

    name: str
    kind: BackendKind
    model: str
    supports_tools: bool

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Make one call and return the whole completion."""
        ...

    def complete(self, request: CompletionRequest) -> Completion:
        """Sync twin of :meth:`acomplete`."""
        ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A backend that can also stream."""

    def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
        """Make one streaming call; yields chunks as they arrive."""
        ...

    def stream(self, request: CompletionRequest) -> Iterator[CompletionChunk]:
        """Sync twin of :meth:`astream`."""
        ...
