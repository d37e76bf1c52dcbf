"""The values that flow through the pipeline: a ``Turn`` in, a ``Completion`` out.

A turn is one model call of an agent: the conversation so far, the tools it may call,
the output contract (``response_format``) and the agent's signals (``final``, ``step``).
Everything here is a frozen dataclass: cheap to build, safe to share, hashable where it
matters.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from tiered_router import _limits
from tiered_router._types import Message
from tiered_router.exceptions import InvalidRequest

__all__ = [
    "Completion",
    "CompletionChunk",
    "Message",
    "SIGNAL_KEYS",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Turn",
    "Usage",
    "assemble",
    "message_text",
]

# chat.completions keyword arguments that Turn models itself; every other one rides in params
_TURN_FIELDS = frozenset({"messages", "tools", "response_format", "extra_body", "model"})
SIGNAL_KEYS = frozenset({"final", "step", "metadata", "task_id", "turn_id"})
"""The agent signals a call may carry in ``extra_body={"tiered_router": {...}}``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool the model may call, in the shape of OpenAI's ``function`` tools.

    Attributes:
        name: The function's name.
        description: What the tool does.
        parameters: JSON Schema of the arguments object (``{}`` when the tool takes none).
        strict: OpenAI's ``strict`` flag, passed through unchanged.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    strict: bool | None = None

    @classmethod
    def from_openai(cls, tool: Mapping[str, Any]) -> ToolSpec:
        """Build a spec from ``{"type": "function", "function": {...}}`` or a bare function.

        Raises:
            ValueError: When the tool has no function name.
        """
        fn = tool.get("function", tool)
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tool has no function name: {dict(tool)!r:.200}")
        return cls(
            name=fn["name"],
            description=str(fn.get("description") or ""),
            parameters=fn.get("parameters") or {},
            strict=fn.get("strict"),
        )

    def to_openai(self) -> dict[str, Any]:
        """Return the tool in OpenAI's request shape."""
        fn: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            fn["description"] = self.description
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts of one call.

    Attributes:
        input_tokens: Prompt tokens billed.
        output_tokens: Completion tokens billed.
        cached_input_tokens: Prompt tokens served from the provider's cache (part of
            ``input_tokens``).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call in a completion.

    Attributes:
        id: The call id the model gave (echoed back in the tool result message).
        name: Name of the tool called.
        arguments: The arguments exactly as the model wrote them (a JSON string, maybe
            invalid: the gate checks it).
    """

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> Any:
        """Return the arguments parsed as JSON (``{}`` for empty arguments).

        Raises:
            ValueError: When the model wrote invalid JSON (``json.JSONDecodeError``), or
                JSON nested deeper than 128 levels (``JSONTooDeep``), which would otherwise
                overflow the parser's stack.
        """
        from tiered_router import _limits

        return _limits.loads(self.arguments) if self.arguments.strip() else {}

    def to_openai(self) -> dict[str, Any]:
        """Return the call in OpenAI's message shape."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """What a backend produced for a turn.

    Attributes:
        text: The assistant's text (``""`` when it only called tools).
        tool_calls: The tool calls, in order.
        finish_reason: ``stop``, ``length``, ``tool_calls``, ``content_filter`` or ``None``.
        usage: Token counts.
        model: The model that answered, as reported by the server.
        backend: The policy name of the backend that produced it.
        refusal: OpenAI's structured ``refusal`` text, when the model refused.
        reasoning: A reasoning summary, when the provider sent one (Mercury 2 does).
        conversions: What the backend changed to fit the request to its server's dialect
            (``developer -> system``, tools described in the prompt, ...); the trace records
            them on the attempt.
        alternatives: The further choices of a request with ``n > 1`` (a draft panel
            sampled in one call), in order; their usage is in this completion's.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    backend: str = ""
    refusal: str | None = None
    reasoning: str | None = None
    conversions: tuple[str, ...] = ()
    alternatives: tuple[Completion, ...] = ()

    def completion_only(self) -> Completion:
        """This completion without its ``alternatives``."""
        return replace(self, alternatives=()) if self.alternatives else self

    def to_message(self) -> Message:
        """Return the completion as an assistant message to append to the conversation."""
        msg: Message = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One model call of an agent, as the router sees it.

    Example:
        ```python
        turn = Turn(
            messages=[{"role": "user", "content": "What is 2 + 2?"}],
            response_format={"type": "json_object"},
            step=3,
        )
        ```

    Attributes:
        messages: The conversation, OpenAI-shaped dicts, oldest first.
        tools: Tools the model may call.
        response_format: OpenAI's ``response_format`` (``json_object`` or ``json_schema``), or a
            pydantic class (taken as its strict ``json_schema``, as openai's ``parse`` sends it;
            that conversion is the openai SDK's, so a class needs the ``openai`` extra).
        final: The agent says this turn produces its final answer.
        step: The agent's step index (0-based), when it tracks one.
        metadata: Free-form labels; rules can match on them (``when: {metadata: {...}}``).
        params: Every other chat.completions argument (temperature, max_tokens, stop,
            tool_choice, ...), passed to the backend unchanged.
        id: A unique id for traces and logs.
    """

    messages: Sequence[Message]
    tools: Sequence[ToolSpec] | None = None
    response_format: Mapping[str, Any] | None = None
    final: bool = False
    step: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: os.urandom(8).hex())

    def __init__(
        self,
        messages: Iterable[Message],
        *,
        tools: Iterable[ToolSpec | Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | type[Any] | None = None,
        final: bool = False,
        step: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> None:
        msgs = tuple(_normalise_message(m, i) for i, m in enumerate(_items("messages", messages)))
        if not msgs:
            raise InvalidRequest(
                "Turn.messages: at least one message is required", param="messages"
            )
        specs = None
        if tools is not None:
            specs = tuple(_tool_spec(t, i) for i, t in enumerate(_items("tools", tools)))
        fmt = _limits.response_format_of(response_format)
        _limits.check_turn_options(step=step, metadata=metadata, params=params, response_format=fmt)
        _limits.check_params(params)
        set_ = object.__setattr__
        set_(self, "messages", msgs)
        set_(self, "tools", specs or None)
        set_(self, "response_format", fmt)
        set_(self, "final", bool(final))
        set_(self, "step", step)
        set_(self, "metadata", dict(metadata or {}))
        set_(self, "params", dict(params or {}))
        set_(self, "id", id or os.urandom(8).hex())

    @classmethod
    def from_openai(cls, **kwargs: Any) -> Turn:
        """Build a turn from ``chat.completions.create`` keyword arguments.

        Agent signals ride in ``extra_body={"tiered_router": {"final": True, "step": 3,
        "metadata": {...}}}``; the rest of ``extra_body`` and every other keyword (except
        ``model``) is kept in :attr:`params` and passed to the backend unchanged.

        Raises:
            InvalidRequest: ``messages`` missing, ``extra_body`` not an object, malformed
                agent signals, or any check of :class:`Turn` (a ``ValueError``).
        """
        if "messages" not in kwargs:
            raise InvalidRequest("Turn.from_openai: 'messages' is required", param="messages")
        _limits.check_object(kwargs.get("extra_body"), "extra_body")
        extra = dict(kwargs.get("extra_body") or {})
        signals = extra.pop("tiered_router", None) or {}
        if not isinstance(signals, Mapping):
            raise InvalidRequest(
                "extra_body.tiered_router: must be an object", param="tiered_router"
            )
        unknown = set(signals) - SIGNAL_KEYS
        if unknown:
            raise InvalidRequest(
                f"extra_body.tiered_router: unknown keys {sorted(unknown)}; "
                f"known: {sorted(SIGNAL_KEYS)}",
                param="tiered_router",
            )
        _limits.check_object(signals.get("metadata"), "tiered_router.metadata")
        params = {k: v for k, v in kwargs.items() if k not in _TURN_FIELDS and v is not None}
        if extra:
            params["extra_body"] = extra
        metadata = dict(signals.get("metadata") or {})
        if signals.get("task_id") is not None:
            metadata.setdefault("task_id", signals["task_id"])
        return cls(
            kwargs["messages"],
            tools=kwargs.get("tools") or None,
            response_format=kwargs.get("response_format"),
            final=bool(signals.get("final", False)),
            step=signals.get("step"),
            metadata=metadata,
            params=params,
            id=signals.get("turn_id"),
        )

    @cached_property
    def tool_names(self) -> frozenset[str]:
        """Names of the declared tools."""
        return frozenset(t.name for t in self.tools or ())

    @cached_property
    def prompt_chars(self) -> int:
        """Characters of message text and tool-call arguments (computed once per turn).

        Approximate token counts (``(prompt_chars + 3) // 4``) are built on it; tool schemas
        and ``response_format`` are not counted.
        """
        chars = 0
        for msg in self.messages:
            chars += len(message_text(msg))
            calls = msg.get("tool_calls")
            if calls:
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else None
                    args = fn.get("arguments") if isinstance(fn, dict) else None
                    if type(args) is str:
                        chars += len(args)
        return chars

    @property
    def last_message(self) -> Message:
        """The newest message of the conversation."""
        return self.messages[-1]

    def openai_tools(self) -> list[dict[str, Any]] | None:
        """Return the tools in OpenAI's request shape, or ``None``."""
        return [t.to_openai() for t in self.tools] if self.tools else None

    def with_updates(self, **changes: Any) -> Turn:
        """Return a copy with some fields replaced (same id unless one is given)."""
        values: dict[str, Any] = {
            "tools": self.tools,
            "response_format": self.response_format,
            "final": self.final,
            "step": self.step,
            "metadata": self.metadata,
            "params": self.params,
            "id": self.id,
        }
        messages = changes.pop("messages", self.messages)
        values.update(changes)
        return Turn(messages, **values)


def _items(field: str, value: Any) -> list[Any]:
    """``value`` as a list, refusing what is not a sequence of items (a string, a dict)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidRequest(
            f"Turn.{field}: must be a list, got {type(value).__name__}",
            param=field,
            code="invalid_type",
        )
    return list(value)


def _tool_spec(tool: Any, index: int) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping):
        raise InvalidRequest(
            f"Turn.{where}: must be an OpenAI tool dict or a ToolSpec, got {type(tool).__name__}",
            param=where,
        )
    try:
        spec = ToolSpec.from_openai(tool)
    except ValueError as exc:
        raise InvalidRequest(f"Turn.{where}: {exc}", param=where) from None
    _limits.check_schema(spec.parameters, f"{where}.function.parameters")
    return spec


def _normalise_message(message: Any, index: int) -> Message:
    """Accept an OpenAI-shaped dict (or pydantic message object) and return a plain dict."""
    if hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise InvalidRequest(
            f"Turn.{where}: must be a mapping, got {type(message).__name__}", param=where
        )
    role = message.get("role")
    if not isinstance(role, str):
        raise InvalidRequest(f"Turn.{where}.role: missing or not a string", param=f"{where}.role")
    _limits.check_message(message, index)
    return dict(message)


def message_text(message: Message) -> str:
    """Return the text of a message, joining content parts; ``""`` when it has none."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        elif isinstance(part, str):
            parts.append(part)
    return "\n".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A fragment of a streamed tool call (OpenAI's ``delta.tool_calls[i]``).

    Attributes:
        index: Position of the call in the completion.
        id: The call id (only in the first fragment of a call).
        name: The tool name (only in the first fragment of a call).
        arguments: A piece of the arguments string.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionChunk:
    """One streamed piece of a completion.

    Plain diffusion streaming is block by block: ``text`` can be long.

    Attributes:
        text: Text added by this chunk.
        tool_calls: Tool-call fragments added by this chunk.
        finish_reason: Set on the last content chunk.
        usage: Token counts, on the chunk that carries them (usually the last).
        model: The model that answered.
        reasoning: Reasoning-summary text carried by the chunk, if any.
        refusal: Refusal text carried by the chunk (OpenAI's ``delta.refusal``), if any.
        conversions: The dialect conversions of the request (on the first chunk).
    """

    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str = ""
    reasoning: str | None = None
    refusal: str | None = None
    conversions: tuple[str, ...] = ()


def assemble(chunks: Iterable[CompletionChunk], *, backend: str = "") -> Completion:
    """Fold streamed chunks into the :class:`Completion` they add up to."""
    text: list[str] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage = Usage()
    model = ""
    conversions: tuple[str, ...] = ()
    for chunk in chunks:
        text.append(chunk.text)
        conversions = conversions or chunk.conversions
        if chunk.reasoning:
            reasoning.append(chunk.reasoning)
        if chunk.refusal:
            refusal.append(chunk.refusal)
        for delta in chunk.tool_calls:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": []})
            call["id"] = delta.id or call["id"]
            if delta.name and delta.name != call["name"]:  # a repeat is one name; else they join
                call["name"] += delta.name  # as the caller's SDK joins fragments: never last-wins
            call["arguments"].append(delta.arguments)
        finish = chunk.finish_reason or finish
        usage = chunk.usage or usage
        model = chunk.model or model
    return Completion(
        text="".join(text),
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]))
            for _, c in sorted(calls.items())
        ),
        finish_reason=finish,
        usage=usage,
        model=model,
        backend=backend,
        reasoning="".join(reasoning) or None,
        refusal="".join(refusal) or None,
        conversions=conversions,
    )
