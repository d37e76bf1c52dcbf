"""Checks of what a draft's tool calls mean, beyond their schema.

A JSON Schema sees one call at a time and no conversation. These checks look at the
draft's calls together and against the turn (its tools and its messages), for mistakes a
schema cannot see and that need no reference answer:

- ``tool_call_in_text``: the draft wrote a call to a declared tool in its text (a code
  block, ``functions.get_weather(city="Paris")``, ``{"name": "get_weather", ...}``)
  instead of making it;
- ``redundant_tool_calls``: the same call twice; one call per element of a list the tool
  takes whole; the same call again with extra arguments the request never mentions;
Two more, grounding the calls in the request, live in ``_grounding.py``
(``argument_grounding``, ``requested_tools``). Every check is pure and reads only the
completion and the turn.
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

__all__ = ["RedundantToolCallsCheck", "ToolCallInTextCheck"]

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
        args = _parsed(call.arguments)
        if args is not None:
            yield i, call.name, args


@functools.lru_cache(maxsize=256)  # several checks read the same calls: parse them once
def _parsed(text: str) -> dict[str, Any] | None:
    """The arguments as an object, or ``None`` (not JSON, or not an object). Not to mutate."""
    try:
        args = parse_json(text) if text.strip() else {}
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


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


# words of tool names and requests (``requested_tools``, ``alternatives``)
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

    - with ``swapped``: the same call again with the same values moved between
      parameters (``gcd(a=40, b=50)`` and ``gcd(a=50, b=40)``): the model hedged over
      which value goes where;
    - with ``alternatives``: two different tools called with the same arguments where none
      of the words that tell one of them apart is in the conversation
      (``linear_regression`` and ``random_forest_regression`` on the same data for
      "predict house prices"): the model hedged between alternatives. "The median and the
      variance of these points" names both ``statistics_median`` and
      ``statistics_variance`` and passes;
    - with ``hedged``: the same call again with one argument changed to a value the
      conversation never states while the first call's value is stated
      (``sea_level=5000`` for "5000m", then ``sea_level=0``), or changed between two words
      neither of which is said ("vaporization", then "melting"): a second guess, not a
      second target.

    Calls whose arguments do not parse are left to ``tool_arguments``.

    Attributes:
        split_lists: Also fail a list parameter split into one call per element.
        padded: Also fail a repeated call padded with unrequested arguments.
        swapped: Also fail a repeated call with its values swapped between parameters.
        hedged: Also fail a repeated call with one value changed to an unstated one.
        alternatives: Also fail calls to two tools with the same arguments where the
            request names only one.
    """

    name: ClassVar[str] = "redundant_tool_calls"
    split_lists: bool = True
    padded: bool = True
    swapped: bool = True
    hedged: bool = True
    alternatives: bool = True

    def __post_init__(self) -> None:
        _flag(self.split_lists, f"{self.name}.split_lists")
        _flag(self.padded, f"{self.name}.padded")
        _flag(self.swapped, f"{self.name}.swapped")
        _flag(self.hedged, f"{self.name}.hedged")
        _flag(self.alternatives, f"{self.name}.alternatives")

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the reasons the draft's calls are redundant, or ``None``."""
        calls = completion.tool_calls
        if len(calls) < 2:
            return None
        by_tool: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, name, args in _arguments(completion):
            by_tool.setdefault(name, []).append((i, args))
        reasons: list[str] = []
        if self.alternatives and len(by_tool) > 1:
            reasons.extend(_alternatives(by_tool, turn))
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
            if self.swapped:
                reasons.extend(_swapped(name, group))
            if self.hedged:
                reasons.extend(_hedged(name, group, turn, grounding))
        return reasons or None


def _alternatives(
    by_tool: Mapping[str, Sequence[tuple[int, dict[str, Any]]]], turn: Turn
) -> list[str]:
    # only calls with the same parameter names can have the same arguments
    shapes: dict[frozenset[str], int] = {}
    for group in by_tool.values():
        for _, args in group:
            shape = frozenset(args)
            shapes[shape] = shapes.get(shape, 0) + 1
    if all(n < 2 for n in shapes.values()):
        return []
    seen: dict[str, tuple[str, int]] = {}
    said: frozenset[str] | None = None
    reasons = []
    for name, group in by_tool.items():
        for i, args in group:
            if not args or shapes[frozenset(args)] < 2:
                continue
            key = _canonical(args)
            if key not in seen:
                seen[key] = (name, i)
                continue
            other, j = seen[key]
            if other == name:
                continue
            mine, theirs = _name_words(name), _name_words(other)
            if said is None:
                said = _words(_conversation(turn))
            unsaid = [
                n
                for n, own in ((other, theirs - mine), (name, mine - theirs))
                if own and own.isdisjoint(said) and not _in_squeezed(own, turn)
            ]
            if unsaid:
                reasons.append(
                    f"tool_calls[{i}] ({name}) and tool_calls[{j}] ({other}) take the same "
                    f"arguments, and the request does not ask for {' or '.join(unsaid)}: "
                    "a hedge between alternative tools"
                )
    return reasons


