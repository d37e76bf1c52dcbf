"""Size and depth limits on JSON that comes from outside (client bodies, upstream answers).

Python's JSON parser recurses: a document nested ~1,000 deep raises ``RecursionError`` (not a
``ValueError``), and one nested a little less parses but breaks the next recursive walk over
it (``json.dumps``, schema validation). :func:`loads` turns both into :class:`JSONTooDeep`, a
``ValueError``, so every caller's "unreadable JSON" branch handles them.

The depth check costs nothing on ordinary documents: a document with fewer brackets than the
limit cannot be nested deeper than it, and only documents with more are walked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JSONTooDeep", "brackets", "check_depth", "loads"]

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted (OpenAI's own limit on schemas is 5-10)."""


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
