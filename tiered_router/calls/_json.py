"""Tool calls written as JSON, read into ``(name, arguments)`` pairs: the format's one grammar.

The shapes read:

- ``{"name": ..., "arguments": {...}}`` (``parameters`` for ``arguments`` too; arguments given
  as a JSON string of an object), and ``{"tool_name": ..., "parameters": ...}`` (Command R);
- ``{"type": "function", "function": {"name": ..., "arguments": ...}}`` (OpenAI's shape);
- a list of those, ``{"tool_calls": [...]}``, or one object per line;
- ``name{...}`` and ``name[ARGS]{...}`` (Mistral, tokenizer v11 and later), by
  :func:`named_json_calls`.

An object counts as a call only when its keys are a call's keys (``name``, ``arguments``,
``id``, ``type``, ...); outside a ``<tool_call>`` tag it also needs its ``arguments`` (or
``parameters``) key, so a JSON answer such as ``{"name": "Ada"}`` is not read as a call.
Arguments must be a JSON object: a call whose arguments are anything else is not read.

One entry point per policy, sharing this grammar: strict (JSON only) and ``tolerant`` (a
Python literal is read too: single quotes, ``True``), which the prompted-tools reader uses.
Pure: no I/O.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from tiered_router import _limits
from tiered_router.calls._python import has_comment

__all__ = ["call_items", "json_calls", "named_json_calls"]

Calls = list[tuple[str, dict[str, Any]]]

_CALL_KEYS = frozenset({"name", "tool_name", "arguments", "parameters", "id", "type", "index"})
_ARGUMENT_KEYS = frozenset({"arguments", "parameters"})
# Mistral's tokenizer v11 and later: name{...}, name[ARGS]{...} (after [TOOL_CALLS])
_NAMED_JSON = re.compile(
    r"\A([A-Za-z_][\w.\-]*)\s*(?:\[CALL_ID\]\s*\w+\s*)?(?:\[ARGS\])?\s*(\{.*\})\Z", re.DOTALL
)


def _loads(text: str, *, tolerant: bool) -> Any:
    """JSON; with ``tolerant``, a Python literal failing that. Raises ValueError."""
    try:
        return _limits.loads(text)
    except ValueError:
        if not tolerant or has_comment(text):  # a comment is prose, not a call
            raise
    try:
        value = ast.literal_eval(text)
        _limits.check_depth(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(str(exc)) from None
    return value


def call_items(value: Any) -> list[Any] | None:
    """The items of a JSON value that holds calls; ``None`` for an empty list.

    A list, ``{"tool_calls": [...]}``, or one object.
    """
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    return items or None


def _arguments(raw: Any, *, tolerant: bool) -> dict[str, Any] | None:
    """Arguments as an object (a JSON string of one is read), else ``None``."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = _loads(raw, tolerant=tolerant) if raw.strip() else {}
        except ValueError:
            return None
    return raw if isinstance(raw, dict) and all(isinstance(k, str) for k in raw) else None


def _call(item: Any, *, tagged: bool, tolerant: bool) -> tuple[str, dict[str, Any]] | None:
    """One call object, in any of its shapes; ``None`` when it is not one."""
    if not isinstance(item, Mapping):
        return None
    keys = set(item)
    if isinstance(item.get("function"), Mapping):
        if not keys <= {"function", "id", "type", "index"}:
            return None
        item = item["function"]
        keys = set(item)
    if not keys <= _CALL_KEYS or (not tagged and not keys & _ARGUMENT_KEYS):
        return None
    name = item.get("name", item.get("tool_name"))
    if not isinstance(name, str) or not name:
        return None
    args = _arguments(item.get("arguments", item.get("parameters")), tolerant=tolerant)
    return None if args is None else (name, args)


def json_calls(piece: str, *, tagged: bool = False, tolerant: bool = False) -> Calls | None:
    """Read ``piece`` as JSON calls; ``None`` unless it is calls and nothing else.

    Args:
        piece: The text (wrappers already taken off).
        tagged: The piece is the body of a call tag (``<tool_call>``): a name alone is a call.
        tolerant: Read a Python literal where JSON does not parse.

    Returns:
        ``[(name as written, arguments), ...]``, or ``None``.
    """
    try:
        data = _loads(piece, tolerant=tolerant)
    except ValueError:
        # one call object per line (several <tool_call> bodies written without tags)
        lines = [ln.strip() for ln in piece.splitlines() if ln.strip()]
        if len(lines) < 2:
            return None
        out: Calls = []
        for line in lines:
            found = json_calls(line, tagged=tagged, tolerant=tolerant)
            if not found:
                return None
            out.extend(found)
        return out
    items = call_items(data)
    if items is None:
        return None
    calls = []
    for item in items:
        call = _call(item, tagged=tagged, tolerant=tolerant)
        if call is None:
            return None
        calls.append(call)
    return calls


def named_json_calls(piece: str) -> Calls | None:
    """A name followed by its JSON arguments (``add{"a": 1}``, ``add[ARGS]{"a": 1}``)."""
    if "{" not in piece:
        return None
    found = _NAMED_JSON.match(piece.strip())
    if found is None:
        return None
    try:
        args = _limits.loads(found.group(2))
    except ValueError:
        return None
    return [(found.group(1), args)] if isinstance(args, dict) else None
