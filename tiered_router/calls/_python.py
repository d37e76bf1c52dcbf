"""Reading tool calls written in Python call syntax: ``[get_weather(city="Paris")]``.

The parser behind :mod:`tiered_router.calls._text` and :mod:`tiered_router.calls._prompted`
for the Python-style formats, and behind the BFCL loader: Python's own parser reads the
text (Python keywords used as names, such as ``from=``, are escaped first), and argument
values become JSON data.
"""

from __future__ import annotations

import ast
import functools
import io
import keyword
import tokenize
from typing import Any

__all__ = [
    "KEYWORD_MARK",
    "POSITIONAL",
    "dotted_name",
    "escape_keywords",
    "has_comment",
    "parse_expression",
    "python_calls",
]

KEYWORD_MARK = "__kw_"
"""Appended to Python keywords used as names (``from=``) so that the text parses."""

POSITIONAL = "__positional__"
"""Where :func:`python_calls` puts positional arguments, in order."""

_MAX_SOURCE = 20_000  # a call list this long is not a tool call; keep parsing cheap


class _NotLiteral(Exception):
    """A value that is not a literal, where only literals are accepted."""


def escape_keywords(source: str) -> str | None:
    """Rename Python keywords used as names (``from=``, ``Foo.class``), or ``None``."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    changed = False
    out = []
    for tok in tokens:
        if tok.type == tokenize.NAME and keyword.iskeyword(tok.string):
            if tok.string not in ("True", "False", "None"):
                tok = tok._replace(string=tok.string + KEYWORD_MARK)
                changed = True
        out.append(tok)
    return tokenize.untokenize(out) if changed else None


def has_comment(source: str) -> bool:
    """Whether Python source holds a ``#`` comment (prose, not a call); ``True`` unreadable."""
    if "#" not in source:
        return False
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return any(tok.type == tokenize.COMMENT for tok in tokens)
    except (tokenize.TokenError, SyntaxError):
        return True


@functools.lru_cache(maxsize=256)
def parse_expression(source: str) -> ast.Expression | None:
    """Parse ``source`` as one Python expression, Python keywords used as names escaped.

    Returns ``None`` for text that does not parse (cached: an agent loop sends the same
    text step after step).
    """
    try:
        return ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    escaped = escape_keywords(source)
    if escaped is None:
        return None
    try:
        return ast.parse(escaped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` for a name or attribute chain, else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


_CONSTANTS = {"true": True, "false": False, "null": None}


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _literal(node: ast.expr, *, literal_only: bool) -> Any:
    """An argument's value as JSON data; else its source text (or :class:`_NotLiteral`)."""
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]  # JSON spellings inside a Python-style call
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = _literal
    if value is not _literal and _is_json(value):
        return value
    if literal_only:
        raise _NotLiteral
    return ast.unparse(node).replace(KEYWORD_MARK, "")


def python_calls(
    piece: str, *, literal_only: bool = False
) -> list[tuple[str, dict[str, Any]]] | None:
    """``[f(a=1), g(b="x")]``, ``(f(), g())``, ``f(a="x")`` or calls one per line.

    Returns ``(name as written, arguments)`` per call, positional arguments under
    ``__positional__``; ``None`` when the piece is anything else (or, with
    ``literal_only``, holds a value that is not a literal). A ``#`` comment is prose
    written among the calls: a piece that holds one is not calls.
    """
    source = piece.strip().rstrip(";").strip()
    if not source or source[0] in "{\"'" or "(" not in source or has_comment(source):
        return None
    if not source.startswith(("[", "(")):
        lines = [ln.strip().rstrip(";,") for ln in source.splitlines() if ln.strip()]
        source = "[" + ", ".join(lines) + "]"
    tree = parse_expression(source) if len(source) <= _MAX_SOURCE else None
    if tree is None:
        return None
    body = tree.body
    nodes = list(body.elts) if isinstance(body, (ast.List, ast.Tuple)) else [body]
    if not nodes:
        return None
    out = []
    try:
        for node in nodes:
            if not isinstance(node, ast.Call):
                return None
            name = dotted_name(node.func)
            if name is None:
                return None
            args: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    return None
                args[kw.arg.replace(KEYWORD_MARK, "")] = _literal(
                    kw.value, literal_only=literal_only
                )
            if node.args:
                args[POSITIONAL] = [_literal(a, literal_only=literal_only) for a in node.args]
            out.append((name.replace(KEYWORD_MARK, ""), args))
    except _NotLiteral:
        return None
    return out