def _in_squeezed(words: frozenset[str], turn: Turn) -> bool:
    """Whether a word of 4+ letters is in the conversation written without spaces.

    ``openlibrary`` for "Open Library", ``youtube`` for "You Tube".
    """
    text = _squeezed(_conversation(turn))
    return any(len(w) >= 4 and w in text for w in words)


@functools.lru_cache(maxsize=64)
def _squeezed(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


def _swapped(name: str, group: Sequence[tuple[int, dict[str, Any]]]) -> list[str]:
    reasons = []
    for n, (j, later) in enumerate(group):
        for i, earlier in group[:n]:
            if earlier == later or set(earlier) != set(later) or len(earlier) < 2:
                continue
            moved = [k for k in earlier if earlier[k] != later[k]]
            if len(moved) < 2:
                continue
            before = sorted(_canonical(earlier[k]) for k in moved)
            if before == sorted(_canonical(later[k]) for k in moved):
                listed = ", ".join(moved)
                reasons.append(
                    f"tool_calls[{j}] ({name}) repeats tool_calls[{i}] with the values of "
                    f"{listed} swapped: one call, with each value where it belongs"
                )
                break
    return reasons


def _word_value(value: Any) -> bool:
    return isinstance(value, str) and value.replace(" ", "").isalpha()


def _code_like(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    return isinstance(value, str) and value.isupper() and len(value) <= 6


def _hedged(
    name: str,
    group: Sequence[tuple[int, dict[str, Any]]],
    turn: Turn,
    grounding: list[_Grounding],
) -> list[str]:
    reasons = []
    for n, (j, later) in enumerate(group):
        for i, earlier in group[:n]:
            if set(earlier) != set(later):
                continue
            changed = [k for k in earlier if earlier[k] != later[k]]
            if len(changed) != 1:
                continue
            key = changed[0]
            a, b = earlier[key], later[key]
            if _code_like(a) or _code_like(b):
                continue  # flags ("formatted, and as an array"), codes (GOOGL, MSFT)
            if not grounding:
                grounding.append(grounding_for(_conversation(turn)))
            said = grounding[0]
            unstated = [v for v in (a, b) if not said.stated(v)]
            # a stated value, then an unstated one; or two words neither of which is said
            # ("vaporization", then "melting", for "from liquid to steam"). Two unstated
            # numbers or dates are often both derived ("yesterday", "the day before").
            if (len(unstated) == 1 and unstated[0] is b) or (
                len(unstated) == 2 and _word_value(a) and _word_value(b)
            ):
                reasons.append(
                    f"tool_calls[{j}] ({name}) repeats tool_calls[{i}] with only {key} "
                    f"changed, to {_short(b)} from {_short(a)}, and the conversation never "
                    f"states {_short(unstated[0])}: a second guess, not a second target"
                )
                break
    return reasons


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
                grounding.append(grounding_for(_conversation(turn)))
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


_NOT_ALNUM = re.compile(r"[\W_]+")


@functools.lru_cache(maxsize=64)  # an agent loop sends the same conversation step after step
def grounding_for(conversation: str) -> _Grounding:
    """The (cached) grounding of a conversation's text."""
    return _Grounding(conversation)


class _Grounding:
    """Whether a value is stated in the conversation (lower-cased text, numbers)."""

    __slots__ = ("_alnum", "_numbers", "_text")

    def __init__(self, conversation: str) -> None:
        self._text = conversation.lower()
        self._alnum = ""  # built on first use
        numbers: set[float] = set()
        # "1,500" is 1500 and "3,4,5" is 3, 4 and 5: read both ways
        for text in (conversation.replace(",", ""), conversation.replace(",", " ")):
            for match in _NUMBER.finditer(text):
                value = abs(float(match.group()))
                numbers.update((value, value / 100))  # "5%" states 0.05 too
        for match in _SCIENTIFIC.finditer(conversation):
            mantissa, exponent = match.groups()
            numbers.add(float(f"{mantissa}e{exponent.replace(chr(0x2212), '-')}"))
        self._numbers = numbers

    def abbreviated(self, initials: str) -> bool:
        """Whether a word of the conversation is ``initials`` or starts with them (NYC, NY)."""
        return re.search(rf"(?<![a-z]){re.escape(initials)}[a-z]?(?![a-z])", self._text) is not None

    def stated(self, value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return True
        if isinstance(value, (int, float)):
            return abs(float(value)) in self._numbers
        if isinstance(value, str):
            text = value.strip().lower()
            if text in self._text:
                return True
            squeezed = _NOT_ALNUM.sub("", text)
            if len(squeezed) < 2:
                return False
            if not self._alnum:
                self._alnum = _NOT_ALNUM.sub("", self._text)
            return squeezed in self._alnum  # "4*x+7" for "4x+7", "[3,1]" for "3 1"
        if isinstance(value, list):
            return all(self.stated(v) for v in value)
        if isinstance(value, dict):
            return all(self.stated(v) for v in value.values())
        return True


# --------------------------------------------------------------- argument_grounding
