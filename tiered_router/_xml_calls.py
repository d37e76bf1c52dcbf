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
is read as JSON (or a Python literal). A value that does not read as its type stays text,
so the gate's schema check reports it rather than this reader hiding it; ``null`` is
``None`` for any type but a string.

Reading is strict: the whole text (whitespace and the ``<function_calls>`` wrapper aside)
must be such calls, or the answer is ``None``. Pure: no I/O.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["xml_calls"]

Properties = Callable[[str], Mapping[str, Any] | None]
"""Given a written tool name, that tool's parameter ``properties`` (``None``: undeclared)."""

_WRAPPER = re.compile(r"\A\s*<function_calls>(.*)</function_calls>\s*\Z", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^<>\s]+)\s*>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^<>\s]+)\s*>(.*?)</parameter>", re.DOTALL)
_INVOKE = re.compile(r"""<invoke\s+name=["']([^"'<>]+)["']\s*>(.*?)</invoke>""", re.DOTALL)
_NAMED_PARAMETER = re.compile(
    r"""<parameter\s+name=["']([^"'<>]+)["']\s*>(.*?)</parameter>""", re.DOTALL
)
_KEY_VALUE = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_GLM_NAME = re.compile(r"\A\s*([A-Za-z_][\w.\-]*)\s*(?=<arg_key>|\Z)")
_INT = re.compile(r"[-+]?\d+")
_STRING_TYPES = frozenset({"string"})


def xml_calls(text: str, properties: Properties) -> list[tuple[str, dict[str, Any]]] | None:
    """Read ``text`` as XML-style calls; ``None`` unless it is nothing else.

    Args:
        text: One piece of a draft's text (``<tool_call>`` tags already taken off).
        properties: The declared parameters of a written tool name, used to type values.

    Returns:
        ``[(name as written, arguments), ...]``, or ``None``.
    """
    wrapped = _WRAPPER.match(text)
    if wrapped:
        text = wrapped.group(1)
    body = text.strip()
    if body.startswith("<function="):
        return _blocks(body, _FUNCTION, properties, _PARAMETER)
    if body.startswith("<invoke"):
        return _blocks(body, _INVOKE, properties, _NAMED_PARAMETER)
    named = _GLM_NAME.match(body)
    if named:
        args = _parameters(body[named.end() :], _KEY_VALUE, properties(named.group(1)))
        return None if args is None else [(named.group(1), args)]
    return None


def _whole(pattern: re.Pattern[str], text: str) -> list[re.Match[str]] | None:
    """The matches of ``pattern`` when they cover ``text`` but for whitespace, else ``None``."""
    found = list(pattern.finditer(text))
    if pattern.sub("", text).strip():
        return None
    return found


def _blocks(
    body: str, pattern: re.Pattern[str], properties: Properties, params: re.Pattern[str]
) -> list[tuple[str, dict[str, Any]]] | None:
    blocks = _whole(pattern, body)
    if not blocks:
        return None
    out = []
    for block in blocks:
        name, inner = block.group(1), block.group(2).strip()
        if inner.startswith("{"):  # a JSON body
            try:
                args = json.loads(inner)
            except ValueError:
                return None
            if not isinstance(args, dict):
                return None
        else:
            parsed = _parameters(inner, params, properties(name))
            if parsed is None:
                return None
            args = parsed
        out.append((name, args))
    return out


def _parameters(
    text: str, pattern: re.Pattern[str], declared: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    pairs = _whole(pattern, text)
    if pairs is None:
        return None
    args: dict[str, Any] = {}
    for pair in pairs:
        key = pair.group(1).strip()
        if not key or key in args:
            return None
        schema = declared.get(key) if declared else None
        args[key] = _typed_value(pair.group(2), schema if isinstance(schema, Mapping) else None)
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
    if "integer" in kinds and _INT.fullmatch(text):
        return int(text)
    if "number" in kinds:
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return int(number) if _INT.fullmatch(text) else number
    if "boolean" in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kinds & {"object", "array"}:
        for read in (json.loads, ast.literal_eval):
            try:
                value = read(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, tuple):
                value = list(value)
            if isinstance(value, (dict, list)) and _json_safe(value):
                return value
    return raw


def _kinds(schema: Mapping[str, Any] | None) -> frozenset[str]:
    kind = schema.get("type") if schema else None
    if isinstance(kind, str):
        return frozenset((kind,))
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str) and k != "null")
    return frozenset()


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
