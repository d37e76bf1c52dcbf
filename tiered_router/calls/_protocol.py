"""Tools for servers without native tool calling: the text protocol they are prompted with.

A server that refuses ``tools`` (dlmserve, most small diffusion servers) can still take an
agent's tool turns when the tools are described in the system prompt and the calls are read
back from the reply. The protocol is compact and documented (``docs/backends.md``):

```text
# Tools
You may call these tools. Each line: name, JSON Schema of its arguments, description.
- get_weather {"type":"object","properties":{"city":{"type":"string"}}}: Current weather.
To call a tool, reply with one line per call and nothing else:
<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
Tool results come back as <tool_result name="..." id="...">...</tool_result>.
To answer without a tool, reply with plain text and no <tool_call> tag.
```

Replies are read back by :func:`tiered_router.calls._prompted.split_tool_calls`, under the
lifting rules of :mod:`tiered_router.calls._text`.

The history is written so that nothing in it can pass for the protocol's own markup: a tool
result's text and its ``name`` / ``id`` attributes are escaped as XML text (``&``, ``<``,
``>``, and ``"`` in attributes), and a call's JSON escapes ``<``, ``>`` and ``&`` as
``\u003c``, ``\u003e``, ``\u0026`` (still the same JSON). A result holding
``</tool_result><tool_call>...`` stays inside its own element.

Everything here is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tiered_router import _limits
from tiered_router.calls._choice import allowed_names, requires_call
from tiered_router.calls._text import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolsLike, tool_specs

__all__ = ["render_tool_call", "render_tool_prompt", "render_tool_result"]

_MAX_DESCRIPTION = 300


# -- rendering ---------------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def render_tool_prompt(
    tools: ToolsLike, *, tool_choice: Any = None, parallel_tool_calls: bool | None = None
) -> str:
    """Return the system-prompt block that describes ``tools`` and the call protocol.

    Args:
        tools: The declared tools (specs, OpenAI tool dicts or names).
        tool_choice: OpenAI's ``tool_choice``: ``"required"``, a named function and an
            ``allowed_tools`` set become an instruction; ``"auto"`` and ``None`` add nothing.
        parallel_tool_calls: ``False`` asks for at most one call.

    Returns:
        The block, without a trailing newline.
    """
    specs = tool_specs(tools)
    lines = [
        "# Tools",
        "You may call these tools. Each line: name, JSON Schema of its arguments, description.",
    ]
    for spec in specs.values():
        schema = _compact(dict(spec.parameters) or {"type": "object", "properties": {}})
        desc = " ".join(spec.description.split())[:_MAX_DESCRIPTION]
        lines.append(f"- {spec.name} {schema}" + (f": {desc}" if desc else ""))
    lines += [
        "To call a tool, reply with one line per call and nothing else:",
        TOOL_CALL_OPEN + '{"name": "TOOL_NAME", "arguments": {...}}' + TOOL_CALL_CLOSE,
        'Tool results come back as <tool_result name="..." id="...">...</tool_result>.',
        f"To answer without a tool, reply with plain text and no {TOOL_CALL_OPEN} tag.",
    ]
    allowed = allowed_names(tool_choice)
    if tool_choice == "required":
        lines.append("You must call at least one tool now.")
    elif isinstance(tool_choice, Mapping) and tool_choice.get("type") == "allowed_tools":
        lines.append(f"Call only these tools: {', '.join(sorted(allowed or ())) or 'none'}.")
        if requires_call(tool_choice):
            lines.append("You must call at least one of them now.")
    elif allowed:
        lines.append(f"You must call the tool {next(iter(allowed))} now.")
    if parallel_tool_calls is False:
        lines.append("Call at most one tool per reply.")
    return "\n".join(lines)


_XML_TEXT = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_XML_ATTRIBUTE = (*_XML_TEXT, ('"', "&quot;"))
_JSON_MARKUP = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))


def _escaped(text: str, table: tuple[tuple[str, str], ...]) -> str:
    # str.replace per character: ~4x faster than str.translate with a dict on long results
    for char, escape in table:
        if char in text:
            text = text.replace(char, escape)
    return text


def render_tool_call(name: str, arguments: str | Mapping[str, Any] | None) -> str:
    """Return one call in the protocol's text form (used for tool calls in the history).

    The JSON escapes ``<``, ``>`` and ``&``, so no name or argument can close the tag.
    """
    if isinstance(arguments, Mapping):
        args: Any = dict(arguments)
    else:
        text = arguments or "{}"
        try:
            args = _limits.loads(text)
        except ValueError:
            args = text  # kept verbatim: the history shows what the model really wrote
    body = _escaped(json.dumps({"name": name, "arguments": args}), _JSON_MARKUP)
    return TOOL_CALL_OPEN + body + TOOL_CALL_CLOSE


def render_tool_result(content: str, *, name: str | None = None, call_id: str | None = None) -> str:
    """Return one tool result in the protocol's text form, its text and attributes escaped."""
    attrs = "".join(
        f' {key}="{_escaped(value, _XML_ATTRIBUTE)}"'
        for key, value in (("name", name), ("id", call_id))
        if value
    )
    return f"<tool_result{attrs}>{_escaped(content, _XML_TEXT)}</tool_result>"
