"""Checks of what a draft's tool calls mean, beyond their schema.

A JSON Schema sees one call at a time and no conversation. The call checks look at
the draft's calls together and against the turn (its tools and its messages), for mistakes
a schema cannot see and that need no reference answer. This module holds
``tool_call_in_text`` (the draft wrote a call to a declared tool in its text: a code block,
``functions.get_weather(city="Paris")``, ``{"name": "get_weather", ...}``, instead of
making it) and the helpers the other call checks share (reading a draft's calls and arguments, the
words of names and conversations, what a conversation states). ``redundant_tool_calls``
lives in ``_redundant.py``, ``argument_grounding`` and ``requested_tools`` in
``_grounding.py``. Every check is pure and reads only the completion and the turn.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.calls._text import split_thinking
from tiered_router.gate._lifting import unliftable_calls
from tiered_router.gate._schema import parse_json
from tiered_router.turn import Completion, Turn, message_text

__all__ = ["ToolCallInTextCheck", "grounding_for"]

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
_JSON_NAME = re.compile(r"""["'](?:tool_)?name["']\s*:\s*["']([^"'\n]{1,200})["']""")


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


_TAGGED_NAME = re.compile(
    r"""<function=([^<>\s]{1,200})\s*>|<invoke\s+name=["']([^"'<>]{1,200})["']"""
    r"""|\[TOOL_CALLS\]\s*([A-Za-z_][\w.\-]{0,199})"""
    r"""|<tool_call>\s*([A-Za-z_][\w.\-]{0,199})\s*(?:<arg_key>|</tool_call>)"""
)


def _tagged_call(text: str, spellings: Mapping[str, str]) -> tuple[int, str] | None:
    """Find ``<function=tool>``, ``<invoke name="tool">`` or ``[TOOL_CALLS]tool``."""
    if not any(
        marker in text for marker in ("<function=", "<invoke", "[TOOL_CALLS]", "<tool_call>")
    ):
        return None
    for match in _TAGGED_NAME.finditer(text):
        written = match.group(1) or match.group(2) or match.group(3) or match.group(4)
        tool = spellings.get(written.replace(".", "_"))
        if tool is not None:
            return match.start(), tool
    return None


_MARKUP = (
    "<tool_call>",
    "<tool_calls>",
    "<function_call>",
    "<seed:tool_call>",
    "<function=",
    "<invoke",
    "<function_calls>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<|tool_call|>",
)


def _markup(text: str) -> str | None:
    """Call markup in the answer (after a leading ``<think>`` block) that was not lifted.

    ``str.find`` per marker: a regex alternation costs ~20x more on 400 KB of brackets.
    """
    answer = split_thinking(text)[1]
    markers = _MARKUP if "<" in answer else ("[TOOL_CALLS]",)
    found = [i for i in (answer.find(m) for m in markers) if i >= 0]
    if not found:
        return None
    start = min(found)
    snippet = answer[start : start + _SNIPPET].split("\n", 1)[0]
    return f"the draft wrote call markup ({snippet!r}) that was not read as calls"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallInTextCheck:
    """``tool_call_in_text``: a draft that made no call did not write one as text instead.

    Fails when the draft has no tool call but its text calls a declared tool: the name
    followed by an argument list (``get_weather(city="Paris")``, also as
    ``functions.get_weather(...)`` or with ``.`` for ``_``, in prose or in a code block),
    a JSON object naming it (``{"name": "get_weather", "arguments": ...}``, also
    ``"tool_name"``), or a tag or marker naming it (``<function=get_weather>``,
    ``<invoke name="get_weather">``, ``[TOOL_CALLS]get_weather``,
    ``<tool_call>get_weather<arg_key>``).
    The model meant to call the tool and described the call instead; nothing was called.

    Fails too, whatever the call names, when the draft's answer is only calls that the
    lifting rules refuse (a tool the turn does not offer, arguments that do not validate,
    ``tool_choice`` not honoured; the reason says which), and when its answer (after a
    leading ``<think>`` block) holds call markup that was not read as calls: a
    ``<tool_call>``, ``<function=``, ``<invoke``, ``[TOOL_CALLS]`` or ``<|python_tag|>``
    with prose around it. Such a draft tried to call and could not be honoured.

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
        refused = unliftable_calls(completion, turn)
        if refused is not None:
            return f"the draft wrote calls as text that cannot be made: {refused}"
        text = completion.text
        spellings = _spellings(tuple(t.name for t in turn.tools))
        found = (
            _written_call(text, spellings)
            or _json_call(text, spellings)
            or _tagged_call(text, spellings)
        )
        if found is None:
            return _markup(text)
        start, tool = found
        snippet = text[start : start + _SNIPPET].split("\n", 1)[0]
        return (
            f"the draft wrote a call to the declared tool {tool!r} as text ({snippet!r}) "
            "instead of calling it"
        )


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
