"""Tool calls written in XML-style tags, read into ``(name, arguments)`` pairs.

Several open model families write their calls with tags rather than JSON or Python
syntax when no server-side tool parser turns them into ``tool_calls``:

- **named parameters** (Qwen3-Coder, and the tool templates that copy it)::

      <tool_call>
      <function=get_weather>
      <parameter=city>
      Paris
      </parameter>
      </function>
      </tool_call>

- **a JSON body** (Llama 3.1's format for user-defined tools):
  ``<function=get_weather>{"city": "Paris"}</function>``;
- **invoke blocks** (the XML tool-use prompt of Claude models before native tools)::

      <function_calls>
      <invoke name="get_weather">
      <parameter name="city">Paris</parameter>
      </invoke>
      </function_calls>

- **key / value pairs** (GLM-4.5): ``get_weather`` then
  ``<arg_key>city</arg_key><arg_value>Paris</arg_value>``, inside ``<tool_call>`` tags; a
  call without arguments is the name alone (``<tool_call>get_time</tool_call>``).

A parameter's value is text. It is read by the type its tool's schema declares: a string
stays as written (one leading and one trailing newline dropped, as the tag layout adds
them); an integer, number or boolean is converted when it reads as one; an object or array
is read as JSON (or a Python literal). Reading is bounded: a number of more than
``_limits.MAX_NUMBER_DIGITS`` digits or beyond the float range, and an object or array with
such a number, NaN, Infinity or nesting past ``_limits.MAX_JSON_DEPTH``, is not read. A value
that does not read as its type stays text, so the gate's schema check reports it rather than
this reader hiding it; ``null`` is ``None`` for any type but a string.

Reading is strict: the whole text (whitespace and the ``<function_calls>`` wrapper aside)
must be such calls, or the answer is ``None``. Pure: no I/O.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from tiered_router import _limits

__all__ = ["xml_calls"]

Properties = Callable[[str], Mapping[str, Any] | None]
"""Given a written tool name, that tool's parameter ``properties`` (``None``: undeclared)."""

_FUNCTION = ("<function=", re.compile(r"<function=([^<>\s]+)\s*>"), "</function>")
_PARAMETER = ("<parameter=", re.compile(r"<parameter=([^<>\s]+)\s*>"), "</parameter>")
_INVOKE = ("<invoke", re.compile(r"""<invoke\s+name=["']([^"'<>]+)["']\s*>"""), "</invoke>")
_NAMED_PARAMETER = (
    "<parameter",
    re.compile(r"""<parameter\s+name=["']([^"'<>]+)["']\s*>"""),
    "</parameter>",
)
_ARG_KEY = ("<arg_key>", re.compile(r"<arg_key>()"), "</arg_key>")
_ARG_VALUE = ("<arg_value>", re.compile(r"<arg_value>()"), "</arg_value>")
_GLM_NAME = re.compile(r"\A\s*([A-Za-z_][\w.\-]*)\s*(?=<arg_key>|\Z)")
_INT = re.compile(r"[-+]?\d+")
_SPACE = re.compile(r"\s*")
_STRING_TYPES = frozenset({"string"})
_WRAPPER_OPEN, _WRAPPER_CLOSE = "<function_calls>", "</function_calls>"
_MAX_LITERAL = 1_000_000
"""Longest object or array value read (Python's literal parser is not linear in it)."""

Element = tuple[str, re.Pattern[str], str]
"""How an element is written: its opening's first characters, its opening, its closing."""


def xml_calls(text: str, properties: Properties) -> list[tuple[str, dict[str, Any]]] | None:
    """Read ``text`` as XML-style calls; ``None`` unless it is nothing else.

    Args:
        text: One piece of a draft's text (``<tool_call>`` tags already taken off).
        properties: The declared parameters of a written tool name, used to type values.

    Returns:
        ``[(name as written, arguments), ...]``, or ``None``.

    The text is read left to right once (``str.find`` for each closing), so reading costs
    time in proportion to its length whatever it holds.
    """
    body = text.strip()
    if body.startswith(_WRAPPER_OPEN) and body.endswith(_WRAPPER_CLOSE):
        body = body[len(_WRAPPER_OPEN) : -len(_WRAPPER_CLOSE)].strip()
    if body.startswith("<function="):
        return _blocks(body, _FUNCTION, _PARAMETER, properties)
    if body.startswith("<invoke"):
        return _blocks(body, _INVOKE, _NAMED_PARAMETER, properties)
    named = _GLM_NAME.match(body)
    if named:
        args = _key_values(body, named.end(), properties(named.group(1)))
        return None if args is None else [(named.group(1), args)]
    return None


