"""Conversions of OpenAI-shaped answers (parsed JSON, or SDK objects) to ours.

Servers that only claim OpenAI compatibility send bodies the SDK does not validate (it builds
its models without checking), so every field is read defensively: a missing or mistyped field
becomes a :class:`~tiered_router.BackendResponseError`, never an ``AttributeError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tiered_router import _limits
from tiered_router.backends._dialect import OPENAI_FIELDS
from tiered_router.exceptions import BackendResponseError
from tiered_router.turn import Completion, CompletionChunk, ToolCall, ToolCallDelta, Usage

__all__ = [
    "chunk",
    "completion",
    "reasoning_text",
    "sdk_param_names",
    "server_message",
]

_MAX_MESSAGE = 500


# the frame of a call and the SDK's own keyword arguments, beside the request fields
_SDK_PARAMS = OPENAI_FIELDS | {
    "extra_body",
    "extra_headers",
    "extra_query",
    "messages",
    "model",
    "stream",
    "timeout",
}


def sdk_param_names() -> frozenset[str]:
    """Keyword arguments of the openai SDK's ``chat.completions.create`` (openai 3.54).

    A request parameter named here is sent as a top-level field; any other goes into
    ``extra_body``, as the SDK would send it, so an ``extra_body`` entry of the same name
    overrides the one and not the other, exactly as with the SDK. The list is written out
    rather than read from the SDK's signature, which would import the SDK (about 1 s and
    15 MB) into every process that routes; a test checks it against the installed SDK.
    """
    return _SDK_PARAMS


def _get(obj: Any, name: str) -> Any:
    """Read ``name`` from a mapping or an object (SDK model, extra field); ``None`` if absent."""
    if type(obj) is dict:  # parsed JSON: no ABC check, ~15 reads of every answer
        return obj.get(name)
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(t for t in (_str(_get(p, "text")) for p in content) if t)
    return ""


def reasoning_text(value: Any) -> str | None:
    """Text of a reasoning field: a string, ``{"content"|"text"|"summary": ...}`` or a list.

    Mercury 2 sends ``reasoning_summary`` as an object such as
    ``{"content": "...", "status": "complete"}``; others send ``reasoning_content`` strings.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, list):
        parts = [t for t in (reasoning_text(v) for v in value) if t]
        return "\n".join(parts) or None
    for key in ("content", "text", "summary"):
        text = reasoning_text(_get(value, key))
        if text:
            return text
    return None


