"""Checks of what a draft's tool calls mean, beyond their schema.

A JSON Schema sees one call at a time and no conversation. These checks look at the
draft's calls together and against the turn (its tools and its messages), for mistakes a
schema cannot see and that need no reference answer:

- ``tool_call_in_text``: the draft wrote a call to a declared tool in its text (a code
  block, ``functions.get_weather(city="Paris")``, ``{"name": "get_weather", ...}``)
  instead of making it;
- ``redundant_tool_calls``: the same call twice; one call per element of a list the tool
  takes whole; the same call again with extra arguments the request never mentions;
- ``argument_grounding``: a number-typed argument that is a percentage figure of the
  request taken as a whole number (``5`` for "5%") when the parameter does not say it
  takes percentages; optionally, a date whose year the conversation never states;
- ``requested_tools`` (not for step-by-step agents, see its docstring): a declared tool
  the request asks for by name is not called.

Every check is pure and reads only the completion and the turn.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.gate._schema import parse_json
from tiered_router.turn import Completion, Turn, message_text

__all__ = [
    "ArgumentGroundingCheck",
    "RedundantToolCallsCheck",
    "RequestedToolsCheck",
    "ToolCallInTextCheck",
]

_SNIPPET = 60


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: must be true or false, got {value!r}")
    return value


def _conversation(turn: Turn) -> str:
    return "\n".join(message_text(m) for m in turn.messages)


def _arguments(completion: Completion) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Yield ``(index, tool name, arguments)`` for every call whose arguments are an object.

    Calls whose arguments do not parse are left to ``tool_arguments``, which reports them.
    """
    for i, call in enumerate(completion.tool_calls):
        text = call.arguments
        try:
            args = parse_json(text) if text.strip() else {}
        except ValueError:
            continue
        if isinstance(args, dict):
            yield i, call.name, args


def _properties(turn: Turn) -> dict[str, Mapping[str, Any]]:
    """Map each declared tool to its parameters' ``properties`` (``{}`` when it has none)."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in turn.tools or ():
        props = tool.parameters.get("properties") if isinstance(tool.parameters, Mapping) else None
        out[tool.name] = props if isinstance(props, Mapping) else {}
    return out


def _types(prop: object) -> frozenset[str]:
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    if isinstance(kind, str):
        return frozenset((kind,))
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    return frozenset()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else _canonical(value)
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 3] + "..."


# ---------------------------------------------------------------- tool_call_in_text


_IDENTIFIER = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.")
_JSON_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"'\n]{1,200})["']""")


@functools.lru_cache(maxsize=256)
def _spellings(names: tuple[str, ...]) -> dict[str, str]:
    # providers forbid "." in tool names, so a namespaced "math.factorial" is declared as
    # "math_factorial" and written back with either separator in prose and code
    return {n.replace(".", "_"): n for n in names}


def _written_call(text: str, spellings: Mapping[str, str]) -> tuple[int, str] | None:
    """Find ``tool(args...)`` in ``text``: ``(start, tool)`` for the first declared tool.

    Walks back from each ``(`` over the identifier before it (a regex scan of the whole
    text costs ~100x more on long prose); ``functions.get_weather`` and ``obj.tool`` match
    ``get_weather`` and ``tool`` too. A call needs arguments: ``get_weather()`` in a
    sentence is a mention, not a call.
    """
    pos = text.find("(")
    while pos != -1:
        j = pos - 1
        while j >= 0 and text[j] in " \t\r\n":
            j -= 1
        k = j
        while k >= 0 and text[k] in _IDENTIFIER:
            k -= 1
        rest = text[pos + 1 : pos + 80].lstrip()
        if k < j and rest and rest[0] != ")":
            parts = text[k + 1 : j + 1].split(".")
            for first in range(len(parts)):
                tool = spellings.get("_".join(parts[first:]))
                if tool is not None:
                    return k + 1 + sum(len(p) + 1 for p in parts[:first]), tool
        pos = text.find("(", pos + 1)
    return None