def _element(text: str, pos: int, element: Element) -> tuple[str, str, int] | None:
    """The element at ``pos`` (whitespace skipped): ``(its name, its text, where it ends)``."""
    first, opening, closing = element
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches
    if not text.startswith(first, pos):
        return None
    head_end = text.find(">", pos)
    head = opening.fullmatch(text, pos, head_end + 1) if head_end >= 0 else None
    if head is None:
        return None
    end = text.find(closing, head_end + 1)
    if end < 0:
        return None
    return head.group(1), text[head_end + 1 : end], end + len(closing)


def _blank_from(text: str, pos: int) -> bool:
    """Whether ``text`` holds only whitespace from ``pos`` on (without copying it)."""
    return _SPACE.match(text, pos).end() == len(text)  # type: ignore[union-attr]


def _elements(text: str, element: Element) -> list[tuple[str, str]] | None:
    """Every element ``text`` is made of, in order; ``None`` when it holds anything else."""
    out: list[tuple[str, str]] = []
    pos = 0
    while not _blank_from(text, pos):
        found = _element(text, pos, element)
        if found is None:
            return None
        name, inner, pos = found
        out.append((name, inner))
    return out


def _blocks(
    body: str, block: Element, parameter: Element, properties: Properties
) -> list[tuple[str, dict[str, Any]]] | None:
    blocks = _elements(body, block)
    if not blocks:
        return None
    out = []
    for name, inner in blocks:
        inner = inner.strip()
        if inner.startswith("{"):  # a JSON body
            try:
                args = _limits.loads(inner)
            except ValueError:
                return None
            if not isinstance(args, dict):
                return None
        else:
            pairs = _elements(inner, parameter)
            parsed = None if pairs is None else _arguments(pairs, properties(name))
            if parsed is None:
                return None
            args = parsed
        out.append((name, args))
    return out


def _key_values(text: str, pos: int, declared: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """GLM's ``<arg_key>k</arg_key><arg_value>v</arg_value>`` pairs from ``pos`` on."""
    pairs: list[tuple[str, str]] = []
    while not _blank_from(text, pos):
        key = _element(text, pos, _ARG_KEY)
        value = _element(text, key[2], _ARG_VALUE) if key is not None else None
        if key is None or value is None:
            return None
        pairs.append((key[1], value[1]))
        pos = value[2]
    return _arguments(pairs, declared)


def _arguments(
    pairs: list[tuple[str, str]], declared: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    args: dict[str, Any] = {}
    for key, raw in pairs:
        key = key.strip()
        if not key or key in args:
            return None
        schema = declared.get(key) if declared else None
        args[key] = _typed_value(raw, schema if isinstance(schema, Mapping) else None)
    return args


def _typed_value(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A tag's text read by the type ``schema`` declares (text when it does not read so)."""
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    kinds = _kinds(schema)
    if not kinds or kinds & _STRING_TYPES:
        return raw
    text = raw.strip()
    if text.lower() == "null":
        return None
    # numbers are read within bounds (_limits.read_int / read_float): a 5,000-digit integer
    # or a number beyond the float range stays text, and the schema check refuses it
    if "integer" in kinds or "number" in kinds:
        integer = _limits.read_int(text) if _INT.fullmatch(text) else None
        if integer is not None:
            return integer
    if "number" in kinds:
        number = _limits.read_float(text)
        if number is not None and not _INT.fullmatch(text):
            return number
    if "boolean" in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kinds & {"object", "array"} and len(text) <= _MAX_LITERAL:
        for read in (_limits.loads, ast.literal_eval):
            try:
                value = read(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, tuple):
                value = list(value)
            if isinstance(value, (dict, list)) and _limits.bounded(value):
                return value
    return raw


def _kinds(schema: Mapping[str, Any] | None) -> frozenset[str]:
    kind = schema.get("type") if schema else None
    if isinstance(kind, str):
        return frozenset((kind,))
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str) and k != "null")
    return frozenset()
