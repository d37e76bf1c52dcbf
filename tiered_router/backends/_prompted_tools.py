"""Tools for servers without native tool calling: a text protocol and its tolerant parser.

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

Models do not always follow it, so :func:`split_tool_calls` reads the common formats too:

- ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes / Qwen style; a
  missing closing tag at the very end is tolerated, ``"parameters"`` is read as
  ``"arguments"``, arguments may be a JSON string);
- a reply that is only a JSON object or a list of them, ``{"name", "arguments"}`` or
  OpenAI's ``{"type": "function", "function": {...}}`` or ``{"tool_calls": [...]}``, bare
  or inside a fenced code block;
- Python-style calls ``[get_weather(city="Paris"), get_time(tz="CET")]`` or a bare
  ``get_weather(city="Paris")`` (positional arguments map onto the schema's properties in
  order).

Untagged JSON and Python-style calls count only when they name a declared tool (so a JSON
answer such as ``{"name": "Ada"}`` is never mistaken for a call). A tagged call is read
whatever it names: the gate's ``tool_arguments`` check then rejects an unknown tool, and a
tagged call whose arguments do not parse keeps them verbatim so the gate says why. What
cannot be read at all stays in the text, where ``tool_call_in_text`` catches it.

Everything here is pure: no I/O, no clock, no randomness. The gate may import
:func:`parse_text_tool_calls`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tiered_router.turn import ToolCall, ToolSpec

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "parse_text_tool_calls",
    "render_tool_call",
    "render_tool_prompt",
    "render_tool_result",
    "split_tool_calls",
]

TOOL_CALL_OPEN = "<tool_call>"
"""Opening tag of a call in the text protocol."""
TOOL_CALL_CLOSE = "</tool_call>"
"""Closing tag of a call in the text protocol."""

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)
_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"'\n]{1,200})["']""")
_ARGS = re.compile(r"""["'](?:arguments|parameters)["']\s*:\s*(.*)\}\s*\Z""", re.DOTALL)
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_MAX_DESCRIPTION = 300

ToolsLike = Iterable[ToolSpec | Mapping[str, Any] | str] | None


def _specs(tools: ToolsLike) -> dict[str, ToolSpec]:
    out: dict[str, ToolSpec] = {}
    for tool in tools or ():
        if isinstance(tool, str):
            spec = ToolSpec(name=tool)
        elif isinstance(tool, ToolSpec):
            spec = tool
        else:
            spec = ToolSpec.from_openai(tool)
        out[spec.name] = spec
    return out


# -- rendering ---------------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def render_tool_prompt(
    tools: ToolsLike, *, tool_choice: Any = None, parallel_tool_calls: bool | None = None
) -> str:
    """Return the system-prompt block that describes ``tools`` and the call protocol.

    Args:
        tools: The declared tools (specs, OpenAI tool dicts or names).
        tool_choice: OpenAI's ``tool_choice``: ``"required"`` and a named function become
            an instruction; ``"auto"`` and ``None`` add nothing.
        parallel_tool_calls: ``False`` asks for at most one call.

    Returns:
        The block, without a trailing newline.
    """
    specs = _specs(tools)
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
    if tool_choice == "required":
        lines.append("You must call at least one tool now.")
    elif isinstance(tool_choice, Mapping):
        name = (tool_choice.get("function") or {}).get("name")
        if isinstance(name, str):
            lines.append(f"You must call the tool {name} now.")
    if parallel_tool_calls is False:
        lines.append("Call at most one tool per reply.")
    return "\n".join(lines)


def render_tool_call(name: str, arguments: str | Mapping[str, Any] | None) -> str:
    """Return one call in the protocol's text form (used for tool calls in the history)."""
    if isinstance(arguments, Mapping):
        args: Any = dict(arguments)
    else:
        text = arguments or "{}"
        try:
            args = json.loads(text)
        except ValueError:
            args = text  # kept verbatim: the history shows what the model really wrote
    return TOOL_CALL_OPEN + json.dumps({"name": name, "arguments": args}) + TOOL_CALL_CLOSE


def render_tool_result(content: str, *, name: str | None = None, call_id: str | None = None) -> str:
    """Return one tool result in the protocol's text form."""
    attrs = "".join(
        f' {key}="{value}"' for key, value in (("name", name), ("id", call_id)) if value
    )
    return f"<tool_result{attrs}>{content}</tool_result>"


# -- parsing -----------------------------------------------------------------------------------


def _loads(text: str) -> Any:
    """JSON, or failing that a Python literal (single quotes, ``True``); raises ValueError."""
    try:
        return json.loads(text)
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