def _json_call(text: str, spellings: Mapping[str, str]) -> tuple[int, str] | None:
    """Find ``{"name": "tool", ...}`` naming a declared tool in ``text``."""
    if "name" not in text:
        return None
    for match in _JSON_NAME.finditer(text):
        tool = spellings.get(match.group(1).replace(".", "_"))
        if tool is not None:
            return match.start(), tool
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallInTextCheck:
    """``tool_call_in_text``: a draft that made no call did not write one as text instead.

    Fails when the draft has no tool call but its text calls a declared tool: the name
    followed by an argument list (``get_weather(city="Paris")``, also as
    ``functions.get_weather(...)`` or with ``.`` for ``_``, in prose or in a code block),
    or a JSON object naming it (``{"name": "get_weather", "arguments": ...}``). The model
    meant to call the tool and described the call instead; nothing was called.

    Passes prose that only mentions a tool (``the get_weather function``,
    ``get_weather()``), drafts that called a tool, turns without tools and turns whose
    ``tool_choice`` is ``"none"``. Prose answers as such are not failed: a turn may need
    no call at all (the tools may be irrelevant to the request).
    """

    name: ClassVar[str] = "tool_call_in_text"

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return why the text holds a call the draft should have made, or ``None``."""
        if completion.tool_calls or not turn.tools:
            return None
        if turn.params.get("tool_choice") == "none":
            return None
        text = completion.text
        spellings = _spellings(tuple(t.name for t in turn.tools))
        found = _written_call(text, spellings) or _json_call(text, spellings)
        if found is None:
            return None
        start, tool = found
        snippet = text[start : start + _SNIPPET].split("\n", 1)[0]
        return (
            f"the draft wrote a call to the declared tool {tool!r} as text ({snippet!r}) "
            "instead of calling it"
        )


# ------------------------------------------------------------- redundant_tool_calls


_MISSING: Any = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class RedundantToolCallsCheck:
    """``redundant_tool_calls``: the draft's calls do not repeat one another.

    Fails on (reasons name the calls: ``tool_calls[2] (get_stock_price)``):

    - the same call twice: same tool, same arguments (key order aside);
    - with ``split_lists``: one call per element of a list the tool takes whole: two or
      more calls to one tool whose arguments differ only in one ``array`` parameter, each
      passing a one-element list (``["Personal Info"]``, ``["Job History"]``) where one
      call with ``["Personal Info", "Job History"]`` does the job;
    - with ``padded``: the same call again with extra arguments whose values appear
      nowhere in the conversation (``hypot(x=4, y=5)`` and ``hypot(x=4, y=5, z=0)``): the
      model hedged over an option nobody asked for. Extra ``true`` / ``false`` flags are
      let through: a request rarely spells a flag out.

    Calls whose arguments do not parse are left to ``tool_arguments``.

    Attributes:
        split_lists: Also fail a list parameter split into one call per element.
        padded: Also fail a repeated call padded with unrequested arguments.
    """

    name: ClassVar[str] = "redundant_tool_calls"
    split_lists: bool = True
    padded: bool = True

    def __post_init__(self) -> None:
        _flag(self.split_lists, f"{self.name}.split_lists")
        _flag(self.padded, f"{self.name}.padded")

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the reasons the draft's calls are redundant, or ``None``."""
        calls = completion.tool_calls
        if len(calls) < 2 or len({c.name for c in calls}) == len(calls):
            return None  # every call is to a different tool: nothing can repeat
        by_tool: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, name, args in _arguments(completion):
            by_tool.setdefault(name, []).append((i, args))
        reasons: list[str] = []
        props = _properties(turn) if self.split_lists else {}
        grounding: list[_Grounding] = []  # built on first use: most drafts never need it
        for name, group in by_tool.items():
            if len(group) < 2:
                continue
            reasons.extend(_repeats(name, group))
            if self.split_lists:
                reason = _split_list(name, group, props.get(name, {}))
                if reason:
                    reasons.append(reason)
            if self.padded:
                reasons.extend(_padded(name, group, turn, grounding))
        return reasons or None


def _repeats(name: str, group: Sequence[tuple[int, dict[str, Any]]]) -> list[str]:
    reasons = []
    for n, (j, later) in enumerate(group):
        # dict equality ignores key order; 1 == 1.0 as in JSON
        first = next((i for i, earlier in group[:n] if earlier == later), None)
        if first is not None:
            reasons.append(
                f"tool_calls[{j}] ({name}) repeats tool_calls[{first}]: same tool, same arguments"
            )
    return reasons


