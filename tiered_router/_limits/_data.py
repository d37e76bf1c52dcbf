"""Limits on JSON and numbers from outside: a caller's body, an upstream answer, model text.

Python's JSON parser recurses: a document nested ~1,000 deep raises ``RecursionError`` (not a
``ValueError``), and one nested a little less parses but breaks the next recursive walk over
it (``json.dumps``, schema validation). :func:`loads` turns both into :class:`JSONTooDeep`, a
``ValueError``, so every caller's "unreadable JSON" branch handles them. The depth check costs
nothing on ordinary documents: one with fewer brackets than the limit cannot nest deeper.

What the router reads from model text is bounded the same way: :func:`read_int` and
:func:`read_float` read a number only when it has at most :data:`MAX_NUMBER_DIGITS` digits and
is finite, and :func:`bounded` says whether a value read from text is JSON data within the
limits. A value that is not is left unread, so the gate fails the draft.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NUMBER_DIGITS",
    "JSONTooDeep",
    "bounded",
    "brackets",
    "check_depth",
    "kind",
    "loads",
    "read_float",
    "read_int",
]

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted (OpenAI's own limit on schemas is 5-10)."""
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