def _arguments(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        if value.count("{") + value.count("[") > _limits.MAX_JSON_DEPTH:
            _deep_check(value)  # nested too deep would break the gate's parser
        return value
    return json.dumps(value)


def _deep_check(value: str) -> None:
    """Raise :class:`~tiered_router._limits.JSONTooDeep` for JSON nested too deep."""
    try:
        _limits.loads(value)
    except _limits.JSONTooDeep:
        raise
    except ValueError:
        return  # not JSON: the gate says so


def _usage(raw: Any) -> Usage:
    details = _get(raw, "prompt_tokens_details")
    return Usage(
        input_tokens=_int(_get(raw, "prompt_tokens")),
        output_tokens=_int(_get(raw, "completion_tokens")),
        cached_input_tokens=_int(_get(details, "cached_tokens")),
    )


def _list(value: Any, field: str, backend: str) -> list[Any] | tuple[Any, ...]:
    """A list field of an answer; ``null`` is empty, anything else but a list is an error."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise BackendResponseError(
            f"{field} is a {type(value).__name__}, expected a list", backend=backend
        )
    return value


def _describe(raw: Any) -> str:
    if isinstance(raw, str):
        snippet = raw[:200].replace("\n", " ")
        return f"expected a JSON chat completion, got text: {snippet!r}"
    return f"expected a chat completion, got {type(raw).__name__} without choices"


def completion(raw: Any, *, backend: str) -> Completion:
    """Convert a ``ChatCompletion`` (or what a server sent instead) to a :class:`Completion`.

    Raises:
        BackendResponseError: When the body has no usable first choice.

    """
    choices = _get(raw, "choices")
    if isinstance(raw, str) or not isinstance(choices, list) or not choices:
        raise BackendResponseError(_describe(raw), backend=backend)
    usage = _get(raw, "usage")
    first = _choice(raw, choices[0], 0, backend, _usage(usage) if usage is not None else Usage())
    if len(choices) == 1:
        return first
    more = tuple(_choice(raw, c, i, backend, Usage()) for i, c in enumerate(choices[1:], 1))
    return replace(first, alternatives=more)


def _choice(raw: Any, choice: Any, index: int, backend: str, usage: Usage) -> Completion:
    message = _get(choice, "message")
    if message is None:
        raise BackendResponseError(f"choices[{index}] has no message", backend=backend)
    calls = []
    for i, call in enumerate(_list(_get(message, "tool_calls"), "tool_calls", backend)):
        fn = _get(call, "function")
        name = _str(_get(fn, "name"))
        if not name:
            raise BackendResponseError(f"tool_calls[{i}] has no function name", backend=backend)
        calls.append(
            ToolCall(
                id=_str(_get(call, "id")) or f"call_{i}",
                name=name,
                arguments=_arguments(_get(fn, "arguments")) or "{}",
            )
        )
    reasoning = reasoning_text(_get(raw, "reasoning_summary"))
    for key in ("reasoning_summary", "reasoning_content", "reasoning"):
        reasoning = reasoning or reasoning_text(_get(message, key))
    return Completion(
        text=_text(_get(message, "content")),
        tool_calls=tuple(calls),
        finish_reason=_str(_get(choice, "finish_reason")),
        usage=usage,
        model=_str(_get(raw, "model")) or "",
        backend=backend,
        refusal=_str(_get(message, "refusal")),
        reasoning=reasoning,
    )


DENOISE_EVENT = "diffulex.chat.completion.denoise"
"""The ``object`` of Diffulex's ``stream_mode: denoise`` events (not chat.completion.chunk)."""


def _denoise(raw: Any) -> CompletionChunk:
    """A Diffulex denoise event: snapshots are display-only; the final event is the answer.

    Diffulex (``diffulex/server/api_server.py``, ``denoise_chat_event``) streams canvas
    snapshots (``buffer_snapshot``), appended text (``append``) and a ``final`` event with
    the whole generated text; only the final one is read, as one chunk.
    """
    if _get(raw, "event") != "final":
        return CompletionChunk(text="", model=_str(_get(raw, "model")) or "")
    # "text" is the generated text; "full_text" may carry the prompt too
    return CompletionChunk(
        text=_text(_get(raw, "text")),
        finish_reason=_str(_get(raw, "finish_reason")) or "stop",
        model=_str(_get(raw, "model")) or "",
    )


def chunk(raw: Any, *, backend: str) -> CompletionChunk:
    """Convert a ``ChatCompletionChunk`` to a :class:`CompletionChunk`.

    A server that sends the whole answer as ``message`` instead of ``delta`` is read too;
    tool-call fragments without an ``index`` get their position.

    Raises:
        BackendResponseError: When the chunk is not an object with a ``choices`` list.

    """
    if _get(raw, "object") == DENOISE_EVENT:
        return _denoise(raw)
    choices = _get(raw, "choices")
    if isinstance(raw, str) or raw is None or not isinstance(choices or [], list):
        raise BackendResponseError(
            f"unreadable stream chunk: {type(raw).__name__}", backend=backend
        )
    text = ""
    deltas: list[ToolCallDelta] = []
    finish: str | None = None
    refusal: str | None = None
    reasoning = reasoning_text(_get(raw, "reasoning_summary"))
    if choices:
        choice = choices[0]
        delta = _get(choice, "delta")
        if delta is None:
            delta = _get(choice, "message")
        text = _text(_get(delta, "content"))
        for i, call in enumerate(_list(_get(delta, "tool_calls"), "tool_calls", backend)):
            fn = _get(call, "function")
            index = _get(call, "index")
            deltas.append(
                ToolCallDelta(
                    index=index if isinstance(index, int) else i,
                    id=_str(_get(call, "id")),
                    name=_str(_get(fn, "name")),
                    arguments=_arguments(_get(fn, "arguments")),
                )
            )
        finish = _str(_get(choice, "finish_reason"))
        refusal = _str(_get(delta, "refusal"))
        for key in ("reasoning_content", "reasoning"):
            reasoning = reasoning or reasoning_text(_get(delta, key))
    usage = _get(raw, "usage")
    return CompletionChunk(
        text=text,
        tool_calls=tuple(deltas),
        finish_reason=finish,
        usage=_usage(usage) if usage is not None else None,
        model=_str(_get(raw, "model")) or "",
        reasoning=reasoning,
        refusal=refusal,
    )


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _item(item: Any) -> str:
    """Render one validation item, e.g. ``{"loc": ["body", "temperature"], "msg": ...}``."""
    if not isinstance(item, Mapping):
        return str(item)
    loc = item.get("loc")
    where = ".".join(str(p) for p in loc) if isinstance(loc, (list, tuple)) else loc or ""
    msg = item.get("msg") or item.get("message") or json.dumps(dict(item), default=str)
    return f"{where}: {msg}" if where else str(msg)


def server_message(body: Any) -> str:
    """Render the error message in a server's error body readably.

    Handles OpenAI's ``{"error": {"message": ..., "type": ...}}``, a ``message`` that is a
    list of validation items with ``loc`` (Mercury 2), FastAPI's ``{"detail": [...]}`` and
    plain text. Returns ``""`` when there is nothing to show.
    """
    if body is None:
        return ""
    if isinstance(body, str):
        return _clip(body)
    if isinstance(body, list):
        return _clip("; ".join(_item(i) for i in body))
    if isinstance(body, Mapping):
        if "error" in body and isinstance(body["error"], (Mapping, list, str)):
            return server_message(body["error"])
        for key in ("message", "detail", "msg", "error_description"):
            if body.get(key):
                text = server_message(body[key])
                kind = body.get("type") or body.get("code")
                return f"{text} [{kind}]" if isinstance(kind, str) and kind else text
        return _clip(json.dumps(dict(body), default=str))
    return _clip(str(body))
