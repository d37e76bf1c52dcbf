"""Tool calls written as text: the one reader, and the rules under which a call is lifted.

Models without native tool calling (or served without a tool parser) write their calls in
text. The formats have one grammar each: JSON call objects (:mod:`tiered_router.calls._json`),
Python call syntax (:mod:`tiered_router.calls._python`) and XML-style tags
(:mod:`tiered_router.calls._xml`). This module reads the wrappers around them (the
``<tool_call>`` tags of Hermes, Qwen and the prompted-tools protocol, ``<|python_tag|>``,
``[TOOL_CALLS]``, ``functools[...]``, Command R's ``Action:`` fence, ``<seed:tool_call>``)
and applies the lifting rules. A call is read from text only when:

1. it stands as the whole answer: no prose around it, not inside reasoning (a leading
   ``<think>...</think>`` block is split off as reasoning and never read for calls), not an
   example inside a Markdown fence (only Command R's format, ``Action:`` then a fenced
   list, asks for a fence; a fence inside a call tag is not read), no ``#`` comment among
   the calls (prose);
2. it names a tool the turn offers (``functions.`` and ``.`` for ``_`` aside: a name that
   is offered as written is that tool; an alias is read only when no offered name matches
   exactly, and an alias of two offered tools is not lifted);
3. it honours ``tool_choice`` (``"none"``: nothing is read; a named function: every call
   names it; ``allowed_tools``: every call names a tool of its set) and
   ``parallel_tool_calls=False`` (at most one call);
4. its arguments are a JSON object of literal values (positional ones placed in the order
   the tool declares them) and, given a ``validate`` function, validate against the tool's
   JSON Schema.

Anything else stays text. :func:`read_calls` says which: its :class:`Reading` holds the calls,
or ``refused`` says why text that is only calls cannot be lifted (the gate's
``tool_call_in_text`` fails such a draft, so a fast draft escalates).

Two entry points share the reader: strict, for the gate (:func:`parse_text_tool_calls`,
:func:`lift_text_tool_calls`), and tolerant, for the prompted-tools dialect of the backends
(:func:`tiered_router.calls._prompted.split_tool_calls`), which also reads single-quoted
(Python literal) call objects and a last ``<tool_call>`` tag left unclosed. Tolerance is in
syntax only; the lifting rules are the same. Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tiered_router.calls._choice import describe_choice, outside_choice
from tiered_router.calls._json import json_calls, named_json_calls
from tiered_router.calls._python import POSITIONAL, python_calls
from tiered_router.calls._xml import xml_calls
from tiered_router.turn import Completion, ToolCall, ToolSpec, Turn

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "Reading",
    "ToolsLike",
    "Validate",
    "lift_text_tool_calls",
    "parse_text_tool_calls",
    "lifted",
    "read_calls",
    "read_turn_calls",
    "split_thinking",
    "tool_specs",
]

TOOL_CALL_OPEN = "<tool_call>"
"""Opening tag of a call in the prompted-tools text protocol."""
TOOL_CALL_CLOSE = "</tool_call>"
"""Closing tag of a call in the prompted-tools text protocol."""

ToolsLike = Iterable[ToolSpec | Mapping[str, Any] | str] | None

Validate = Callable[[ToolSpec, dict[str, Any]], str | None]
"""Why a call's arguments do not fit its tool's schema, or ``None`` when they do."""

Calls = list[tuple[str, dict[str, Any]]]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n?```", re.DOTALL)
_TAG_OPEN = re.compile(r"<(tool_call|function_call|tool_calls|seed:tool_call)>")
_TAG_CLOSES = ("</tool_call>", "</function_call>", "</tool_calls>", "</seed:tool_call>")
_SPACE = re.compile(r"\s*")
_PREFIXES = ("<|python_tag|>", "[TOOL_CALLS]", "<tool_call>", "<|tool_call|>", "functools")
_MISTRAL = "[TOOL_CALLS]"
_ACTION = re.compile(r"\AAction:\s*")  # Command R: Action: ```json [...] ```
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


# -- tools and names ---------------------------------------------------------------------------


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


def _meant(written: str, specs: Mapping[str, ToolSpec]) -> list[str]:
    """The offered tools a written name may mean: itself when offered, else its aliases.

    An offered name matches exactly first (``functions.`` dropped, OpenAI's namespace); only
    when none does is ``a.b`` read for ``a_b`` (or the other way), which may match several.
    """
    bare = [written]
    if written.startswith(("functions.", "functions_")):
        bare.append(written[len("functions.") :])
    for name in bare:
        if name in specs:
            return [name]
    for name in bare:
        key = name.replace(".", "_")
        aliases = [offered for offered in specs if offered.replace(".", "_") == key]
        if aliases:
            return aliases
    return []


def _declared_name(written: str, specs: Mapping[str, ToolSpec]) -> str | None:
    """The offered tool a written name means, or ``None`` (none, or more than one alias)."""
    meant = _meant(written, specs)
    return meant[0] if len(meant) == 1 else None


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


# -- the whole answer: thinking, wrappers, pieces ----------------------------------------------


def split_thinking(text: str) -> tuple[str | None, str]:
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


def _unfenced(body: str) -> str:
    fenced = _FENCE.fullmatch(body)
    return fenced.group(2).strip() if fenced else body


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches


def _tag_bodies(body: str, *, tolerant: bool) -> list[str] | None:
    """The bodies of the call tags ``body`` is made of (whitespace between them aside).

    ``None`` when it holds anything else; with ``tolerant``, the last tag may be left open.
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
            if not tolerant or _TAG_OPEN.search(body, opening.end()):
                return None
            end = len(body)
        out.append(body[opening.end() : end].strip())
        pos = _skip_space(body, end + len(closing))
    return out or None


def _pieces(answer: str, *, tolerant: bool) -> list[tuple[str, bool]] | None:
    """``(piece, inside a call tag)`` for each piece of an answer made only of calls.

    Wrappers and whitespace are taken off; ``None`` when the answer holds anything else
    around them (prose, a fence that no format asks for, text outside the tags).
    """
    body = answer.strip()
    action = _ACTION.match(body)
    if action is not None:
        body = _unfenced(body[action.end() :])  # Command R asks for a fenced list
    elif body.startswith("```"):
        return None  # an example in a fence: shown, not called
    tagged = _tag_bodies(body, tolerant=tolerant)
    if tagged is not None:
        return [(piece, True) for piece in tagged]  # a fence inside a tag is not read
    if any(close in body for close in _TAG_CLOSES):
        return None  # tags with text outside them
    if body.startswith(_MISTRAL) and body[len(_MISTRAL) :].lstrip()[:1] not in ("[", "{"):
        return [(p.strip(), False) for p in body.split(_MISTRAL)[1:]]  # name{...} per marker
    for prefix in _PREFIXES:
        if body.startswith(prefix):
            rest = body[len(prefix) :].strip()
            if prefix != "functools" or rest.startswith("["):  # Phi-4-mini: functools[...]
                body = rest
    return [(body, False)]


def _written(answer: str, specs: Mapping[str, ToolSpec], *, tolerant: bool) -> Calls | None:
    """The calls (names as written) an answer is made of; ``None`` when it is anything else."""
    if not answer.strip() or not any(c in answer for c in "({<"):
        return None
    pieces = _pieces(answer, tolerant=tolerant)
    if pieces is None:
        return None

    def properties(written: str) -> Mapping[str, Any] | None:
        name = _declared_name(written, specs)
        props = specs[name].parameters.get("properties") if name is not None else None
        return props if isinstance(props, Mapping) else None

    calls: Calls = []
    for piece, tagged in pieces:
        found = (
            json_calls(piece, tagged=tagged, tolerant=tolerant)
            if piece[:1] in "[{"
            else named_json_calls(piece)
        )
        if found is None:
            found = xml_calls(piece, properties)
        if found is None:
            found = python_calls(piece, literal_only=True)
        if not found:
            return None
        calls.extend(found)
    return calls


# -- the rules ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    """What :func:`read_calls` found in a text.

    Attributes:
        calls: The calls to lift, ``(offered tool, arguments)``; empty when none may be.
        thinking: The text of a leading ``<think>`` block, if any.
        refused: Why an answer made only of calls cannot be lifted (an unoffered tool,
            arguments that do not fit, ``tool_choice``); ``None`` otherwise.
    """

    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    thinking: str | None = None
    refused: str | None = None

    def tool_calls(self, id_prefix: str) -> tuple[ToolCall, ...]:
        """The calls as :class:`ToolCall` objects with ids ``id_prefix0``, ``id_prefix1``..."""
        return tuple(
            ToolCall(id=f"{id_prefix}{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(self.calls)
        )


def _choice_problem(choice: Any, names: Sequence[str], parallel: Any) -> str | None:
    other = outside_choice(choice, names)  # a named function, or an allowed_tools set
    if other:
        return f"{describe_choice(choice)} but the text calls {', '.join(other)}"
    if parallel is False and len(names) > 1:
        return f"parallel_tool_calls is false but the text holds {len(names)} calls"
    return None


def read_calls(
    text: str,
    tools: ToolsLike,
    *,
    tolerant: bool = False,
    tool_choice: Any = None,
    parallel_tool_calls: Any = None,
    validate: Validate | None = None,
) -> Reading:
    """Read ``text`` under the lifting rules (see the module docstring).

    Args:
        text: A draft's or a reply's text.
        tools: The offered tools (specs, OpenAI tool dicts or names).
        tolerant: Also read single-quoted call objects and a last tag left open.
        tool_choice: The turn's ``tool_choice``.
        parallel_tool_calls: The turn's ``parallel_tool_calls``.
        validate: Checks a call's arguments against its tool's schema.

    Returns:
        The :class:`Reading`: calls to lift, or why none may be.
    """
    specs = tool_specs(tools)
    thinking, answer = split_thinking(text)
    if not specs or tool_choice == "none":
        return Reading(thinking=thinking)
    written = _written(answer, specs, tolerant=tolerant)
    if written is None:
        return Reading(thinking=thinking)
    calls, problem = _resolved(written, specs, validate)
    if problem is None:
        problem = _choice_problem(tool_choice, [n for n, _ in calls], parallel_tool_calls)
    if problem is not None:
        return Reading(thinking=thinking, refused=problem)
    return Reading(calls=tuple(calls), thinking=thinking)


def _resolved(
    written: Calls, specs: Mapping[str, ToolSpec], validate: Validate | None
) -> tuple[Calls, str | None]:
    """Each call's offered tool and its arguments (positional ones named), or the problem."""
    calls: Calls = []
    for name_written, args in written:
        name = _declared_name(name_written, specs)
        meant = _meant(name_written, specs) if name is None else []
        if len(meant) > 1:
            return [], f"the text calls {name_written!r}, which may be {' or '.join(meant)}"
        if name is None:
            offered = ", ".join(sorted(specs))
            return [], f"the text calls {name_written!r}, a tool not offered (offered: {offered})"
        placed = _place(args, specs[name])
        if placed is None:
            return [], f"the text's positional arguments to {name!r} do not fit its parameters"
        if not _strict_json(placed):
            return [], f"the text's arguments to {name!r} are not JSON (NaN, bytes, a set, ...)"
        problem = validate(specs[name], placed) if validate is not None else None
        if problem is not None:
            return [], f"the text's call to {name!r}: {problem}"
        calls.append((name, placed))
    return calls, None


def _strict_json(args: dict[str, Any]) -> bool:
    """Whether ``args`` is JSON data (RFC 8259: no ``NaN`` or ``Infinity``)."""
    try:
        json.dumps(args, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def lifted(completion: Completion, reading: Reading, *, id_prefix: str) -> Completion:
    """``completion`` with ``reading``'s calls as its tool calls, no text, its thinking kept."""
    return replace(
        completion,
        text="",
        tool_calls=reading.tool_calls(id_prefix),
        finish_reason="tool_calls",
        reasoning=completion.reasoning if completion.reasoning is not None else reading.thinking,
    )


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
        answer (wrappers, whitespace and a leading ``<think>...</think>`` block aside) is
        calls to declared tools; ``None`` when it is anything else, including a call to a
        tool that was not declared or a call shown in a Markdown fence.

    Example:
        ```python
        calls = parse_text_tool_calls('[get_weather(city="Paris")]', ["get_weather"])
        calls[0].name, calls[0].arguments     # ("get_weather", '{"city": "Paris"}')
        ```
    """
    reading = read_calls(text, tools)
    return reading.tool_calls("text_call_") if reading.calls else None


def read_turn_calls(
    completion: Completion, turn: Turn, *, validate: Validate | None = None
) -> Reading:
    """:func:`read_calls` of a draft for ``turn`` (its tools, ``tool_choice``, parallelism).

    An empty :class:`Reading` for a draft that made calls, has no text, or a turn without
    tools.
    """
    if completion.tool_calls or not turn.tools or not completion.text:
        return Reading()
    return read_calls(
        completion.text,
        turn.tools,
        tool_choice=turn.params.get("tool_choice"),
        parallel_tool_calls=turn.params.get("parallel_tool_calls"),
        validate=validate,
    )


def lift_text_tool_calls(
    completion: Completion, turn: Turn, *, validate: Validate | None = None
) -> Completion:
    """Return ``completion`` with the calls its text holds as real tool calls.

    A draft that made no call, for a turn that offers tools, whose whole answer is calls
    that pass the lifting rules (the turn's ``tool_choice`` and ``parallel_tool_calls``, and
    ``validate`` when given) comes back with those calls and no text; a leading
    ``<think>...</think>`` block becomes its ``reasoning`` (unless it has one). Any other
    draft comes back unchanged (the same object).
    """
    reading = read_turn_calls(completion, turn, validate=validate)
    return lifted(completion, reading, id_prefix="text_call_") if reading.calls else completion
