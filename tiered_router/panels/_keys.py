"""The answer key of a draft: what it answered, in a form two drafts can be compared in.

:func:`answer_key` reads a completion for a turn and returns an :class:`AnswerKey`; two
drafts give the same answer exactly when their keys are equal. What counts as the same is
set out in docs/panels.md:

- **tool calls** (native, or written as text in any format the gate's strict reader knows):
  each call's declared name and its arguments under the tool's schema
  (:func:`tiered_router.panels._values.canonical`), the calls of a parallel set in any order;
- **JSON outputs** (``response_format`` ``json_object`` / ``json_schema``): the parsed value
  under the schema;
- **final answers** in prose: a number, an option letter, a boxed value, "the answer is ...",
  a date (:func:`tiered_router.panels._final.final_answer`);
- anything else is **not comparable**: prose with no checkable answer, arguments or JSON that
  do not parse. A panel never agrees on it.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tiered_router import _limits
from tiered_router.calls._text import (
    _declared_name,
    _unfenced,
    parse_text_tool_calls,
    split_thinking,
    tool_specs,
)
from tiered_router.panels._final import final_answer
from tiered_router.panels._values import Request, canonical
from tiered_router.turn import Completion, ToolCall, ToolSpec, Turn, message_text

__all__ = ["AnswerKey", "AnswerKind", "answer_key"]

AnswerKind = Literal["tool_calls", "json", "final", "not_comparable"]
"""What sort of answer a draft gave."""

_DETAIL = 160


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerKey:
    """A draft's answer in canonical form: equal keys mean the same answer.

    Example:
        ```python
        a = answer_key(draft_a, turn)
        b = answer_key(draft_b, turn)
        a == b  # both drafts called the same tool with the same arguments
        ```

    Attributes:
        kind: ``tool_calls``, ``json``, ``final`` or ``not_comparable``.
        value: The canonical answer (compact JSON for calls and JSON outputs,
            ``number:42`` / ``option:B`` / ``date:2021-05-01`` / ``text:...`` for final
            answers); ``""`` when not comparable.
        detail: A short, readable form of the answer (or why there is none) for traces.
    """

    kind: AnswerKind
    value: str
    detail: str = ""

    @property
    def comparable(self) -> bool:
        """Whether the key holds a checkable answer."""
        return self.kind != "not_comparable"


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _short(text: str) -> str:
    return text if len(text) <= _DETAIL else text[: _DETAIL - 3] + "..."


def _not_comparable(why: str) -> AnswerKey:
    return AnswerKey(kind="not_comparable", value="", detail=_short(why))


def answer_key(completion: Completion, turn: Turn) -> AnswerKey:
    """Return the answer a draft gives to a turn, in canonical form.

    Args:
        completion: The draft.
        turn: The turn it answers (its tools' schemas and ``response_format`` say how
            arguments and JSON outputs are compared).

    Returns:
        The draft's :class:`AnswerKey`.
    """
    calls = completion.tool_calls
    if not calls and turn.tools and completion.text:
        calls = parse_text_tool_calls(completion.text, turn.tools) or ()
    if calls:
        return _calls_key(calls, turn.tools or (), _request(turn))
    text = split_thinking(completion.text)[1].strip()
    if not text:
        why = "refusal" if completion.refusal else "empty answer"
        return _not_comparable(why)
    fmt = turn.response_format
    if fmt and fmt.get("type") in ("json_object", "json_schema"):
        return _json_key(text, fmt)
    answer = final_answer(text)
    if answer is None:
        return _not_comparable(f"prose with no checkable answer ({len(text)} chars)")
    return AnswerKey(kind="final", value=answer, detail=_short(answer))


def _request(turn: Turn) -> Request:
    """What the user asked: the text of the user messages since the last assistant turn."""
    texts: list[str] = []
    for message in reversed(turn.messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            texts.append(message_text(message))
    if not texts:  # a turn after tool results: the whole conversation's user messages
        texts = [message_text(m) for m in turn.messages if m.get("role") == "user"]
    return Request("\n".join(reversed(texts)))


def _calls_key(calls: tuple[ToolCall, ...], tools: Any, request: Request) -> AnswerKey:
    specs = tool_specs(tools)
    written: list[str] = []
    shown: list[str] = []
    for call in calls:
        name = _declared_name(call.name, specs) or call.name
        spec = specs.get(name)
        try:
            args = call.parsed_arguments()
        except ValueError:
            return _not_comparable(f"{name}: arguments are not JSON")
        if not isinstance(args, dict):
            return _not_comparable(f"{name}: arguments are not a JSON object")
        canon = canonical(args, _parameters(spec), request=request)
        written.append(_dump([name, canon]))
        shown.append(f"{name}({_dump(canon)})")
    # the calls of a parallel set in any order say the same: compare them sorted
    order = sorted(range(len(written)), key=written.__getitem__)
    value = "[" + ",".join(written[i] for i in order) + "]"
    return AnswerKey(
        kind="tool_calls", value=value, detail=_short("; ".join(shown[i] for i in order))
    )


def _parameters(spec: ToolSpec | None) -> Mapping[str, Any] | None:
    return spec.parameters if spec is not None else None


def _json_key(text: str, fmt: Mapping[str, Any]) -> AnswerKey:
    try:
        value = _limits.loads(_unfenced(text))
    except (ValueError, RecursionError):
        return _not_comparable("output is not JSON")
    schema = None
    spec = fmt.get("json_schema")
    if isinstance(spec, Mapping):
        schema = spec.get("schema")
    canon = _dump(canonical(value, schema))
    return AnswerKey(kind="json", value=canon, detail=_short(canon))
