"""A draft's exact form: what the caller would receive, compared without normalisation.

The answer key (:mod:`tiered_router.panels._keys`) finds drafts that give the same answer
through a normalisation that merges what says the same (``"Celsius"`` and ``"celsius"``, an
optional argument the request never asked for, a qualifier after a comma, text after a final
answer). Agreement on the key says the drafts agree; it does not say which draft's words to
return, and the normalisation merges what must never be vouched for: a recipient list
(``"bob@corp.example, attacker@evil.test"``), an unrequested ``bcc``, a path's case or
trailing ``/``, a command (``rm -rf /tmp/build /``), a JSON key given twice, an instruction
after "The answer is 42.". So a panel also compares each draft's exact form
(:func:`exact_form`), and returns only a draft whose exact form enough of its drafts gave
(:func:`tiered_router.panels.tally`'s ``exact=``):

- **tool calls**: each call's name as written and its arguments as parsed JSON (strict: no
  ``NaN``, no key given twice; ``2.0`` is the number ``2``, as every client reads it; an
  optional argument set to exactly its schema default is left out, as the tool runs the
  same), the calls of a parallel set in any order;
- **JSON outputs**: the parsed value (strict), keys in any order;
- **final answers**: the answer key's value, the marked answer as written when it is text
  (``text:...``), and everything written after the answer (whitespace collapsed, trailing
  punctuation dropped);
- ``None`` when the draft has none of these in a form read strictly: it confirms nothing.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
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
    _TRAILING,
    _first_sentence,
    final_answer,
)
from tiered_router.turn import Completion, ToolCall, Turn

__all__ = ["exact_form"]

_SPACE = re.compile(r"\s+")


def exact_form(completion: Completion, turn: Turn) -> str | None:
    """Return ``completion``'s answer as the caller would receive it, for exact comparison.

    Args:
        completion: The draft.
        turn: The turn it answers (its tools and ``response_format``).

    Returns:
        A string equal for two drafts exactly when they give the caller the same calls,
        JSON or final answer with the same text after it; ``None`` when the draft has no
        answer read strictly (see the module docstring).
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
    return "calls:[" + ",".join(sorted(written)) + "]"


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
    answer = final_answer(text)
    if answer is None:
        return None
    span = _answer_span(text[-_MAX_TEXT:].strip())
    if span is None:  # a bare answer: the whole text is the answer
        return f"final:{answer}"
    written, after = span
    shown = _SPACE.sub(" ", written).strip() if answer.startswith("text:") else ""
    tail = _SPACE.sub(" ", after).strip().strip(_TRAILING)
    return "final:" + _dump([answer, shown, tail])


def _answer_span(text: str) -> tuple[str, str] | None:
    """The answer as written and the text after it, found as ``final_answer`` finds it."""
    start = text.rfind(_BOXED)
    if start >= 0:
        depth, pos = 1, start + len(_BOXED)
        for i in range(pos, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[pos:i], text[i + 1 :]
    hashes = list(_HASHES.finditer(text))
    if hashes:
        return hashes[-1].group(1), text[hashes[-1].end() :]
    marked = list(_MARKERS.finditer(text))
    if marked:
        found = marked[-1]
        sentence = _first_sentence(found.group(1))
        begin = found.start(1) + found.group(1).find(sentence) if sentence else found.start(1)
        return sentence, text[begin + len(sentence) :]
    return None
