"""Java and JavaScript literals read the way BFCL's checker reads them (for ``_bfcl_judge``).

BFCL sends Java / JavaScript parameters as strings holding the language's literal, and its
checker turns each string into a Python value by the declared type before comparing it with
the accepted answers; a string that does not read as the declared type stays a string (then
it passes only where the accepted answer is a string: a variable name). Behaviour reproduced
from BFCL's ``java_type_converter`` / ``js_type_converter`` at the data's pinned commit
(de8307b4): ``42L`` as a ``long``, ``new ArrayList<>(Arrays.asList(...))``,
``new int[]{...}``, ``new HashMap<>() {{ put(...) }}``, ``{a: 1}``, ``[0.6, 0.3]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["JAVA_TYPES", "JS_TYPES", "LIST_TYPES", "java_value", "js_value"]

JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "long": int, "float": float, "double": float,
    "boolean": bool, "char": str, "Array": list, "ArrayList": list, "HashMap": dict,
    "String": str, "any": str,
}  # fmt: skip
"""Python type each declared Java type reads as."""
JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool,
    "dict": dict, "array": list, "any": str,
}  # fmt: skip
"""Python type each declared JavaScript type reads as."""
LIST_TYPES = frozenset({"Array", "ArrayList", "array"})
"""Declared types whose elements have a declared type too (``items``)."""
_INT = re.compile(r"-?\d+")
_JAVA_FLOAT = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]")
_JAVA_DOUBLE = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_JAVA_LONG = re.compile(r"-?\d+[lL]")
_JS_FLOAT = re.compile(r"-?\d+(\.\d+)?")
_JS_BIGINT = re.compile(r"-?\d+n")
_BOOLEAN = re.compile(r"true|false")


def _suffixed(text: str) -> int:
    return int(text[:-1])


# a scalar type: the literal's pattern and how it reads; a literal that does not match is
# left as the text written (BFCL's converters do the same)
_Scalar = tuple[re.Pattern[str], Callable[[str], Any]]
_JAVA_SCALARS: dict[str, _Scalar] = {
    "byte": (_INT, int),
    "short": (_INT, int),
    "integer": (_INT, int),
    "float": (_JAVA_FLOAT, lambda t: float(t[:-1])),
    "double": (_JAVA_DOUBLE, float),
    "long": (_JAVA_LONG, _suffixed),
    "boolean": (_BOOLEAN, lambda t: t == "true"),
}
_JS_SCALARS: dict[str, _Scalar] = {
    "integer": (_INT, int),
    "float": (_JS_FLOAT, float),
    "Bigint": (_JS_BIGINT, _suffixed),
    "Boolean": (_BOOLEAN, lambda t: t == "true"),
}


def _number(text: str) -> Any:
    """``text`` as an int, else a float, else as written (Python's reading of a number)."""
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def _scalar(text: str, scalar: _Scalar) -> Any:
    pattern, read = scalar
    return read(text) if pattern.fullmatch(text) else text


def _unquote(text: str, quotes: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in quotes:
        return text[1:-1]
    return None


def _java_literal(text: str) -> Any:
    """A Java element read without its declared type (BFCL's ``parse_java_value``)."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.fullmatch(text):
        return int(text[:-1])
    if _JAVA_FLOAT.fullmatch(text):
        return float(text[:-1])
    return _number(text)


def _java_elements(parts: Sequence[str], nested: str | None, *, quoted: bool) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        part = part.strip()
        if quoted and nested in ("char", "String"):
            out.append(part[1:-1])
        else:
            out.append(java_value(part, nested) if nested else _java_literal(part))
    return out


def java_value(text: str, declared: str, nested: str | None = None) -> Any:
    """A Java literal read as ``declared`` (BFCL's ``java_type_converter``)."""
    if declared in _JAVA_SCALARS:
        return _scalar(text, _JAVA_SCALARS[declared])
    if declared == "ArrayList":
        found = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
        if found:
            return _java_elements(found.group(1).split(","), nested, quoted=True)
        found = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
        if found:
            added = re.findall(r"add\((.+?)\)", found.group(1))
            return _java_elements(added, nested, quoted=True)
        return [] if re.search(r"new\s+ArrayList<\w*>\(\)", text) else text
    if declared == "Array":
        found = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
        if not found:
            return text
        parts = [p for p in found.group(1).split(",") if p.strip()]
        return _java_elements(parts, nested, quoted=False)
    if declared == "HashMap":
        found = re.search(
            r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL
        )
        if found:
            puts = re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", found.group(1))
            return {key: _java_literal(value.strip()) for key, value in puts}
        return {} if re.search(r"new\s+HashMap<.*?>\s*\(\)", text) else text
    return text  # String, char, any: the text as written


def _js_literal(text: str) -> Any:
    """A JavaScript element read without its declared type (BFCL's ``parse_js_value``)."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    unquoted = _unquote(text, "\"'")
    if unquoted is not None:
        return unquoted
    return _number(text)


def _js_array(code: str, nested: str | None) -> Any:
    rows = re.match(
        r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)", code
    )
    if rows:
        inner = re.findall(r"\[(.*?)\]", rows.group(0))
        out = []
        for i, row in enumerate(inner):
            row = row.strip()
            if i == 0 and row.startswith("["):
                row = row[1:]
            out.append([_js_literal(e) for e in row.split(",")])
        return out
    flat = re.match(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)", code)
    if not flat:
        return code
    body = (flat.group(1) if flat.group(1) is not None else flat.group(2) or "").strip()
    parts = body.split(",") if body else []
    if nested:
        return [js_value(p.strip(), nested) for p in parts]
    return [_js_literal(p) for p in parts]


def _js_dict(code: str) -> Any:
    if code == "{}":
        return {}
    found = re.match(r"\{(.*?)\}", code)
    if not found:
        return code
    out: dict[str, Any] = {}
    for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", found.group(1)):
        key, value = key.strip().strip("'\""), value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key] = _js_array(value, None)
        elif value.startswith("{") and value.endswith("}"):
            out[key] = _js_dict(value)
        else:
            out[key] = _js_literal(value.strip("'\""))
    return out


def js_value(text: str, declared: str, nested: str | None = None) -> Any:
    """A JavaScript literal read as ``declared`` (BFCL's ``js_type_converter``)."""
    if declared == "String":
        unquoted = _unquote(text, "\"'")
        return text if unquoted is None else unquoted
    if declared in _JS_SCALARS:
        return _scalar(text, _JS_SCALARS[declared])
    if declared == "array":
        try:
            return _js_array(text.strip(), nested)
        except (ValueError, IndexError):
            return text.strip()
    if declared == "dict":
        return _js_dict(text.strip())
    return text  # any
