"""Scripted replies: what the local test server answers, one request at a time.

A :class:`Reply` is a frozen description of one answer (a completion, an error status, a
dropped connection, a broken stream, raw bytes, a delay). Build replies with the class
methods; a queue entry can also be a callable ``(request_body) -> Reply`` for behaviour that
depends on the request (see :meth:`Reply.agent`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Union

__all__ = ["AgentReply", "BrokenMode", "Reply", "ReplyFn", "ReplyLike", "ToolCallSpec"]

ReplyFn = Callable[[dict[str, Any]], "Reply"]
"""A callable queue entry: gets the request's JSON body, returns the reply to serve."""

ReplyLike = Union["Reply", ReplyFn]
"""What a queue (or ``ScriptedServer.default``) holds: a reply or a callable that makes one."""

ToolCallSpec = tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]
"""``(name, arguments)`` or ``(name, arguments, call_id)``; a string ``arguments`` is sent raw."""

BrokenMode = Literal["drop", "invalid", "error"]
"""How :meth:`Reply.broken_sse` breaks a stream: drop the connection, send a ``data:`` line
that is not JSON, or send an in-band ``{"error": ...}`` event."""

_Kind = Literal["completion", "status", "drop", "broken", "raw", "slow"]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", "model_not_found"),
    408: ("timeout_error", None),
    409: ("conflict_error", None),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _usage_items(usage: Mapping[str, int] | None) -> tuple[tuple[str, int], ...] | None:
    return None if usage is None else tuple(usage.items())


