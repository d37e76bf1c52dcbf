"""Checks on a client's request body, before anything is routed or paid for.

Everything here is cheap and bounded: JSON nesting is capped when the body is parsed
(:func:`tiered_router._limits.loads`), schemas are capped by their serialized size before
any schema code sees them, and tools by count. Each failure is a :class:`BadRequest` naming
the parameter, which the app answers with 400 in OpenAI's error shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tiered_router.exceptions import InvalidRequest

__all__ = ["BadRequest", "check_body", "check_header_value", "has_lone_surrogate"]

_ID = re.compile(r"[\x21-\x7e]{1,128}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class BadRequest(InvalidRequest):
    """A client mistake found by the proxy's checks on the body, answered with 400.

    Attributes:
        param: The offending parameter (``messages``, ``tools[2].function.parameters``...).
        code: OpenAI-style error code.

    """


def has_lone_surrogate(raw: bytes, value: Any) -> bool:
    """Whether a parsed body holds a string with a lone UTF-16 surrogate (such as U+D800).

    Such a string cannot be encoded as UTF-8, so nothing downstream could send it. Only a
    body with a surrogate escape in its bytes is walked.
    """
    if not _SURROGATE_ESCAPE.search(raw):
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_header_value(name: str, value: object) -> str:
    """Return ``value`` if it can ride in a response header: visible ASCII, 1-128 chars.

    Raises:
        BadRequest: Anything else (non-Latin-1 text, CR/LF, spaces, too long).

    """
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise BadRequest(
            f"{name}: must be 1-128 visible ASCII characters (no spaces or line breaks)",
            param=name,
        )
    return value


def _size(value: Any) -> int:
    return len(_dumps(value))


def _check_schema(value: Any, param: str, max_bytes: int) -> None:
    if _size(value) > max_bytes:
        raise BadRequest(
            f"{param}: larger than {max_bytes} bytes", param=param, code="schema_too_large"
        )


def _check_tools(tools: Any, *, max_tools: int, max_schema_bytes: int) -> None:
    if not isinstance(tools, list):
        raise BadRequest(f"tools: must be a list, got {_kind(tools)}", param="tools")
    if len(tools) > max_tools:
        raise BadRequest(
            f"tools: {len(tools)} given, at most {max_tools} accepted",
            param="tools",
            code="too_many_tools",
        )
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise BadRequest(f"{where}: must be an object, got {_kind(tool)}", param=where)
        fn = tool.get("function")
        if tool.get("type", "function") == "function":
            if not isinstance(fn, dict):
                raise BadRequest(f"{where}.function: must be an object", param=where)
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise BadRequest(f"{where}.function.name: must be a non-empty string", param=where)
            params = fn.get("parameters")
            if params is not None:
                if not isinstance(params, dict):
                    raise BadRequest(
                        f"{where}.function.parameters: must be an object, got {_kind(params)}",
                        param=f"{where}.function.parameters",
                    )
                _check_schema(params, f"{where}.function.parameters", max_schema_bytes)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def check_body(data: Mapping[str, Any], *, max_tools: int, max_schema_bytes: int) -> None:
    """Check the shape of a chat-completions body where a wrong shape would fail later.

    Raises:
        BadRequest: ``messages`` not a non-empty list of objects, malformed ``tools`` or
            ``response_format``, too many tools, a schema over ``max_schema_bytes``.

    """
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(
            f"messages: must be a non-empty list of message objects, got {_kind(messages)}",
            param="messages",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(
                f"messages[{i}]: must be an object with a string role", param=f"messages[{i}]"
            )
    tools = data.get("tools")
    if tools is not None:
        _check_tools(tools, max_tools=max_tools, max_schema_bytes=max_schema_bytes)
    response_format = data.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise BadRequest(
                f"response_format: must be an object, got {_kind(response_format)}",
                param="response_format",
            )
        _check_schema(response_format, "response_format", max_schema_bytes)
    timeout = data.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < float("inf")
    ):
        raise BadRequest("timeout: must be a positive number of seconds", param="timeout")
