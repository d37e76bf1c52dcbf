"""Limits and shape checks on what comes from outside (a caller's request, upstream answers).

Python's JSON parser recurses: a document nested ~1,000 deep raises ``RecursionError`` (not a
``ValueError``), and one nested a little less parses but breaks the next recursive walk over
it (``json.dumps``, schema validation). :func:`loads` turns both into :class:`JSONTooDeep`, a
``ValueError``, so every caller's "unreadable JSON" branch handles them.

The depth check costs nothing on ordinary documents: a document with fewer brackets than the
limit cannot be nested deeper than it, and only documents with more are walked.

The same limits hold for a caller's own request in process (:class:`~tiered_router.Turn`
checks its schemas with :func:`check_schema`, and the shape of its messages and ``n`` with
:func:`check_message` and :func:`check_n`): a request the router could not send is refused
as :class:`~tiered_router.InvalidRequest` before any attempt, never retried as a backend
failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tiered_router.exceptions import InvalidRequest

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_SCHEMA_BYTES",
    "JSONTooDeep",
    "brackets",
    "check_depth",
    "check_message",
    "check_n",
    "check_object",
    "check_schema",
    "check_turn_options",
    "kind",
    "loads",
    "response_format_of",
]

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted (OpenAI's own limit on schemas is 5-10)."""
MAX_SCHEMA_BYTES = 256 * 1024
"""Largest schema (``response_format``, a tool's ``parameters``) a turn may carry, serialised."""


class JSONTooDeep(ValueError):
    """A JSON document nested deeper than the limit."""


def brackets(data: str | bytes) -> int:
    """How many ``{`` and ``[`` the text holds: no document nests deeper than that."""
    if isinstance(data, bytes):
        return data.count(b"{") + data.count(b"[")
    return data.count("{") + data.count("[")


def check_depth(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JSONTooDeep` when ``value`` nests dicts and lists deeper than ``max_depth``.

    Iterative, so it cannot itself run out of stack.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise JSONTooDeep(f"JSON nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def loads(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON, refusing documents nested deeper than ``max_depth``.

    Raises:
        JSONTooDeep: Nested too deep.
        ValueError: Not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).

    """
    from tiered_router import _json  # orjson loads with it: not on the gate's import path

    try:
        value = _json.loads(data)
    except RecursionError as exc:
        raise JSONTooDeep(f"JSON nested deeper than {max_depth} levels") from exc
    if brackets(data) > max_depth:
        check_depth(value, max_depth)
    return value


def kind(value: Any) -> str:
    """What a JSON value is, for error messages (``an object``, ``a number``...)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def check_object(value: Any, param: str) -> None:
    """Refuse a ``value`` that is neither ``None`` nor a mapping (``invalid_type``)."""
    if value is not None and not isinstance(value, Mapping):
        raise InvalidRequest(
            f"{param}: must be an object, got {kind(value)}", param=param, code="invalid_type"
        )


def check_turn_options(
    *, step: Any, metadata: Any, params: Mapping[str, Any] | None, response_format: Any
) -> None:
    """Check a turn's ``step``, ``metadata``, ``params["n"]`` and ``response_format``.

    Raises:
        InvalidRequest: ``step`` not a non-negative integer, ``metadata`` not an object, a
            malformed ``n`` (:func:`check_n`), a ``response_format`` that is not an object
            or too deep or large (:func:`check_schema`).

    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise InvalidRequest(
            f"Turn.step: must be a non-negative integer, got {step!r}", param="step"
        )
    check_object(metadata, "metadata")
    if params is not None and params.get("n") is not None:
        check_n(params["n"])
    if response_format is not None:
        check_schema(response_format, "response_format")


def check_schema(value: Any, param: str, *, max_bytes: int = MAX_SCHEMA_BYTES) -> None:
    """Refuse a schema that is not an object, too deep, or larger than ``max_bytes``.

    Raises:
        InvalidRequest: Not an object or not JSON (``invalid_type``), too deep
            (``schema_too_deep``), too large (``schema_too_large``).

    """
    check_object(value, param)
    try:
        check_depth(value)
    except JSONTooDeep as exc:
        raise InvalidRequest(f"{param}: {exc}", param=param, code="schema_too_deep") from None
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"{param}: must be JSON data ({exc})", param=param, code="invalid_type"
        ) from None
    if size > max_bytes:
        raise InvalidRequest(
            f"{param}: {size} bytes, larger than {max_bytes}", param=param, code="schema_too_large"
        )


def check_message(message: Mapping[str, Any], index: int) -> None:
    """Refuse a message whose ``content`` or ``tool_calls`` has a type OpenAI's API refuses.

    ``content`` is a string, a list of parts (objects or strings) or null; ``tool_calls`` a
    list of objects.

    Raises:
        InvalidRequest: Naming ``messages[i].content`` or ``messages[i].tool_calls``.

    """
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        where = f"messages[{index}].content"
        if not isinstance(content, list):
            raise InvalidRequest(
                f"{where}: must be a string or a list of content parts, got {kind(content)}",
                param=where,
                code="invalid_type",
            )
        for j, part in enumerate(content):
            if not isinstance(part, (dict, str)):
                raise InvalidRequest(
                    f"{where}[{j}]: must be a content part object, got {kind(part)}",
                    param=f"{where}[{j}]",
                    code="invalid_type",
                )
    calls = message.get("tool_calls")
    if calls is not None:
        where = f"messages[{index}].tool_calls"
        if not isinstance(calls, list):
            raise InvalidRequest(
                f"{where}: must be a list of tool calls, got {kind(calls)}",
                param=where,
                code="invalid_type",
            )
        for j, call in enumerate(calls):
            if not isinstance(call, dict):
                raise InvalidRequest(
                    f"{where}[{j}]: must be a tool call object, got {kind(call)}",
                    param=f"{where}[{j}]",
                    code="invalid_type",
                )


def check_n(value: Any, *, one: bool = False) -> None:
    """Refuse an ``n`` that is not a positive integer (``"2"``, ``2.0``, ``true``, ``0``, ``-1``).

    Args:
        value: The ``n`` given.
        one: Refuse anything but 1 too (the router returns one choice).

    Raises:
        InvalidRequest: Naming ``n``.

    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(
            f"n: must be an integer, got {kind(value)}", param="n", code="invalid_type"
        )
    if value < 1:
        raise InvalidRequest(f"n: must be at least 1, got {value}", param="n", code="invalid_value")
    if one and value != 1:
        raise InvalidRequest(
            "n: the router returns one choice; only n=1 is supported",
            param="n",
            code="unsupported_value",
        )


def response_format_of(value: Any) -> Any:
    """``value``, or a pydantic class (or dataclass) as OpenAI's strict ``json_schema`` format.

    openai-python's ``parse`` sends a class that way; a class given to ``create`` is taken
    the same way instead of failing deep inside scoring.
    """
    if not isinstance(value, type):
        return value
    try:
        from openai.lib._parsing._completions import type_to_response_format_param
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "openai":
            raise
        from tiered_router.exceptions import install_command

        raise ImportError(  # a class given to create: not a failure deep inside scoring
            f"response_format: a class ({value.__name__}) is turned into OpenAI's strict JSON "
            f"schema by the openai SDK, from the openai extra: {install_command('openai')}; "
            'or pass {"type": "json_schema", ...} as a dict'
        ) from None

    try:
        return type_to_response_format_param(value)
    except TypeError as exc:
        raise InvalidRequest(f"response_format: {exc}", param="response_format") from None