def _split_list(
    name: str, group: Sequence[tuple[int, dict[str, Any]]], props: Mapping[str, Any]
) -> str | None:
    keys = set(group[0][1])
    if any(set(args) != keys for _, args in group):
        return None
    first = group[0][1]
    differing = [k for k in keys if any(args[k] != first[k] for _, args in group)]
    if len(differing) != 1:
        return None
    param = differing[0]
    if "array" not in _types(props.get(param)):
        return None
    if not all(isinstance(args[param], list) and len(args[param]) == 1 for _, args in group):
        return None
    merged = [args[param][0] for _, args in group]
    where = ", ".join(f"tool_calls[{i}]" for i, _ in group)
    return (
        f"{where} ({name}) split the list parameter {param!r} into one call per element; "
        f"the tool takes the list: one call with {param}={_short(merged)}"
    )


def _padded(
    name: str,
    group: Sequence[tuple[int, dict[str, Any]]],
    turn: Turn,
    grounding: list[_Grounding],
) -> list[str]:
    reasons = []
    for i, small in group:
        if not small:
            continue
        for j, big in group:
            if i == j or len(big) <= len(small):
                continue
            if any(big.get(k, _MISSING) != v for k, v in small.items()):
                continue
            extra = {k: v for k, v in big.items() if k not in small}
            if any(isinstance(v, bool) for v in extra.values()):
                continue
            if not grounding:
                grounding.append(_Grounding(_conversation(turn)))
            if not any(grounding[0].stated(v) for v in extra.values()):
                listed = ", ".join(f"{k}={_short(v)}" for k, v in extra.items())
                reasons.append(
                    f"tool_calls[{j}] ({name}) repeats tool_calls[{i}] with extra arguments "
                    f"the request never mentions ({listed})"
                )
    return reasons


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
# "5 x 10^-12", "5×10^-12", "5*10**-12", "5e-12"
_SCIENTIFIC = re.compile(
    r"(\d+(?:\.\d+)?)\s*(?:(?:x|\u00d7|\*)\s*10\s*(?:\^|\*\*)\s*|[eE])([-+\u2212]?\d+)"
)


class _Grounding:
    """Whether a value is stated in the conversation (lower-cased text, numbers)."""

    __slots__ = ("_numbers", "_text")

    def __init__(self, conversation: str) -> None:
        self._text = conversation.lower()
        numbers: set[float] = set()
        for match in _NUMBER.finditer(conversation.replace(",", "")):
            value = abs(float(match.group()))
            numbers.update((value, value / 100))  # "5%" states 0.05 too
        for match in _SCIENTIFIC.finditer(conversation):
            mantissa, exponent = match.groups()
            numbers.add(float(f"{mantissa}e{exponent.replace(chr(0x2212), '-')}"))
        self._numbers = numbers

    def stated(self, value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return True
        if isinstance(value, (int, float)):
            return abs(float(value)) in self._numbers
        if isinstance(value, str):
            return value.strip().lower() in self._text
        if isinstance(value, list):
            return all(self.stated(v) for v in value)
        if isinstance(value, dict):
            return all(self.stated(v) for v in value.values())
        return True


# --------------------------------------------------------------- argument_grounding


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

    Only top-level arguments are read; calls whose arguments do not parse are left to
    ``tool_arguments``.

    Attributes:
        percent_scale: Check percentages passed as whole numbers.
        unstated_years: Check dates whose year the conversation does not state.
    """

    name: ClassVar[str] = "argument_grounding"
    percent_scale: bool = True
    unstated_years: bool = False

    def __post_init__(self) -> None:
        _flag(self.percent_scale, f"{self.name}.percent_scale")
        _flag(self.unstated_years, f"{self.name}.unstated_years")

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the arguments that disagree with the conversation, or ``None``."""
        if not completion.tool_calls:
            return None
        candidates: list[tuple[str, str, Any, str]] = []  # (where, param, value, kind)
        tools: dict[str, Mapping[str, Any]] | None = None
        for i, name, args in _arguments(completion):
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
            return None
        conversation = _conversation(turn)
        reasons = []
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


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@functools.lru_cache(maxsize=1024)
def _name_words(name: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in _WORD.findall(_CAMEL.sub(" ", name).lower()))


@functools.lru_cache(maxsize=64)  # an agent loop sends the same request step after step
def _words(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in _WORD.findall(text.lower()))


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
