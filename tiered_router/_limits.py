"""Limits and shape checks on what comes from outside (a caller's request, upstream answers).

Python's JSON parser recurses: a document nested ~1,000 deep raises ``RecursionError`` (not a
``ValueError``), and one nested a little less parses but breaks the next recursive walk over
it (``json.dumps``, schema validation). :func:`loads` turns both into :class:`JSONTooDeep`, a
``ValueError``, so every caller's "unreadable JSON" branch handles them.

The depth check costs nothing on ordinary documents: a document with fewer brackets than the
limit cannot be nested deeper than it, and only documents with more are walked.

The same limits hold for a caller's own request, whichever face it came through (the proxy,
the drop-in client, :class:`~tiered_router.Turn` in process): the turn is the one boundary
where every caller field is checked, once, when it is built. :func:`check_schema` checks its
schemas, :func:`check_turn_options` its ``step``, ``metadata``, ``n``, ``stop``,
``extra_body`` and ``response_format`` (:mod:`tiered_router._messages` checks its messages
and ``tool_choice``); :func:`check_finite` refuses ``NaN`` and ``Infinity`` anywhere in what
would be sent upstream (JSON has no such numbers: a server would get ``null``). A request the
router could not send is refused as :class:`~tiered_router.InvalidRequest` before any
attempt, never retried as a backend failure and never counted by a breaker.

What the router reads from model text is bounded the same way: :func:`read_int` and
:func:`read_float` read a number only when it has at most :data:`MAX_NUMBER_DIGITS` digits and
is finite, and :func:`bounded` says whether a value read from text is JSON data within the
limits (finite numbers, integers of at most that many digits, nesting within
:data:`MAX_JSON_DEPTH`). A value that is not is left unread, so the gate fails the draft.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from tiered_router.exceptions import InvalidRequest

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NUMBER_DIGITS",
    "MAX_SCHEMA_BYTES",
    "MAX_STOP",
    "JSONTooDeep",
    "bounded",
    "brackets",
    "check_depth",
    "check_finite",
    "check_n",
    "check_object",
    "check_schema",
    "check_stop",
    "check_turn_options",
    "kind",
    "loads",
    "read_float",
    "read_int",
    "response_format_of",
]

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted (OpenAI's own limit on schemas is 5-10)."""
MAX_SCHEMA_BYTES = 256 * 1024
"""Largest schema (``response_format``, a tool's ``parameters``) a turn may carry, serialised."""
MAX_STOP = 16
"""Most ``stop`` sequences a turn may give (OpenAI takes 4; local servers more)."""
MAX_NUMBER_DIGITS = 100
"""Most digits of a number read from model text (2**256 has 78)."""


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
            malformed ``n`` (:func:`check_n`) or ``stop`` (:func:`check_stop`), an
            ``extra_body`` that is not an object, ``NaN`` or ``Infinity`` among the params
            (:func:`check_finite`), a ``response_format`` that is not an object or too deep
            or large (:func:`check_schema`).

    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise InvalidRequest(
            f"Turn.step: must be a non-negative integer, got {step!r}", param="step"
        )
    check_object(metadata, "metadata")
    if params is not None:
        if params.get("n") is not None:
            check_n(params["n"])
        check_stop(params.get("stop"), "stop")
        extra = params.get("extra_body")
        check_object(extra, "extra_body")
        if extra:
            check_stop(extra.get("stop"), "extra_body.stop")
        check_finite(params, "")
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
    check_finite(value, param)


def check_stop(value: Any, param: str = "stop") -> None:
    """Refuse a ``stop`` that is not ``None``, a string or a list of at most :data:`MAX_STOP`.

    Raises:
        InvalidRequest: Naming ``param`` (or ``param[i]`` for an item that is no string).

    """
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)):
        raise InvalidRequest(
            f"{param}: must be a string or a list of strings, got {kind(value)}",
            param=param,
            code="invalid_type",
        )
    if len(value) > MAX_STOP:
        raise InvalidRequest(
            f"{param}: {len(value)} sequences given, at most {MAX_STOP} accepted",
            param=param,
            code="invalid_value",
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidRequest(
                f"{param}[{i}]: must be a string, got {kind(item)}",
                param=f"{param}[{i}]",
                code="invalid_type",
            )


def _non_finite(value: Any) -> bool:
    """Whether ``value`` holds a float that is ``NaN`` or infinite (iterative walk)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _where_non_finite(value: Any, path: str) -> str:
    """The path of the first non-finite number in ``value`` (one is known to be there)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "body"
        if isinstance(item, Mapping):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return path or "body"  # pragma: no cover - only called when one is there


def check_finite(value: Any, param: str) -> None:
    """Refuse ``NaN`` and ``Infinity`` anywhere in ``value`` (JSON has no such numbers).

    A body read by Python's JSON parser may hold them (it reads ``NaN``, ``Infinity`` and
    ``1e400``), and a caller in process may pass them; sent on, they would reach the server
    as ``null``. The walk is iterative and runs once per turn.

    Raises:
        InvalidRequest: Naming where the number is (``temperature``,
            ``messages[0].content[1].x``...), ``code="invalid_value"``.

    """
    if _non_finite(value):
        where = _where_non_finite(value, param)
        raise InvalidRequest(
            f"{where}: NaN and Infinity are not JSON numbers; send a finite number",
            param=where,
            code="invalid_value",
        )


_DIGITS = re.compile(r"[+-]?\d+")


def read_int(text: str) -> int | None:
    """``text`` (an optional sign and digits) as an integer, or ``None``.

    ``None`` for anything else, and for more than :data:`MAX_NUMBER_DIGITS` digits: model
    text is read within bounds (Python refuses over 4,300 digits with ``ValueError``).
    """
    text = text.strip()
    if len(text) > MAX_NUMBER_DIGITS + 1 or not _DIGITS.fullmatch(text):
        return None
    return int(text)


def read_float(text: str) -> float | None:
    """``text`` as a finite number of at most :data:`MAX_NUMBER_DIGITS` digits, or ``None``.

    ``None`` for what Python cannot read as a float, for ``nan``, ``inf`` and numbers
    beyond the float range (``1e400``), and for longer text.
    """
    text = text.strip()
    if len(text) > MAX_NUMBER_DIGITS + 8:  # digits, sign, point, exponent
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def bounded(value: Any) -> bool:
    """Whether ``value`` (read from model text) is JSON data within the limits.

    Finite numbers only, integers of at most :data:`MAX_NUMBER_DIGITS` digits, string keys,
    nesting within :data:`MAX_JSON_DEPTH`; strings, booleans and ``None`` as they are.
    """
    limit = 10**MAX_NUMBER_DIGITS
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, (str, bool)):
            continue
        if isinstance(item, int):
            if not -limit < item < limit:
                return False
        elif isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return False
            if isinstance(item, dict):
                if not all(isinstance(k, str) for k in item):
                    return False
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        else:
            return False
    return True


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