def _from_object(obj: Any) -> tuple[str, str] | None:
    """``(name, arguments)`` of one call object in any of the JSON shapes, else ``None``."""
    if not isinstance(obj, Mapping):
        return None
    fn = obj.get("function")
    if isinstance(fn, Mapping):
        obj = fn
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters"))
    return name, _arguments_text(args)


def _call_objects(value: Any, *, need_arguments: bool = True) -> list[tuple[str, str]] | None:
    """Calls in a parsed JSON value that is only calls; ``None`` when it is anything else.

    Untagged JSON needs an ``arguments`` (or ``parameters``) key to count as a call; inside
    a ``<tool_call>`` tag the name alone is enough.
    """
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    if not items:
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
        call = _from_object(item)
        if call is None:
            return None
        calls.append(call)
    return calls


def _tagged(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Calls in ``<tool_call>`` tags, and the text around them; ``None`` without tags."""
    if TOOL_CALL_OPEN not in text:
        return None
    calls: list[tuple[str, str]] = []
    for match in _TAGGED.finditer(text):
        body = match.group(1).strip()
        fenced = _FENCE.fullmatch(body)
        if fenced:
            body = fenced.group(2).strip()
        try:
            found = _call_objects(_loads(body), need_arguments=False)
        except ValueError:
            found = None
        if found is None:
            name = _NAME.search(body)
            if name is None:
                return None  # unreadable: leave the whole text to the gate
            args = _ARGS.search(body)
            # the arguments as written, so that tool_arguments reports why they fail
            found = [(name.group(1), args.group(1).strip() if args else body)]
        calls.extend(found)
    rest = _TAGGED.sub("", text).strip()
    return rest, calls


def _python_value(node: ast.expr) -> Any:
    return ast.literal_eval(node)


def _python_calls(text: str, specs: Mapping[str, ToolSpec]) -> list[tuple[str, str]] | None:
    """``[f(a=1), g(b="x")]`` or ``f(a="x")`` naming declared tools; ``None`` otherwise."""
    source = text.strip()
    if not source or "(" not in source:
        return None
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    body = tree.body
    nodes = list(body.elts) if isinstance(body, (ast.List, ast.Tuple)) else [body]
    calls: list[tuple[str, str]] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            return None
        parts.insert(0, func.id)
        # functions.get_weather(...) and get_weather(...) both name get_weather
        name = next(
            (n for n in ("_".join(parts[i:]) for i in range(len(parts))) if n in specs), None
        )
        if name is None:
            return None
        try:
            args: dict[str, Any] = {}
            props = list((specs[name].parameters.get("properties") or {}).keys())
            if len(node.args) > len(props):
                return None
            for key, arg in zip(props, node.args, strict=False):
                args[key] = _python_value(arg)
            for kw in node.keywords:
                if kw.arg is None:
                    return None
                args[kw.arg] = _python_value(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        calls.append((name, json.dumps(args, ensure_ascii=False)))
    return calls


def _untagged(text: str, specs: Mapping[str, ToolSpec]) -> list[tuple[str, str]] | None:
    """Calls in a reply that is only JSON calls or Python-style calls (maybe fenced)."""
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced:
        body = fenced.group(2).strip()
    if body[:1] in "[{":
        try:
            calls = _call_objects(_loads(body))
        except ValueError:
            calls = None
        if calls is not None and all(name in specs for name, _ in calls):
            return calls
    return _python_calls(body, specs)


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
    specs = _specs(tools)
    if not text or not specs:
        return text, []
    found: list[tuple[str, str]] | None
    rest = ""
    tagged = _tagged(text)
    if tagged is not None:
        rest, found = tagged
    else:
        found = _untagged(text, specs)
    if not found:
        return text, []
    calls = [
        ToolCall(id=f"{id_prefix}{i}", name=name, arguments=args)
        for i, (name, args) in enumerate(found)
    ]
    return rest, calls


def parse_text_tool_calls(
    text: str, tools: Sequence[ToolSpec | Mapping[str, Any] | str] | None
) -> list[ToolCall]:
    """Return the tool calls written in ``text`` in any of the formats the module reads.

    Pure and deterministic (ids are ``call_0``, ``call_1``, ...). A reply with no
    readable call gives ``[]``.

    Example:
        ```python
        calls = parse_text_tool_calls('[get_weather(city="Paris")]', [weather_spec])
        calls[0].name, calls[0].arguments     # ("get_weather", '{"city": "Paris"}')
        ```
    """
    return split_tool_calls(text, tools)[1]
