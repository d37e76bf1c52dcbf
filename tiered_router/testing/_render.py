"""Turn a completion :class:`Reply` into OpenAI's wire shapes (JSON body or SSE events)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tiered_router.testing._reply import Reply

__all__ = ["Rendered", "broken_events", "completion_body", "error_body", "stream_events"]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    """Per-request facts every rendering needs.

    Attributes:
        seq: The request's sequence number on the server (1, 2, ...).
        created: Unix time of the request.
        model: The model name to answer with.
        request: The request's JSON body.

    """

    seq: int
    created: int
    model: str
    request: dict[str, Any]

    @property
    def completion_id(self) -> str:
        """The ``id`` of the completion."""
        return f"chatcmpl-scripted-{self.seq}"


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tool_calls(reply: Reply, ctx: Rendered) -> list[tuple[str, str, str]]:
    return [
        (call_id or f"call_{ctx.seq}_{index}", name, arguments)
        for index, (call_id, name, arguments) in enumerate(reply.calls)
    ]


def _text_size(value: Any) -> int:
    """Return the total length of the strings in a JSON value (keys excluded)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_size(v) for v in value.values())
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    return 0


def _usage(reply: Reply, ctx: Rendered) -> dict[str, int]:
    if reply.usage is not None:
        usage = dict(reply.usage)
        usage.setdefault("prompt_tokens", 0)
        usage.setdefault("completion_tokens", 0)
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        return usage
    # count string characters instead of re-serialising: json.dumps of a long conversation
    # costs more than the rest of the request; tools count, as they do in real prompts
    chars = _text_size(ctx.request.get("messages")) + _text_size(ctx.request.get("tools"))
    prompt = max(1, chars // 4)
    out_chars = len(reply.content or "") + len(reply.refusal_text or "")
    out_chars += sum(len(name) + len(args) for _, name, args in reply.calls)
    completion = max(1, out_chars // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_body(reply: Reply, ctx: Rendered) -> dict[str, Any]:
    """Return the ``chat.completion`` object for ``reply``."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content,
        "refusal": reply.refusal_text,
    }
    if reply.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in _tool_calls(reply, ctx)
        ]
    return {
        "id": ctx.completion_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": _usage(reply, ctx),
        "system_fingerprint": None,
    }


def error_body(message: str, error_type: str | None, code: str | None) -> bytes:
    """Return OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``."""
    error = {"message": message, "type": error_type, "param": None, "code": code}
    return _dumps({"error": error}).encode()


def _event(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else _dumps(obj)
    return f"data: {data}\n\n".encode()


class _Chunks:
    """Builds ``chat.completion.chunk`` events that share id, created and model."""

    def __init__(self, ctx: Rendered, *, include_usage: bool) -> None:
        self._head = {
            "id": ctx.completion_id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "system_fingerprint": None,
        }
        self._include_usage = include_usage

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = dict(self._head)
        chunk["choices"] = [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ]
        if self._include_usage:
            chunk["usage"] = None
        return _event(chunk)

    def usage(self, usage: dict[str, int]) -> bytes:
        chunk: dict[str, Any] = dict(self._head)
        chunk["choices"] = []
        chunk["usage"] = usage
        return _event(chunk)


def _include_usage(request: dict[str, Any]) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def stream_events(reply: Reply, ctx: Rendered) -> list[bytes]:
    """Return the SSE events of ``reply``, ending with ``data: [DONE]``.

    Order: the role chunk, refusal pieces, content pieces, for each tool call its id/name
    chunk then its argument pieces, the ``finish_reason`` chunk, the usage chunk (when the
    request asked for it with ``stream_options.include_usage``), then ``[DONE]``.
    """
    include_usage = _include_usage(ctx.request)
    chunks = _Chunks(ctx, include_usage=include_usage)
    events = [chunks.delta({"role": "assistant", "content": ""})]
    for piece in _split(reply.refusal_text or "", reply.chunks):
        events.append(chunks.delta({"refusal": piece}))
    for piece in _split(reply.content or "", reply.chunks):
        events.append(chunks.delta({"content": piece}))
    for index, (call_id, name, args) in enumerate(_tool_calls(reply, ctx)):
        function = {"name": name, "arguments": ""}
        first = {"index": index, "id": call_id, "type": "function", "function": function}
        events.append(chunks.delta({"tool_calls": [first]}))
        for piece in _split(args, reply.chunks):
            delta = {"index": index, "function": {"arguments": piece}}
            events.append(chunks.delta({"tool_calls": [delta]}))
    events.append(chunks.delta({}, reply.finish_reason))
    if include_usage:
        events.append(chunks.usage(_usage(reply, ctx)))
    events.append(_event("[DONE]"))
    return events


def broken_events(reply: Reply, ctx: Rendered) -> tuple[list[bytes], bool]:
    """Return the events of a broken stream and whether to drop the connection after them."""
    chunks = _Chunks(ctx, include_usage=False)
    pieces = _split(reply.content or "", 4)
    events = [chunks.delta({"role": "assistant", "content": ""})]
    events.extend(chunks.delta({"content": piece}) for piece in pieces[:2])
    if reply.broken_mode == "drop":
        return events, True
    if reply.broken_mode == "invalid":
        events.append(_event('{"id": "' + ctx.completion_id + '", "choices": [{"delta": '))
    else:
        error = {"message": "scripted stream error", "type": "server_error", "code": None}
        events.append(_event({"error": error}))
    events.append(_event("[DONE]"))
    return events, False