def _format_seconds(value: float) -> str:
    # "2" rather than "2.0": some clients only parse integer Retry-After values
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted answer of :class:`~tiered_router.testing.ScriptedServer`.

    Build replies with the class methods (``Reply.text``, ``Reply.status``, ...) rather than
    the constructor. The same completion reply is served as a ``chat.completion`` object or,
    when the request has ``"stream": true``, as Server-Sent Events of
    ``chat.completion.chunk`` objects that add up to the same message.

    Example:
        ```python
        server.script([Reply.tool_calls([("search", {"q": "x"})]), Reply.text("done")])
        server.script([Reply.status(429, retry_after=1.5)], model="fast-model")
        ```

    Attributes:
        kind: What to do: ``completion``, ``status``, ``drop``, ``broken``, ``raw`` or ``slow``.
        content: The message content (``None`` serves ``"content": null``).
        refusal_text: The message's ``refusal`` field.
        calls: Tool calls as ``(call_id or None, name, arguments_json)`` triples; a missing id is
            generated from the request's sequence number.
        finish_reason: The choice's ``finish_reason``.
        usage: Explicit usage fields, or ``None`` for an estimate from the request.
        model: The model name to answer with; ``None`` echoes the request's model.
        chunks: How many pieces streamed content and tool arguments are split into.
        chunk_delay_s: Pause between streamed events (``0`` writes them all at once); for a
            JSON answer, the body is sent in ``chunks`` pieces this far apart (a slow drip).
        status_code: HTTP status for ``status`` and ``raw`` replies.
        message: Error message for ``status`` replies.
        error_type: Error ``type`` for ``status`` replies (``None``: derived from the status).
        error_code: Error ``code`` for ``status`` replies (``None``: derived from the status).
        headers: Extra response headers.
        body: Response body of ``raw`` replies.
        delay_s: Delay of ``slow`` replies, before anything is sent.
        then: What a ``slow`` reply serves after its delay (``None``: the server's default).
        broken_mode: How a ``broken`` reply breaks a stream.

    """

    kind: _Kind = "completion"
    content: str | None = None
    refusal_text: str | None = None
    calls: tuple[tuple[str | None, str, str], ...] = ()
    finish_reason: str = "stop"
    usage: tuple[tuple[str, int], ...] | None = None
    model: str | None = None
    chunks: int = 4
    chunk_delay_s: float = 0.0
    status_code: int = 200
    message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay_s: float = 0.0
    then: ReplyLike | None = None
    broken_mode: BrokenMode = "drop"

    @classmethod
    def text(
        cls,
        content: str,
        *,
        finish_reason: str = "stop",
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
        chunks: int = 4,
        chunk_delay_s: float = 0.0,
    ) -> Reply:
        """Answer with a plain assistant message.

        Args:
            content: The message text.
            finish_reason: The ``finish_reason`` to report.
            usage: Usage fields (``prompt_tokens``, ``completion_tokens``, ...); ``None``
                estimates them at four characters per token, at least 1: the prompt from
                the strings in the request's messages and tools, the completion from
                content, refusal and tool calls.
            model: Model name to answer with; ``None`` echoes the request's model.
            chunks: Content pieces when streamed (``1`` mimics one-chunk servers).
            chunk_delay_s: Pause between streamed events.

        """
        return cls(
            content=content,
            finish_reason=finish_reason,
            usage=_usage_items(usage),
            model=model,
            chunks=chunks,
            chunk_delay_s=chunk_delay_s,
        )

    @classmethod
    def json(
        cls,
        obj: Any,
        *,
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
        chunks: int = 4,
    ) -> Reply:
        """Answer with ``json.dumps(obj)`` as the content.

        Args:
            obj: Any JSON-serialisable value.
            usage: Usage fields, as in :meth:`text`.
            model: Model name to answer with.
            chunks: Content pieces when streamed.

        """
        return cls.text(json.dumps(obj), usage=usage, model=model, chunks=chunks)

    @classmethod
    def bad_json(cls, content: str = '{"answer": 4', *, model: str | None = None) -> Reply:
        """Answer with content that is not valid JSON (by default an unclosed object).

        Args:
            content: The malformed text.
            model: Model name to answer with.

        """
        return cls.text(content, model=model)

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCallSpec],
        *,
        content: str | None = None,
        finish_reason: str = "tool_calls",
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
        chunks: int = 4,
    ) -> Reply:
        """Answer with an assistant message that calls tools.

        Args:
            calls: ``(name, arguments)`` or ``(name, arguments, call_id)`` tuples. A mapping
                ``arguments`` is JSON-encoded; a string is sent unchanged (so it can be
                invalid JSON on purpose). Without a ``call_id`` the id is
                ``call_<request number>_<index>``.
            content: Text sent alongside the calls (usually ``None``).
            finish_reason: The ``finish_reason`` to report.
            usage: Usage fields, as in :meth:`text`.
            model: Model name to answer with.
            chunks: Argument pieces per call when streamed.

        """
        triples: list[tuple[str | None, str, str]] = []
        for spec in calls:
            name, arguments = spec[0], spec[1]
            call_id = spec[2] if len(spec) == 3 else None
            raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
            triples.append((call_id, name, raw))
        return cls(
            content=content,
            calls=tuple(triples),
            finish_reason=finish_reason,
            usage=_usage_items(usage),
            model=model,
            chunks=chunks,
        )

    @classmethod
    def truncated(cls, content: str, *, model: str | None = None) -> Reply:
        """Answer with a message cut off by the length limit (``finish_reason="length"``).

        Args:
            content: The partial text.
            model: Model name to answer with.

        """
        return cls.text(content, finish_reason="length", model=model)

    @classmethod
    def refusal(
        cls, text: str = "I'm sorry, but I can't help with that.", *, model: str | None = None
    ) -> Reply:
        """Refuse: set both ``message.refusal`` and ``message.content`` to ``text``.

        Args:
            text: The refusal text.
            model: Model name to answer with.

        """
        return cls(content=text, refusal_text=text, model=model)

    @classmethod
    def empty(cls, *, finish_reason: str = "stop", model: str | None = None) -> Reply:
        """Answer with empty content (``""``).

        Args:
            finish_reason: The ``finish_reason`` to report.
            model: Model name to answer with.

        """
        return cls.text("", finish_reason=finish_reason, model=model)

    @classmethod
    def repetition(
        cls, unit: str, times: int, *, finish_reason: str = "stop", model: str | None = None
    ) -> Reply:
        """Answer with a repetition loop: ``unit`` repeated ``times`` times.

        Args:
            unit: The repeated text.
            times: How many repetitions.
            finish_reason: The ``finish_reason`` to report (``"length"`` is also typical).
            model: Model name to answer with.

        """
        return cls.text(unit * times, finish_reason=finish_reason, model=model)

    @classmethod
    def status(
        cls,
        code: int,
        *,
        message: str | None = None,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        headers: Mapping[str, str] | None = None,
        error_type: str | None = None,
        error_code: str | None = None,
    ) -> Reply:
        """Answer with an HTTP error in OpenAI's shape ``{"error": {"message", "type", "code"}}``.

        Args:
            code: The HTTP status code.
            message: The error message (default: ``"scripted <code> error"``).
            retry_after: Value of the ``retry-after`` header, in seconds.
            retry_after_ms: Value of the ``retry-after-ms`` header, in milliseconds.
            headers: Extra response headers.
            error_type: The error ``type`` (default derived from the code, e.g.
                ``rate_limit_error`` for 429, ``server_error`` for 5xx).
            error_code: The error ``code`` (default derived from the code, else ``null``).

        """
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = _format_seconds(retry_after)
        if retry_after_ms is not None:
            extra["retry-after-ms"] = _format_seconds(retry_after_ms)
        default_type, default_code = _ERROR_TYPES.get(
            code, ("server_error" if code >= 500 else "invalid_request_error", None)
        )
        return cls(
            kind="status",
            status_code=code,
            message=message if message is not None else f"scripted {code} error",
            error_type=error_type or default_type,
            error_code=error_code or default_code,
            headers=tuple(extra.items()),
        )

    @classmethod
    def slow(cls, delay_s: float, then: ReplyLike | None = None) -> Reply:
        """Wait ``delay_s`` seconds before answering (other requests are served meanwhile).

        Args:
            delay_s: The delay, before the status line is sent.
            then: The reply to serve afterwards; ``None`` serves the server's default.

        """
        return cls(kind="slow", delay_s=delay_s, then=then)

    @classmethod
    def drop(cls) -> Reply:
        """Read the request, then close the connection without sending any response."""
        return cls(kind="drop")

    @classmethod
    def broken_sse(cls, mode: BrokenMode = "drop", *, content: str = "a partial answer") -> Reply:
        """Answer brokenly.

        For ``stream=true``: the role chunk and the first pieces of ``content``, then
        ``mode`` ``"drop"`` closes the connection mid-stream, ``"invalid"`` sends a ``data:``
        line that is not JSON, ``"error"`` sends an in-band ``{"error": ...}`` event. For
        ``stream=false``: a 200 whose JSON body is cut in half.

        Args:
            mode: How to break the stream.
            content: The text whose first pieces are streamed before the break.

        """
        return cls(kind="broken", broken_mode=mode, content=content)

    @classmethod
    def raw(cls, status: int, body: bytes | str, headers: Mapping[str, str] | None = None) -> Reply:
        """Answer with exactly this status and body.

        ``content-length`` is always set; ``content-type`` defaults to ``application/json``.

        Args:
            status: The HTTP status code.
            body: The response body; a ``str`` is UTF-8 encoded.
            headers: Response headers.

        """
        data = body.encode() if isinstance(body, str) else bytes(body)
        return cls(
            kind="raw", status_code=status, body=data, headers=tuple((headers or {}).items())
        )

    @staticmethod
    def agent(tool_name: str, arguments: Mapping[str, Any] | str, final_text: str) -> AgentReply:
        """Return a callable reply for a one-tool agent loop.

        It calls ``tool_name`` with ``arguments`` while the conversation's last message is
        not a tool result, and answers ``final_text`` once it is. Use it as
        ``server.default`` (or script it once per expected model call).

        Args:
            tool_name: The tool to call.
            arguments: Its arguments (a mapping, or a raw string).
            final_text: The answer after the tool result.

        """
        return AgentReply(tool_name=tool_name, arguments=arguments, final_text=final_text)

    def streamed(self, *, chunks: int | None = None, chunk_delay_s: float | None = None) -> Reply:
        """Return a copy with other streaming settings.

        Args:
            chunks: Pieces per streamed content / tool arguments.
            chunk_delay_s: Pause between streamed events.

        """
        return replace(
            self,
            chunks=self.chunks if chunks is None else chunks,
            chunk_delay_s=self.chunk_delay_s if chunk_delay_s is None else chunk_delay_s,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentReply:
    """Callable reply for a one-tool agent loop (see :meth:`Reply.agent`).

    Attributes:
        tool_name: The tool to call.
        arguments: Its arguments.
        final_text: The answer once the last message is a tool result.

    """

    tool_name: str
    arguments: Mapping[str, Any] | str
    final_text: str

    def __call__(self, body: dict[str, Any]) -> Reply:
        """Return the tool call, or the final answer after a tool result."""
        messages = body.get("messages") or []
        last = messages[-1] if isinstance(messages, list) and messages else {}
        if isinstance(last, dict) and last.get("role") == "tool":
            return Reply.text(self.final_text)
        return Reply.tool_calls([(self.tool_name, self.arguments)])
