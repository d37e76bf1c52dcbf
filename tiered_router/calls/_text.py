"""Tool calls written as text, read back into :class:`ToolCall` objects: one reader, two uses.

Models without native tool calling (or served without a tool parser) write their calls in
text. One reader here knows the common formats:

- Python call syntax: ``[get_weather(city='Paris'), get_time(tz="CET")]`` (BFCL, Llama 3
  prompt style), a bare ``get_weather(city="Paris")``, several calls one per line,
  ``functions.get_weather(...)``, Python keywords as argument names (``from=1``), JSON's
  ``true`` / ``false`` / ``null``, positional arguments in the order the tool declares them;
- JSON: ``{"name": ..., "arguments": {...}}`` (``parameters`` for ``arguments`` too, and
  arguments given as a JSON string), a list of those, ``{"tool_calls": [...]}``,
  ``{"function": {"name": ..., "arguments": ...}}``, one object per line;
- either of the above inside ``<tool_call>...</tool_call>`` tags (Hermes, Qwen; the text
  protocol of the prompted-tools dialect), ``<|python_tag|>`` (Llama 3.1), ``[TOOL_CALLS]``
  (Mistral) or a Markdown code fence;
- ``[TOOL_CALLS]name{...}`` and ``[TOOL_CALLS]name[ARGS]{...}`` (Mistral, tokenizer v11
  and later), ``functools[...]`` (Phi-4-mini), ``Action:`` before a fenced JSON list whose
  objects name the tool as ``tool_name`` (Command R), ``<seed:tool_call>`` tags (Seed-OSS);
  strict reader only;
- XML-style tags (strict reader only; :mod:`tiered_router.calls._xml`):
  ``<function=f><parameter=x>1</parameter></function>`` (Qwen3-Coder),
  ``<function=f>{"x": 1}</function>`` (Llama 3.1 user-defined tools),
  ``<invoke name="f"><parameter name="x">1</parameter></invoke>`` (Claude's XML tool use),
  ``f<arg_key>x</arg_key><arg_value>1</arg_value>`` (GLM-4.5), values typed by the schema.

Two entry points apply it with different policies:

- :func:`parse_text_tool_calls` (strict, for the gate): the whole text, wrappers aside, must
  be calls to declared tools with JSON-object arguments, or the answer is ``None``; prose
  that mentions a call is left to ``tool_call_in_text``. :func:`lift_text_tool_calls`
  applies it to a draft.
- :func:`tiered_router.calls._prompted.split_tool_calls` (tolerant, for the prompted-tools
  dialect of the backends): a reply is read as far as it can be, with the shared pieces
  below (tool specs, names, fences, JSON call objects).

Everything here is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tiered_router import _limits
from tiered_router.calls._python import POSITIONAL, python_calls
from tiered_router.calls._xml import xml_calls
from tiered_router.turn import Completion, ToolCall, ToolSpec, Turn

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ToolsLike",
    "lift_text_tool_calls",
    "parse_text_tool_calls",
    "tool_specs",
]

TOOL_CALL_OPEN = "<tool_call>"
"""Opening tag of a call in the prompted-tools text protocol."""
TOOL_CALL_CLOSE = "</tool_call>"
"""Closing tag of a call in the prompted-tools text protocol."""

ToolsLike = Iterable[ToolSpec | Mapping[str, Any] | str] | None

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n?```", re.DOTALL)
_TAG_OPEN = re.compile(r"<(tool_call|function_call|tool_calls|seed:tool_call)>")
_TAG_CLOSES = ("</tool_call>", "</function_call>", "</tool_calls>", "</seed:tool_call>")
_SPACE = re.compile(r"\s*")
_PREFIXES = ("<|python_tag|>", "[TOOL_CALLS]", "<tool_call>", "<|tool_call|>", "functools")
_MISTRAL = "[TOOL_CALLS]"
# Mistral's tokenizer v11 and later: [TOOL_CALLS]name{...}, [TOOL_CALLS]name[ARGS]{...}
_NAMED_JSON = re.compile(
    r"\A([A-Za-z_][\w.\-]*)\s*(?:\[CALL_ID\]\s*\w+\s*)?(?:\[ARGS\])?\s*(\{.*\})\Z", re.DOTALL
)
_ACTION = re.compile(r"\AAction:\s*")  # Command R: Action: ```json [...] ```


# -- shared: tools, names, fences --------------------------------------------------------------


def tool_specs(tools: ToolsLike) -> dict[str, ToolSpec]:
    """Declared tools by name (a bare name is a tool without a schema)."""
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


def _spellings(specs: Mapping[str, ToolSpec]) -> dict[str, str]:
    return {name.replace(".", "_"): name for name in specs}


def _declared_name(written: str, spellings: Mapping[str, str]) -> str | None:
    """The declared tool a written name means (``a.b`` for ``a_b``, ``functions.`` dropped)."""
    key = written.replace(".", "_")
    name = spellings.get(key)
    if name is None and key.startswith("functions_"):  # OpenAI's "functions." namespace
        name = spellings.get(key[len("functions_") :])
    return name


def _unfenced(body: str) -> str:
    fenced = _FENCE.fullmatch(body)
    return fenced.group(2).strip() if fenced else body


def _place(args: dict[str, Any], spec: ToolSpec) -> dict[str, Any] | None:
    """Give positional arguments the names of the tool's parameters, in declared order."""
    if POSITIONAL not in args:
        return args
    args = dict(args)
    positional = args.pop(POSITIONAL)
    props = spec.parameters.get("properties")
    if not isinstance(props, Mapping) or len(positional) > len(props):
        return None
    for name, value in zip(props, positional, strict=False):
        if name in args:
            return None
        args[name] = value
    return args


