"""Tool calls read back from a prompted-tools reply: the tolerant reader.

Servers without native tool calling get the tools in the prompt (the prompted-tools dialect,
:mod:`tiered_router.calls._protocol`) and answer with calls written as text.
:func:`split_tool_calls` reads such a reply as far as it can be read, with the formats and
shared pieces of :mod:`tiered_router.calls._text`:

- tagged calls (``<tool_call>...</tool_call>``) are taken whatever they name (the gate's
  ``tool_arguments`` then rejects an unknown tool), and a tagged call whose arguments do not
  parse keeps them verbatim so the gate says why; text around tags is kept;
- untagged JSON and Python-style calls count only when they name declared tools.

:func:`read_tool_calls` returns just the calls. The gate's strict reader
(:func:`tiered_router.calls._text.parse_text_tool_calls`) instead reads a whole answer as
calls or not at all. Everything here is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from tiered_router import _limits
from tiered_router.calls._python import python_calls
from tiered_router.calls._text import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ToolsLike,
    _call_items,
    _call_object,
    _resolved,
    _unfenced,
    tool_specs,
)
from tiered_router.turn import ToolCall, ToolSpec

__all__ = ["read_tool_calls", "split_tool_calls"]

_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"'\n]{1,200})["']""")
_ARGS_KEY = re.compile(r"""["'](?:arguments|parameters)["']\s*:\s*""")
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})


def split_tool_calls(
    text: str, tools: ToolsLike, *, id_prefix: str = "call_"
) -> tuple[str, list[ToolCall]]:
    """Read the tool calls written in a reply; return the remaining text and the calls.

    Args:
        text: The model's reply.
        tools: The declared tools (specs, OpenAI tool dicts or names).
        id_prefix: Call ids are ``id_prefix`` followed by the call's index; pass a prefix
            unique to the reply so that ids do not repeat across an agent's turns.

    Returns:
        ``(text, calls)``: with calls found, the text around them (``""`` when the reply
        was only calls); without, ``text`` unchanged and ``[]``.
    """
    specs = tool_specs(tools)
    if not text or not specs:
        return text, []
    found: list[tuple[str, str]] | None
    rest = ""
    tagged = _tolerant_tagged(text)
    if tagged is not None:
        rest, found = tagged
    else:
        found = _tolerant_untagged(text, specs)
    if not found:
        return text, []
    calls = [
        ToolCall(id=f"{id_prefix}{i}", name=name, arguments=args)
        for i, (name, args) in enumerate(found)
    ]
    return rest, calls


def read_tool_calls(text: str, tools: ToolsLike) -> list[ToolCall]:
    """Return the tool calls :func:`split_tool_calls` reads in ``text`` (ids ``call_0``...).

    A reply with no readable call gives ``[]``.
    """
    return split_tool_calls(text, tools)[1]


def _loads(text: str) -> Any:
    """JSON, or failing that a Python literal (single quotes, ``True``); raises ValueError."""
    try:
        return _limits.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def _arguments_text(value: Any) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value  # already JSON text (maybe invalid: the gate says so)
    return json.dumps(value, ensure_ascii=False)


def _tolerant_objects(value: Any, *, need_arguments: bool) -> list[tuple[str, str]] | None:
    """Calls in a parsed JSON value that is only calls; ``None`` when it is anything else.

    Untagged JSON needs an ``arguments`` (or ``parameters``) key to count as a call; inside
    a ``<tool_call>`` tag the name alone is enough.
    """
    items = _call_items(value)
    if items is None:
        return None
    calls: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, Mapping):
            return None
        keys = set(item)
        if "function" in keys and isinstance(item["function"], Mapping):
            keys = (keys - {"function"}) | set(item["function"])
        if not keys <= _CALL_KEYS or (need_arguments and not {"arguments", "parameters"} & keys):
            return None
        call = _call_object(item)
        if call is None:
            return None
        calls.append((call[0], _arguments_text(call[1])))
    return calls


def _tolerant_tagged(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Calls in ``<tool_call>`` tags, and the text around them; ``None`` without tags."""
    if TOOL_CALL_OPEN not in text:
        return None
    bodies, rest = _open_tag_bodies(text)
    calls: list[tuple[str, str]] = []
    for inner in bodies:
        body = _unfenced(inner)
        try:
            found = _tolerant_objects(_loads(body), need_arguments=False)
        except ValueError:
            found = None
        if found is None:
            name = _NAME.search(body)
            if name is None:
                return None  # unreadable: leave the whole text to the gate
            args = _written_arguments(body)
            # the arguments as written, so that tool_arguments reports why they fail
            found = [(name.group(1), args.strip() if args is not None else body)]
        calls.extend(found)
    return rest, calls


def _open_tag_bodies(text: str) -> tuple[list[str], str]:
    """The bodies of ``<tool_call>`` tags (the last may be left open) and the text around.

    One pass over the text, so linear in its length.
    """
    bodies: list[str] = []
    rest: list[str] = []
    pos = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start < 0:
            rest.append(text[pos:])
            break
        rest.append(text[pos:start])
        inner = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, inner)
        if end < 0:
            bodies.append(text[inner:].strip())
            break
        bodies.append(text[inner:end].strip())
        pos = end + len(TOOL_CALL_CLOSE)
    return bodies, "".join(rest).strip()


def _written_arguments(body: str) -> str | None:
    """What follows the first ``"arguments":`` up to the body's closing brace, as written."""
    tail = body.rstrip()
    if not tail.endswith("}"):
        return None
    key = _ARGS_KEY.search(tail)
    return tail[key.end() : -1] if key is not None else None


def _tolerant_untagged(text: str, specs: Mapping[str, ToolSpec]) -> list[tuple[str, str]] | None:
    """Calls in a reply that is only JSON calls or Python-style calls (maybe fenced)."""
    body = _unfenced(text.strip())
    if body[:1] in "[{":
        try:
            calls = _tolerant_objects(_loads(body), need_arguments=True)
        except ValueError:
            calls = None
        if calls is not None and all(name in specs for name, _ in calls):
            return calls
    written = python_calls(body, literal_only=True)
    resolved = _resolved(written, specs) if written else None
    if not resolved:
        return None
    return [(name, json.dumps(args, ensure_ascii=False)) for name, args in resolved]
