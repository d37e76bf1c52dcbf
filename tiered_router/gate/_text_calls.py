"""Tool calls written as text, read back into :class:`ToolCall` objects.

Models without native tool calling (or served without a tool parser) write their calls in
their own text formats. The gate reads the common ones back, so it judges the call the
model meant instead of failing the draft for being text:

- Python call syntax: ``[get_weather(city='Paris'), get_time(tz="CET")]`` (BFCL, Llama 3
  prompt style), a bare ``get_weather(city="Paris")``, several calls one per line,
  ``functions.get_weather(...)``, positional arguments in the order the tool declares them;
- JSON: ``{"name": ..., "arguments": {...}}`` (``parameters`` for ``arguments`` too, and
  arguments given as a JSON string), a list of those, ``{"tool_calls": [...]}``,
  ``{"function": {"name": ..., "arguments": ...}}``;
- either of the above inside ``<tool_call>...</tool_call>`` tags (Hermes, Qwen),
  ``<|python_tag|>`` (Llama 3.1), ``[TOOL_CALLS]`` (Mistral) or a Markdown code fence.

:func:`parse_text_tool_calls` reads a text that *is* tool calls (apart from whitespace and
the wrappers above) to declared tools, and nothing else: prose that mentions or describes a
call is left alone (``tool_call_in_text`` judges it). Its signature is the one the prompted
tools dialect of the backends uses, so both can share one parser.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import keyword
import re
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tiered_router.turn import Completion, ToolCall, ToolSpec, Turn

__all__ = ["lift_text_tool_calls", "parse_text_tool_calls"]

_FENCE = re.compile(r"^```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)
_TAGGED = re.compile(r"<(tool_call|function_call|tool_calls)>(.*?)</\1>", re.DOTALL)
_PREFIXES = ("<|python_tag|>", "[TOOL_CALLS]", "<tool_call>", "<|tool_call|>")
_KEYWORD_MARK = "__kw_"


def _names(tools: Iterable[ToolSpec | Mapping[str, Any] | str]) -> dict[str, ToolSpec | None]:
    out: dict[str, ToolSpec | None] = {}
    for tool in tools:
        if isinstance(tool, ToolSpec):
            out[tool.name] = tool
        elif isinstance(tool, str):
            out[tool] = None
        else:
            spec = ToolSpec.from_openai(tool)
            out[spec.name] = spec
    return out


def parse_text_tool_calls(
    text: str, tools: Sequence[ToolSpec | Mapping[str, Any] | str]
) -> tuple[ToolCall, ...] | None:
    """Read ``text`` as tool calls to the declared ``tools``, or return ``None``.

    Args:
        text: A draft's text.
        tools: The declared tools (``ToolSpec``, OpenAI tool dicts, or names).

    Returns:
        The calls, with JSON-object arguments and ids ``text_call_0``, ... when the whole
        text (wrappers and whitespace aside) is calls to declared tools; ``None`` when it
        is anything else, including a call to a tool that was not declared.
    """
    body = text.strip()
    if not body or not tools or ("(" not in body and "{" not in body):
        return None
    declared = _names(tools)
    spellings = {name.replace(".", "_"): name for name in declared}
    pieces = _unwrap(body)
    calls: list[tuple[str, dict[str, Any]]] = []
    for piece in pieces:
        found = _json_calls(piece) if piece[:1] in "[{" else None
        if found is None:
            found = _python_calls(piece)
        if not found:
            return None
        calls.extend(found)
    out = []
    for i, (written, args) in enumerate(calls):
        name = _declared_name(written, spellings)
        if name is None:
            return None
        spec = declared[name]
        if "__positional__" in args:
            placed = _place(args, spec)
            if placed is None:
                return None
            args = placed
        out.append(ToolCall(id=f"text_call_{i}", name=name, arguments=json.dumps(args)))
    return tuple(out)


def lift_text_tool_calls(completion: Completion, turn: Turn) -> Completion:
    """Return ``completion`` with the calls its text holds as real tool calls.

    A draft that made no call, for a turn that declares tools (and whose ``tool_choice`` is
    not ``"none"``), whose whole text is calls to declared tools (see
    :func:`parse_text_tool_calls`) comes back with those calls and no text. Any other
    draft comes back unchanged.
    """
    if completion.tool_calls or not turn.tools or not completion.text:
        return completion
    if turn.params.get("tool_choice") == "none":
        return completion
    calls = parse_text_tool_calls(completion.text, turn.tools)
    if not calls:
        return completion
    return replace(completion, text="", tool_calls=calls, finish_reason="tool_calls")


def _unwrap(body: str) -> list[str]:
    """Strip fences and wrappers; return the pieces that each hold one or more calls."""
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    tagged = list(_TAGGED.finditer(body))
    if tagged:
        if _TAGGED.sub("", body).strip():
            return [body]  # text outside the tags: not a pure call
        return [m.group(2).strip() for m in tagged]
    for prefix in _PREFIXES:
        if body.startswith(prefix):
            body = body[len(prefix) :].strip()
    return [body]


def _declared_name(written: str, spellings: Mapping[str, str]) -> str | None:
    key = written.replace(".", "_")
    name = spellings.get(key)
    if name is None and key.startswith("functions_"):  # OpenAI's "functions." namespace
        name = spellings.get(key[len("functions_") :])
    return name


# ------------------------------------------------------------------------------ JSON


def _json_calls(piece: str) -> list[tuple[str, dict[str, Any]]] | None:
    try:
        data = json.loads(piece)
    except ValueError:
        # one JSON object per line (several <tool_call> bodies written without tags)
        lines = [ln for ln in piece.splitlines() if ln.strip()]
        if len(lines) < 2:
            return None
        out: list[tuple[str, dict[str, Any]]] = []
        for line in lines:
            found = _json_calls(line.strip())
            if not found:
                return None
            out.extend(found)
        return out
    if isinstance(data, Mapping) and isinstance(data.get("tool_calls"), list):
        data = data["tool_calls"]
    items = data if isinstance(data, list) else [data]
    if not items:
        return None
    out = []
    for item in items:
        call = _json_call(item)
        if call is None:
            return None
        out.append(call)
    return out


def _json_call(item: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(item, Mapping):
        return None
    if isinstance(item.get("function"), Mapping):
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str):
        return None
    args = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name, args


# ---------------------------------------------------------------------------- Python


def _python_calls(piece: str) -> list[tuple[str, dict[str, Any]]] | None:
    source = piece.strip().rstrip(";").strip()
    if not source or source[0] in "{\"'" or "(" not in source:
        return None
    if not source.startswith("["):
        lines = [ln.strip().rstrip(";,") for ln in source.splitlines() if ln.strip()]
        source = "[" + ", ".join(lines) + "]"
    tree = _parse(source)
    if tree is None or not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    out = []
    for node in tree.body.elts:
        if not isinstance(node, ast.Call):
            return None
        name = _dotted(node.func)
        if name is None:
            return None
        args: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            args[kw.arg.replace(_KEYWORD_MARK, "")] = _literal(kw.value)
        if node.args:
            args["__positional__"] = [_literal(a) for a in node.args]
        out.append((name.replace(_KEYWORD_MARK, ""), args))
    return out


@functools.lru_cache(maxsize=256)
def _parse(source: str) -> ast.Expression | None:
    if len(source) > 20_000:
        return None  # a call list this long is not a tool call; keep parsing cheap
    try:
        return ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    escaped = _escape_keywords(source)
    if escaped is None:
        return None
    try:
        return ast.parse(escaped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _escape_keywords(source: str) -> str | None:
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
                tok = tok._replace(string=tok.string + _KEYWORD_MARK)
                changed = True
        out.append(tok)
    return tokenize.untokenize(out) if changed else None


_CONSTANTS = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> Any:
    """A keyword argument's value as JSON data; what JSON cannot hold, as its source text."""
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]  # JSON spellings inside a Python-style call
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ast.unparse(node).replace(_KEYWORD_MARK, "")
    return value if _is_json(value) else ast.unparse(node).replace(_KEYWORD_MARK, "")


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _place(args: dict[str, Any], spec: ToolSpec | None) -> dict[str, Any] | None:
    """Give positional arguments the names of the tool's parameters, in declared order."""
    positional = args.pop("__positional__")
    props = spec.parameters.get("properties") if spec is not None else None
    if not isinstance(props, Mapping) or len(positional) > len(props):
        return None
    for name, value in zip(props, positional, strict=False):
        if name in args:
            return None
        args[name] = value
    return args
