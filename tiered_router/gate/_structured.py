"""Built-in checks of structured output: ``json_schema`` and ``tool_arguments``.

Both validate against schemas the turn itself carries (``response_format`` and the tools'
``parameters``), compiled once through a :class:`~tiered_router.gate.SchemaCache`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tiered_router.calls._choice import (
    allowed_names,
    describe_choice,
    outside_choice,
    requires_call,
)
from tiered_router.gate._schema import (
    SchemaCache,
    default_schema_cache,
    parse_json,
    parse_strict_json,
)
from tiered_router.turn import Completion, Turn

__all__ = ["JsonSchemaCheck", "ToolArgumentsCheck"]

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _validate(max_errors: object, cache: object, name: str) -> None:
    if isinstance(max_errors, bool) or not isinstance(max_errors, int) or max_errors < 1:
        raise ValueError(f"{name}.max_errors: must be an integer >= 1, got {max_errors!r}")
    if not isinstance(cache, SchemaCache):
        raise ValueError(f"{name}.cache: must be a SchemaCache, got {type(cache).__name__}")


def _not_json(text: str, exc: ValueError) -> str:
    if text.lstrip().startswith("```"):
        return f"content is not valid JSON (it is wrapped in a ``` code fence): {exc}"
    return f"content is not valid JSON: {exc}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonSchemaCheck:
    """``json_schema``: the text honours the turn's ``response_format``.

    - ``{"type": "json_schema", "json_schema": {"schema": {...}}}``: the text must parse
      as JSON and validate against the schema; each violation is a reason with its JSON
      path (``$.answer: 'answer' is a required property``). A broken schema is a reason
      too (``invalid schema ...``), never an exception.
    - ``{"type": "json_object"}``: the text must parse as a JSON object.
    - no ``response_format`` (or ``text``): pass. A draft that only called tools: pass.

    Attributes:
        max_errors: Most schema violations reported per draft.
        cache: Where compiled validators are kept (the process-wide cache by default).
    """

    name: ClassVar[str] = "json_schema"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """Only a turn with an output contract is checked, and then on the whole draft."""
        return turn.response_format is not None

    max_errors: int = 5
    cache: SchemaCache = field(default_factory=default_schema_cache, repr=False)

    def __post_init__(self) -> None:
        _validate(self.max_errors, self.cache, self.name)

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the reasons the text breaks the turn's ``response_format``."""
        fmt = turn.response_format
        if not fmt:
            return None
        kind = fmt.get("type")
        if kind not in ("json_schema", "json_object"):
            return None
        text = completion.text
        if not text.strip():
            if completion.tool_calls:
                return None
            return [f"content is empty; response_format {kind} expects JSON"]
        try:
            value = parse_json(text)
        except ValueError as exc:
            return [_not_json(text, exc)]
        if kind == "json_object":
            if isinstance(value, dict):
                return None
            return [f"content must be a JSON object, got {_json_type(value)}"]
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if schema is None:
            return None  # a json_schema format without a schema only asks for JSON
        return list(self.cache.validator(schema).errors(value, limit=self.max_errors)) or None


def _tool_choice(turn: Turn) -> Any:
    return turn.params.get("tool_choice")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolArgumentsCheck:
    """``tool_arguments``: every tool call is one the turn allows, with valid arguments.

    For each call, in order (reasons start with ``tool_calls[i] (name)``):

    - the tool must be declared in the turn (an unknown tool is named, with the declared
      ones); tool calls when the turn declared no tools fail;
    - its ``arguments`` must parse as a JSON object (an empty string counts as ``{}``),
      strictly: no number beyond a float's range, no key given twice, no lone surrogate;
    - the object must validate against the tool's ``parameters`` schema, with JSON paths.

    The turn's ``tool_choice`` (in ``turn.params``) is honoured too: ``"required"``, a
    named function or ``allowed_tools`` in mode ``"required"`` needs a call; a named
    function or ``allowed_tools`` limits the tools calls may name; ``"none"`` forbids calls.

    Attributes:
        max_errors: Most schema violations reported per call.
        cache: Where compiled validators are kept (the process-wide cache by default).
    """

    name: ClassVar[str] = "tool_arguments"

    def needs_whole_draft(self, turn: Turn) -> bool:
        """Only a turn with tools is checked, and then on the whole draft."""
        return bool(turn.tools)

    max_errors: int = 5
    cache: SchemaCache = field(default_factory=default_schema_cache, repr=False)

    def __post_init__(self) -> None:
        _validate(self.max_errors, self.cache, self.name)

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the reasons the draft's tool calls are not acceptable."""
        calls = completion.tool_calls
        reasons = _choice_reasons(_tool_choice(turn), completion) if turn.params else []
        if not calls:
            return reasons or None
        tools = {t.name: t for t in turn.tools or ()}
        if not tools:
            names = ", ".join(repr(c.name) for c in calls)
            reasons.append(f"{len(calls)} tool call(s) ({names}) but the turn declared no tools")
            return reasons
        for i, call in enumerate(calls):
            spec = tools.get(call.name)
            if spec is None:
                known = ", ".join(sorted(tools))
                reasons.append(f"tool_calls[{i}]: unknown tool {call.name!r}; declared: {known}")
                continue
            where = f"tool_calls[{i}] ({call.name})"
            try:
                args = parse_strict_json(call.arguments) if call.arguments.strip() else {}
            except ValueError as exc:
                reasons.append(f"{where}: arguments are not valid JSON: {exc}")
                continue
            if not isinstance(args, dict):
                reasons.append(f"{where}: arguments must be a JSON object, got {_json_type(args)}")
                continue
            if spec.parameters:
                errors = self.cache.validator(spec.parameters).errors(args, limit=self.max_errors)
                reasons.extend(f"{where}: {e}" for e in errors)
        return reasons or None


def _choice_reasons(choice: Any, completion: Completion) -> list[str]:
    calls = completion.tool_calls
    if choice == "none" and calls:
        return [f"tool_choice is 'none' but the draft made {len(calls)} tool call(s)"]
    if choice == "required" and not calls:
        return ["tool_choice is 'required' but the draft made no tool call"]
    if allowed_names(choice) is None:  # neither a named function nor an allowed_tools set
        return []
    if not calls and requires_call(choice):
        return [f"{describe_choice(choice)} but the draft made no tool call"]
    other = outside_choice(choice, (c.name for c in calls))
    if other:
        return [f"{describe_choice(choice)} but the draft called {', '.join(other)}"]
    return []
