"""BFCL v1 specifics: function specs to JSON Schema, recorded outputs to tool calls.

BFCL writes function parameters in an OpenAPI-like dialect with Python type names
(``dict``, ``float``, ``tuple``, ``any``) and, for Java / JavaScript questions, Java or JS type
names. Its function-calling handler converted them before sending them to the model; this
module does the same conversion, so the gate checks the calls against the schema the model
was given:

- ``dict`` -> ``object``, ``float`` / ``double`` -> ``number``, ``tuple`` / ``list`` -> ``array``,
  ``long`` / ``short`` / ``byte`` -> ``integer``, ``bool`` -> ``boolean``, ``char`` -> ``string``;
- ``any`` -> no type constraint (BFCL sent ``string``; JSON Schema's "anything" is closer to
  the meaning and does not flag valid non-string values);
- Java and JavaScript parameters are sent as strings holding the language's literal (as
  BFCL's handler did), so their top-level properties become ``string``;
- function names have ``.`` replaced by ``_`` (providers reject dots; BFCL did the same in
  function-calling mode, and the recorded calls use the underscored names).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

# one keyword escape for BFCL's Python-syntax answers and the gate's text calls
from tiered_router.calls._python import KEYWORD_MARK as _KEYWORD_MARK
from tiered_router.calls._python import dotted_name as _dotted
from tiered_router.calls._python import parse_expression
from tiered_router.turn import ToolCall

__all__ = ["openai_tools", "parse_result", "to_json_schema"]

_TYPES: dict[str, str | None] = {
    "dict": "object",
    "object": "object",
    "hashmap": "object",
    "hashtable": "object",
    "map": "object",
    "float": "number",
    "double": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "bigint": "integer",
    "string": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "arraylist": "array",
    "queue": "array",
    "stack": "array",
    "any": None,
}

_STRING_LANGUAGES = frozenset({"java", "javascript"})


def _convert(node: Any) -> Any:
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            mapped = _TYPES.get(value.lower(), None)
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, Mapping):
            out["properties"] = {k: _convert(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = _convert(value)
        else:
            out[key] = value
    return out


def to_json_schema(parameters: Mapping[str, Any], *, language: str = "python") -> dict[str, Any]:
    """Convert a BFCL ``parameters`` object to JSON Schema.

    Args:
        parameters: The spec's ``parameters`` (``{"type": "dict", "properties": ...}``).
        language: ``python``, ``java`` or ``javascript`` (the question's category).

    """
    schema: dict[str, Any] = dict(_convert(parameters))
    schema["type"] = "object"
    if language in _STRING_LANGUAGES:
        props = schema.get("properties") or {}
        schema["properties"] = {
            name: _as_string(prop) for name, prop in props.items() if isinstance(prop, Mapping)
        }
    if isinstance(schema.get("properties"), Mapping):
        # a function's parameter list is closed: an argument it does not declare is an
        # error (Python raises TypeError on an unexpected keyword). Nested dicts stay open.
        schema.setdefault("additionalProperties", False)
    return schema


def _as_string(prop: Mapping[str, Any]) -> dict[str, Any]:
    if "type" not in prop:  # "any": keep it unconstrained
        return dict(prop)
    kept = {k: v for k, v in prop.items() if k not in ("type", "items", "properties")}
    kept["type"] = "string"
    return kept


def fc_name(name: str) -> str:
    """Return the name as sent in function-calling mode (``.`` replaced by ``_``)."""
    return name.replace(".", "_")


def openai_tools(function: Any, *, category: str) -> list[dict[str, Any]]:
    """Return BFCL's function spec(s) as OpenAI tools with JSON Schema parameters."""
    specs = function if isinstance(function, list) else [function]
    language = category if category in _STRING_LANGUAGES else "python"
    tools = []
    for spec in specs:
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            continue
        fn: dict[str, Any] = {
            "name": fc_name(spec["name"]),
            "parameters": to_json_schema(spec.get("parameters") or {}, language=language),
        }
        if spec.get("description"):
            fn["description"] = str(spec["description"])
        tools.append({"type": "function", "function": fn})
    return tools


def parse_result(result: Any, *, category: str = "") -> tuple[str, tuple[ToolCall, ...]]:
    """Turn a recorded BFCL ``result`` into ``(text, tool_calls)``.

    Function-calling mode records ``[{name: "<JSON arguments>"}, ...]``; prompt mode records
    Python call syntax (``"[math.factorial(number=5)]"``); xLAM records
    ``{"tool_calls": [...]}`` as JSON text. Anything else (prose, Markdown-fenced code) is
    kept as the text of a completion without tool calls: that is what the model answered.

    In the ``java`` and ``javascript`` categories a prompt-mode value is the language's
    literal, and becomes the string the tools declare (``success=true`` gives ``"true"``,
    ``opts={a: 1}`` gives ``"{a: 1}"``; a quoted string gives its content), as BFCL's own
    decoder hands it to its checker.
    """
    if isinstance(result, list):
        calls = _fc_calls(result)
        if calls is not None:
            return "", calls
        return json.dumps(result), ()
    if not isinstance(result, str):
        return json.dumps(result), ()
    parsed = _python_calls(result, as_source=category in _STRING_LANGUAGES) or _xlam_calls(result)
    if parsed:
        return "", parsed
    return result, ()


def _fc_calls(result: list[Any]) -> tuple[ToolCall, ...] | None:
    calls = []
    for i, item in enumerate(result):
        if not isinstance(item, Mapping) or len(item) != 1:
            return None
        ((name, args),) = item.items()
        arguments = args if isinstance(args, str) else json.dumps(args)
        calls.append(ToolCall(id=f"call_{i}", name=fc_name(str(name)), arguments=arguments))
    return tuple(calls)


def _python_calls(text: str, *, as_source: bool = False) -> tuple[ToolCall, ...]:
    source = text.strip()
    if not (source.startswith("[") and source.endswith("]")):
        return ()
    tree = parse_expression(source)
    if tree is None:
        return ()
    body = tree.body
    if not isinstance(body, ast.List) or not body.elts:
        return ()
    calls = []
    for i, node in enumerate(body.elts):
        if not isinstance(node, ast.Call) or node.args:
            return ()
        name = _dotted(node.func)
        if name is None:
            return ()
        args: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return ()
            value = _source(kw.value) if as_source else _literal(kw.value)
            args[kw.arg.replace(_KEYWORD_MARK, "")] = value
        name = name.replace(_KEYWORD_MARK, "")
        calls.append(ToolCall(id=f"call_{i}", name=fc_name(name), arguments=json.dumps(args)))
    return tuple(calls)


def _source(node: ast.expr) -> str:
    """A value as the text written: a string literal's content, else its source."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node).replace(_KEYWORD_MARK, "")


def _literal(node: ast.expr) -> Any:
    """Return a keyword argument's value as JSON data.

    Python literals become their JSON counterparts; anything JSON cannot hold (an
    expression, a placeholder ``...``, a set, bytes, a complex number) is kept as its source
    text, which is what the model wrote: ``f(x=...)`` gives ``{"x": "..."}``.
    """
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = _NOT_JSON
    if value is _NOT_JSON or not _is_json(value):
        return ast.unparse(node).replace(_KEYWORD_MARK, "")
    return value


_NOT_JSON: Any = object()


def _is_json(value: Any) -> bool:
    """Whether ``json.dumps`` can write ``value`` (the literal types it knows, recursively)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int, float, bool)) and _is_json(v) for k, v in value.items())
    return False  # Ellipsis, set, bytes, complex


def _xlam_calls(text: str) -> tuple[ToolCall, ...]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return ()
    items = data.get("tool_calls") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        return ()
    calls = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            return ()
        args = item.get("arguments", {})
        arguments = args if isinstance(args, str) else json.dumps(args)
        calls.append(ToolCall(id=f"call_{i}", name=fc_name(item["name"]), arguments=arguments))
    return tuple(calls)