def _resolved(
    written: Sequence[tuple[str, dict[str, Any]]], specs: Mapping[str, ToolSpec]
) -> list[tuple[str, dict[str, Any]]] | None:
    """Each call's declared tool and its arguments, positional ones named.

    ``None`` when a call names no declared tool, or its positional arguments do not fit.
    """
    spellings = _spellings(specs)
    out = []
    for name_written, args in written:
        name = _declared_name(name_written, spellings)
        placed = _place(args, specs[name]) if name is not None else None
        if name is None or placed is None:
            return None
        out.append((name, placed))
    return out


# -- shared: JSON call objects -----------------------------------------------------------------


def _call_object(item: Any) -> tuple[str, Any] | None:
    """``(name, arguments as written)`` of one JSON call object, in any of its shapes."""
    if not isinstance(item, Mapping):
        return None
    if isinstance(item.get("function"), Mapping):
        item = item["function"]
    name = item.get("name", item.get("tool_name"))  # tool_name: Command R
    if not isinstance(name, str) or not name:
        return None
    return name, item.get("arguments", item.get("parameters"))


def _call_items(value: Any) -> list[Any] | None:
    """The items of a JSON value that holds calls; ``None`` for an empty list.

    A list, ``{"tool_calls": [...]}``, or one object.
    """
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    return items or None


