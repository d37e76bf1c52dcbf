r"""A draft's exact form: what the caller would receive, compared without normalisation.

The answer key (:mod:`tiered_router.panels._keys`) finds drafts that give the same answer
through a normalisation that merges what says the same (``"Celsius"`` and ``"celsius"``, an
optional argument the request never asked for, a qualifier after a comma, the text around a
final answer, the order of a parallel set of calls). Agreement on the key says the drafts
agree; it does not say which draft's words to return, and the normalisation merges what must
never be vouched for: a recipient list (``"bob@corp.example, attacker@evil.test"``), an
unrequested ``bcc``, a path's case or trailing ``/``, a command (``rm -rf /tmp/build /``), a
JSON key given twice, an instruction before or after "The answer is 42.", the order of
``delete`` and ``backup``. So a panel also compares each draft's exact form
(:func:`exact_form`), and returns only a draft whose exact form enough of its drafts gave
(:func:`tiered_router.panels.tally`'s ``exact=``):

- **tool calls**: each call's name as written and its arguments as parsed JSON (strict: no
  ``NaN``, no key given twice; ``2.0`` is the number ``2``, as every client reads it; an
  optional argument set to exactly its schema default is left out, as the tool runs the
  same), **in the order written** (an agent loop runs them in that order);
- **JSON outputs**: the parsed value (strict), keys in any order;
- **final answers**: the answer statement, word for word (whitespace collapsed): the
  sentence that states the answer (from its start: "The answer is 42.", "So we get
  \boxed{42}.", "#### 42") and everything after it; a bare answer is its whole text;
- ``None`` when the draft has none of these in a form read strictly: it confirms nothing.

Whatever else the caller would get with that answer is a **part** of the draft
(:func:`draft_parts`): the text sent alongside native tool calls (``content``), the text
before a final answer's statement (``preamble``), a leading ``<think>`` block
(``thinking``), the reasoning summary (``reasoning``) and a ``refusal``. The panel returns
a part only when enough of its agreeing drafts gave it word for word (whitespace aside);
:func:`without_parts` takes the others off, and the trace says so. So a panel never returns
text that only a minority of its drafts wrote, anywhere in the completion.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tiered_router import _limits
from tiered_router.calls._text import (
    _unfenced,
    parse_text_tool_calls,
    split_thinking,
    tool_specs,
)
from tiered_router.panels._final import (
    _BOXED,
    _HASHES,
    _MARKERS,
    _MAX_TEXT,
    _last_boxed,
    final_answer,
)
from tiered_router.turn import Completion, ToolCall, Turn

__all__ = [
    "PARTS",
    "draft_parts",
    "exact_form",
    "majority_only",
    "unshared_parts",
    "without_parts",
]

_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")
PARTS = ("content", "preamble", "thinking", "reasoning", "refusal")
"""The parts of a draft beyond its exact form (see the module docstring)."""


def exact_form(completion: Completion, turn: Turn) -> str | None:
    """Return ``completion``'s answer as the caller would receive it, for exact comparison.

    Args:
        completion: The draft.
        turn: The turn it answers (its tools and ``response_format``).

    Returns:
        A string equal for two drafts exactly when they give the caller the same calls in
        the same order, the same JSON, or the same final answer statement word for word;
        ``None`` when the draft has no answer read strictly (see the module docstring).
        What else the draft carries is in :func:`draft_parts`.
    """
    calls = completion.tool_calls
    if not calls and turn.tools and completion.text:
        calls = parse_text_tool_calls(completion.text, turn.tools) or ()
    if calls:
        return _calls_form(calls, turn.tools)
    text = split_thinking(completion.text)[1].strip()
    if not text:
        return None
    fmt = turn.response_format
    if fmt and fmt.get("type") in ("json_object", "json_schema"):
        value = _strict(_unfenced(text))
        return None if value is _UNREAD else "json:" + _dump(value)
    return _final_form(text)


def draft_parts(completion: Completion, turn: Turn) -> dict[str, str]:
    """What else the caller would get with ``completion``'s answer, part by part.

    Args:
        completion: The draft.
        turn: The turn it answers.

    Returns:
        ``{part: text}`` for each part of :data:`PARTS` the draft has (whitespace
        collapsed): ``content`` (text sent with native tool calls), ``preamble`` (text
        before a final answer's statement), ``thinking`` (a leading ``<think>`` block),
        ``reasoning`` and ``refusal``. Two drafts give the same part when the texts are
        equal.
    """
    parts: dict[str, str] = {}
    text = completion.text
    if completion.tool_calls:
        if text.strip():
            parts["content"] = _collapsed(text)
    else:
        thinking, answer = split_thinking(text)
        if thinking is not None:
            parts["thinking"] = _collapsed(thinking)
        fmt = turn.response_format
        json_turn = bool(fmt and fmt.get("type") in ("json_object", "json_schema"))
        text_calls = bool(turn.tools and text and parse_text_tool_calls(text, turn.tools))
        if not json_turn and not text_calls:
            start = _statement_start(answer.strip())
            if start:
                parts["preamble"] = _collapsed(answer.strip()[:start])
    if completion.reasoning and completion.reasoning.strip():
        parts["reasoning"] = _collapsed(completion.reasoning)
    if completion.refusal and completion.refusal.strip():
        parts["refusal"] = _collapsed(completion.refusal)
    return parts


def unshared_parts(
    draft: Completion, members: Sequence[Completion], turn: Turn, *, needed: int
) -> tuple[str, ...]:
    """The parts of ``draft`` that fewer than ``needed`` of ``members`` gave word for word.

    Args:
        draft: One of ``members``, about to be returned.
        members: The drafts that gave the agreed answer (``draft`` among them).
        turn: The turn.
        needed: The drafts that must give a part for it to be returned.
    """
    given = [draft_parts(m, turn) for m in members]
    mine = draft_parts(draft, turn)
    return tuple(
        part
        for part in PARTS
        if part in mine and sum(g.get(part) == mine[part] for g in given) < needed
    )


def majority_only(
    members: Sequence[Completion], turn: Turn, *, needed: int, k: int
) -> list[Completion]:
    """Each of ``members`` with only the parts at least ``needed`` of them gave.

    The others are taken off, each draft's conversions saying so.

    Args:
        members: The drafts of the agreed answer, in any order.
        turn: The turn.
        needed: The drafts agreement needs.
        k: The panel's size (for the trace).
    """
    why = f"fewer than {needed} of the {k} drafts gave it"
    return [
        without_parts(m, unshared_parts(m, members, turn, needed=needed), why=why) for m in members
    ]


def without_parts(completion: Completion, parts: Collection[str], *, why: str) -> Completion:
    """``completion`` with ``parts`` (names of :data:`PARTS`) taken off; its trace says why.

    Args:
        completion: The draft.
        parts: The parts to take off.
        why: Why, for the conversion recorded (``"1 of 3 drafts gave it, 2 needed"``).
    """
    if not parts:
        return completion
    text = completion.text
    if "content" in parts and completion.tool_calls:
        text = ""
    thinking, answer = split_thinking(text)
    head = text[: len(text) - len(answer)] if thinking is not None else ""
    if "thinking" in parts and thinking is not None:
        head = ""
    if "preamble" in parts:
        answer = answer.strip()
        answer = answer[_statement_start(answer) :]
    text = head + answer if head else answer
    return replace(
        completion,
        text=text,
        reasoning=None if "reasoning" in parts else completion.reasoning,
        refusal=None if "refusal" in parts else completion.refusal,
        conversions=(
            *completion.conversions,
            f"panel: {', '.join(p for p in PARTS if p in parts)} dropped ({why})",
        ),
    )


def _collapsed(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


_UNREAD: Any = object()


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} given twice")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _number(text: str) -> int | float:
    """A JSON number as every client reads it: ``2.0`` is ``2``; beyond a float's range none."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]!r} is beyond a float's range")
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _strict(text: str) -> Any:
    """``text`` parsed as JSON, depth bounded, no key twice, no ``NaN``; else ``_UNREAD``."""
    try:
        _limits.loads(text)  # bounded depth first: the plain parser below is not
        return json.loads(
            text, object_pairs_hook=_unique, parse_constant=_constant, parse_float=_number
        )
    except (ValueError, RecursionError):
        return _UNREAD


def _calls_form(calls: tuple[ToolCall, ...], tools: Any) -> str | None:
    specs = tool_specs(tools)
    written = []
    for call in calls:
        args = _strict(call.arguments) if call.arguments.strip() else {}
        if args is _UNREAD:
            return None
        spec = specs.get(call.name)
        written.append(_dump([call.name, _unset_defaults(args, spec and spec.parameters)]))
    return "calls:[" + ",".join(written) + "]"  # in order: the caller runs them in order


def _unset_defaults(value: Any, schema: Any) -> Any:
    """``value`` without the optional properties set to exactly their schema default.

    The tool runs the same either way; anything else is compared as written.
    """
    if not isinstance(value, dict) or not isinstance(schema, Mapping):
        return value
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    out = {}
    for key, item in value.items():
        prop = props.get(key)
        if (
            key not in needed
            and isinstance(prop, Mapping)
            and "default" in prop
            and _dump(item) == _dump(prop["default"])
        ):
            continue
        out[key] = _unset_defaults(item, prop)
    return out


def _final_form(text: str) -> str | None:
    if final_answer(text) is None:
        return None
    return "final:" + _collapsed(text[_statement_start(text) :])


def _statement_start(text: str) -> int:
    r"""Where the sentence stating ``text``'s final answer starts (0: a bare answer).

    The answer is found as ``final_answer`` finds it (the last ``\boxed{...}``, ``####``
    line or marker); its statement starts after the end of the sentence or line before it.
    """
    base = max(0, len(text) - _MAX_TEXT)  # final_answer reads the end of a long text only
    window = text[base:]
    at = _answer_at(window)
    if at is None:
        return 0
    start = 0
    for end in _SENTENCE_END.finditer(window, 0, at):
        start = end.end()
    while start < at and window[start].isspace():
        start += 1
    return base + start


def _answer_at(text: str) -> int | None:
    r"""Where the answer ``final_answer`` reads starts: its marker, ``####`` or ``\boxed{``."""
    if _last_boxed(text) is not None:  # the last \boxed{...} is whole: final_answer reads it
        return text.rfind(_BOXED)
    hashes = list(_HASHES.finditer(text))
    if hashes:
        return hashes[-1].start()
    marked = list(_MARKERS.finditer(text))
    if marked:
        return marked[-1].start()
    return None
