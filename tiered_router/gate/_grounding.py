"""Checks that a draft's tool calls are grounded in the request.

- ``argument_grounding``: a number-typed argument that is a percentage figure of the
  request taken as a whole number (``5`` for "5%") when the parameter does not say it
  takes percentages; optionally, a date whose year the conversation never states;
- ``requested_tools`` (not for step-by-step agents, see its docstring): a declared tool
  the request asks for by name is not called.

Every check is pure and reads only the completion and the turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.gate._calls import (
    _arguments,
    _conversation,
    _flag,
    _Grounding,
    _name_words,
    _properties,
    _short,
    _types,
    _words,
    grounding_for,
)
from tiered_router.gate._fit import call_grounded
from tiered_router.turn import Completion, Turn, message_text

__all__ = ["ArgumentGroundingCheck", "RequestedToolsCheck"]


_PERCENT_MARKS = ("%", "percent", "per cent")
_SAYS_PCT = re.compile(r"(?<![a-z])pct(?![a-z])")  # "pct", "rate_pct", not "except"
_ISO_DATE = re.compile(
    r"(?<!\d)((?:1[6-9]|20)\d\d)-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12]\d|3[01]))?(?!\d)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgumentGroundingCheck:
    """``argument_grounding``: argument values agree with what the conversation states.

    Fails on (reasons name the call and the argument: ``tool_calls[0] (f): $.rate: ...``):

    - with ``percent_scale``: a ``number`` parameter given a percentage figure of the
      conversation as a whole number (``rate=5`` for "an interest rate of 5%") when neither
      the parameter's name nor its description says it takes a percentage. A rate, yield
      or probability is a fraction unless the tool says otherwise; ``5`` for 5 % is off
      by a factor of 100. (``integer`` parameters cannot hold a fraction and are skipped.)
    - with ``unstated_years`` (off by default): a string argument holding an ISO date
      (``2023-11-03``) whose year appears nowhere in the conversation: the model made up
      a date the user gave only relatively ("next Friday") or without a year. Off by
      default because a frontier model without today's date guesses the same way, so
      escalating rarely fixes it; with today's date in the system prompt such dates are
      grounded and the check is safe to turn on.

    - with ``unstated_calls``: a call none of whose argument values is stated in the
      conversation (no string, none of a string's words of 4+ letters, no number): the
      call answers some other request. Flags, ``null``, 0, 1 and empty strings are not
      counted; a call with nothing else passes.

    Only top-level arguments are read; calls whose arguments do not parse are left to
    ``tool_arguments``.

    Attributes:
        percent_scale: Check percentages passed as whole numbers.
        unstated_years: Check dates whose year the conversation does not state.
        unstated_calls: Check calls none of whose values the conversation states.
    """

    name: ClassVar[str] = "argument_grounding"
    percent_scale: bool = True
    unstated_years: bool = False
    unstated_calls: bool = True

    def __post_init__(self) -> None:
        _flag(self.percent_scale, f"{self.name}.percent_scale")
        _flag(self.unstated_years, f"{self.name}.unstated_years")
        _flag(self.unstated_calls, f"{self.name}.unstated_calls")

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the arguments that disagree with the conversation, or ``None``."""
        if not completion.tool_calls:
            return None
        candidates: list[tuple[str, str, Any, str]] = []  # (where, param, value, kind)
        tools: dict[str, Mapping[str, Any]] | None = None
        unstated: list[str] = []
        grounding: _Grounding | None = None
        for i, name, args in _arguments(completion):
            if self.unstated_calls and args:
                if grounding is None:
                    grounding = grounding_for(_conversation(turn))
                tools = _properties(turn) if tools is None else tools
                if call_grounded(args, grounding, tools.get(name)) is False:
                    unstated.append(
                        f"tool_calls[{i}] ({name}): none of its argument values is stated in "
                        "the conversation: the call answers some other request"
                    )
            props: Mapping[str, Any] | None = None
            for param, value in args.items():
                vtype = type(value)  # exact types: bool is not a number here
                if vtype is int or vtype is float:
                    if not self.percent_scale or abs(value) < 1:
                        continue
                    if props is None:
                        tools = _properties(turn) if tools is None else tools
                        props = tools.get(name, {})
                    if _unlabelled_number(param, props.get(param)):
                        candidates.append((f"tool_calls[{i}] ({name})", param, value, "percent"))
                elif vtype is str and self.unstated_years and _ISO_DATE.search(value):
                    candidates.append((f"tool_calls[{i}] ({name})", param, value, "date"))
        if not candidates:
            return unstated or None
        conversation = _conversation(turn)
        reasons = unstated
        for where, param, value, kind in candidates:
            if kind == "percent":
                if _percent_only(conversation, float(value)):
                    reasons.append(
                        f"{where}: $.{param}: {value:g} is the conversation's {value:g}% "
                        f"written as a whole number, and {param!r} does not say it takes a "
                        f"percentage: the fraction {value / 100:g} is expected"
                    )
            else:
                for match in _ISO_DATE.finditer(value):
                    if match.group(1) not in conversation:
                        reasons.append(
                            f"{where}: $.{param}: the year {match.group(1)} of {_short(value)!r} "
                            "appears nowhere in the conversation (a guessed date)"
                        )
                        break
        return reasons or None


def _percent_only(conversation: str, value: float) -> bool:
    """Whether ``value`` is written in the conversation as a percentage and only so.

    ``5`` for "a rate of 5%" is; for "5% over 5 years" it is not (the 5 may be the years).
    Finds the number's spelling with ``str.find`` and reads around it: scanning the whole
    text with a regex costs far more on a long conversation.
    """
    token = f"{abs(value):g}"
    as_percent = False
    pos = conversation.find(token)
    while pos != -1:
        end = pos + len(token)
        before = conversation[pos - 1] if pos else " "
        after = conversation[end : end + 2]
        inside = before.isalnum() or before in "._" or after[:1].isalnum()
        if not inside and not (after[:1] in ".," and after[1:2].isdigit()):
            tail = conversation[end : end + 12].lstrip().lower()
            if not tail.startswith(_PERCENT_MARKS):
                return False
            as_percent = True
        pos = conversation.find(token, pos + 1)
    return as_percent


def _unlabelled_number(param: str, prop: object) -> bool:
    """Whether ``prop`` is a ``number`` parameter that does not say it takes percentages."""
    if not isinstance(prop, Mapping) or "number" not in _types(prop):
        return False
    said = f"{param} {prop.get('description') or ''} {prop.get('title') or ''}".lower()
    if "percent" in said or "%" in said:
        return False
    return "pct" not in said or not _SAYS_PCT.search(said)


# ------------------------------------------------------------------ requested_tools


def _request(turn: Turn) -> tuple[str, set[str]]:
    """Return the latest user message's text and the tools called since it was sent."""
    called: set[str] = set()
    for message in reversed(turn.messages):
        role = message.get("role")
        if role == "user":
            return message_text(message), called
        if role != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                called.add(fn["name"])
    return "", called


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestedToolsCheck:
    """``requested_tools``: every declared tool the request asks for by name is called.

    A tool counts as requested when every word of its name (split at ``_``, ``.``, ``-``
    and camelCase; plurals folded) appears in the latest user message, and its name has at
    least ``min_words`` words: "display briefs of the cases" requests
    ``briefs_display_cases``, "fit a linear regression model" requests
    ``linear_regression_fit``. The check fails a draft that makes tool calls but none to a
    requested tool (counting calls made since that user message). A draft without tool
    calls passes (``tool_call_in_text`` and the text checks judge prose).

    It assumes every call the request needs is made in one response, as in single-shot
    and parallel function calling. Do not use it for step-by-step agents that call one tool,
    read its result and then call the next ("find the book, then reserve it"): their first
    draft would fail it, and escalate, although it is right.

    Attributes:
        min_words: Fewest words a tool name needs to count as requested when they all
            appear (one-word names such as ``search`` are too common to tell).
    """

    name: ClassVar[str] = "requested_tools"
    min_words: int = 2

    def __post_init__(self) -> None:
        value = self.min_words
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{self.name}.min_words: must be an integer >= 1, got {value!r}")

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return the requested tools the draft did not call, or ``None``."""
        if not completion.tool_calls or not turn.tools or len(turn.tools) < 2:
            return None
        drafted = {c.name for c in completion.tool_calls}
        wanted = [
            (tool.name, need)
            for tool in turn.tools
            if tool.name not in drafted and len(need := _name_words(tool.name)) >= self.min_words
        ]
        if not wanted:
            return None
        text, called = _request(turn)
        words = _words(text)
        missing = [name for name, need in wanted if name not in called and need <= words]
        if not missing:
            return None
        names = ", ".join(repr(n) for n in missing)
        return (
            f"the request asks for {names} (every word of the name is in it) but the draft "
            f"called only {', '.join(sorted(drafted))}"
        )