def _json_arguments(raw: Any) -> dict[str, Any] | None:
    """Arguments as a JSON object (a JSON string of one is read), else ``None``."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = _limits.loads(raw) if raw.strip() else {}
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


# -- strict: the gate ------------------------------------------------------------------------


def parse_text_tool_calls(
    text: str, tools: Sequence[ToolSpec | Mapping[str, Any] | str]
) -> tuple[ToolCall, ...] | None:
    """Read ``text`` as tool calls to the declared ``tools``, or return ``None``.

    Args:
        text: A draft's text.
        tools: The declared tools (``ToolSpec``, OpenAI tool dicts, or names).

    Returns:
        The calls, with JSON-object arguments and ids ``text_call_0``, ... when the whole
        text (wrappers, whitespace and a leading ``<think>...</think>`` block aside) is
        calls to declared tools; ``None`` when it is anything else, including a call to a
        tool that was not declared.

    Example:
        ```python
        calls = parse_text_tool_calls('[get_weather(city="Paris")]', ["get_weather"])
        calls[0].name, calls[0].arguments     # ("get_weather", '{"city": "Paris"}')
        ```
    """
    return _answer_calls(_after_thinking(text)[1], tools)


def _answer_calls(
    answer: str, tools: Sequence[ToolSpec | Mapping[str, Any] | str]
) -> tuple[ToolCall, ...] | None:
    """:func:`parse_text_tool_calls` of the text after any leading thinking block."""
    body = answer.strip()
    if not body or not tools or ("(" not in body and "{" not in body and "<" not in body):
        return None
    specs = tool_specs(tools)
    spellings = _spellings(specs)

    def properties(written: str) -> Mapping[str, Any] | None:
        name = _declared_name(written, spellings)
        props = specs[name].parameters.get("properties") if name is not None else None
        return props if isinstance(props, Mapping) else None

    calls: list[tuple[str, dict[str, Any]]] = []
    for piece in _strict_pieces(body):
        found = _strict_json(piece) if piece[:1] in "[{" else _named_json(piece)
        if found is None:
            found = xml_calls(piece, properties)
        if found is None:
            found = python_calls(piece)
        if not found:
            return None
        calls.extend(found)
    resolved = _resolved(calls, specs)
    if resolved is None:
        return None
    return tuple(
        ToolCall(id=f"text_call_{i}", name=name, arguments=json.dumps(args))
        for i, (name, args) in enumerate(resolved)
    )


def lift_text_tool_calls(completion: Completion, turn: Turn) -> Completion:
    """Return ``completion`` with the calls its text holds as real tool calls.

    A draft that made no call, for a turn that declares tools (and whose ``tool_choice`` is
    not ``"none"``), whose whole text is calls to declared tools (see
    :func:`parse_text_tool_calls`) comes back with those calls and no text; a leading
    ``<think>...</think>`` block becomes its ``reasoning`` (unless it has one). Any other
    draft comes back unchanged.
    """
    if completion.tool_calls or not turn.tools or not completion.text:
        return completion
    if turn.params.get("tool_choice") == "none":
        return completion
    thinking, answer = _after_thinking(completion.text)
    calls = _answer_calls(answer, turn.tools)
    if not calls:
        return completion
    return replace(
        completion,
        text="",
        tool_calls=calls,
        finish_reason="tool_calls",
        reasoning=completion.reasoning if completion.reasoning is not None else thinking,
    )


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _after_thinking(text: str) -> tuple[str | None, str]:
    """Split a leading ``<think>...</think>`` block off: ``(its text or None, the rest)``.

    Reasoning models served without a reasoning parser (Qwen3, DeepSeek-R1, GLM-4.5) write
    their thinking before the answer in these tags.
    """
    stripped = text.lstrip()
    if not stripped.startswith(_THINK_OPEN):
        return None, text
    end = stripped.find(_THINK_CLOSE)
    if end < 0:
        return None, text
    return stripped[len(_THINK_OPEN) : end].strip(), stripped[end + len(_THINK_CLOSE) :]


def _strict_pieces(body: str) -> list[str]:
    """Strip fences and wrappers; return the pieces that each hold one or more calls."""
    action = _ACTION.match(body)
    if action is not None:
        body = body[action.end() :]
    body = _unfenced(body)
    tagged = _tag_bodies(body)
    if tagged is not None:
        return tagged
    if any(close in body for close in _TAG_CLOSES):
        return [body]  # tags with text outside them: not a pure call
    if body.startswith(_MISTRAL) and body[len(_MISTRAL) :].lstrip()[:1] not in ("[", "{"):
        return [p.strip() for p in body.split(_MISTRAL)[1:]]  # name{...} after each marker
    for prefix in _PREFIXES:
        if body.startswith(prefix):
            rest = body[len(prefix) :].strip()
            if prefix != "functools" or rest.startswith("["):  # Phi-4-mini: functools[...]
                body = rest
    return [body]


def _named_json(piece: str) -> list[tuple[str, dict[str, Any]]] | None:
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


def _tag_bodies(body: str) -> list[str] | None:
    """The bodies of the tags ``body`` is made of (whitespace between them aside), else ``None``.

    Read left to right once, so the cost is linear in the text's length whatever it holds
    (a regex over many unclosed tags would rescan the rest of the text from each one).
    """
    out: list[str] = []
    pos = _skip_space(body, 0)
    while pos < len(body):
        opening = _TAG_OPEN.match(body, pos)
        if opening is None:
            return None
        closing = f"</{opening.group(1)}>"
        end = body.find(closing, opening.end())
        if end < 0:
            return None
        out.append(body[opening.end() : end].strip())
        pos = _skip_space(body, end + len(closing))
    return out or None


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches


def _strict_json(piece: str) -> list[tuple[str, dict[str, Any]]] | None:
    try:
        data = _limits.loads(piece)
    except ValueError:
        # one JSON object per line (several <tool_call> bodies written without tags)
        lines = [ln for ln in piece.splitlines() if ln.strip()]
        if len(lines) < 2:
            return None
        out: list[tuple[str, dict[str, Any]]] = []
        for line in lines:
            found = _strict_json(line.strip())
            if not found:
                return None
            out.extend(found)
        return out
    items = _call_items(data)
    if items is None:
        return None
    out = []
    for item in items:
        call = _call_object(item)
        args = _json_arguments(call[1]) if call is not None else None
        if call is None or args is None:
            return None
        out.append((call[0], args))
    return out
