"""Checks that a draft's calls belong to the request at all.

- ``tool_fit``: a called tool shares no meaningful word with the conversation (none of the
  words of its name and description is said): the model picked a tool because it was the
  one offered, not because the request needs it. When no offered tool fits, the right
  answer is prose or a question;
- ``argument_grounding``'s ``unstated_calls`` rule (in ``_grounding.py``) uses
  :func:`call_grounded` from here: a call none of whose argument values is stated in the
  conversation.

Every check is pure and reads only the completion and the turn.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.calls._choice import requires_call
from tiered_router.gate._calls import _conversation, _Grounding, _parsed, grounding_for
from tiered_router.turn import Completion, ToolSpec, Turn

__all__ = ["ToolFitCheck", "call_grounded"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[a-z]{3,}")

# words that say nothing about what a tool is for: verbs every tool uses, and the filler of
# tool descriptions; compared by their first four letters, like every word here
_GENERIC = frozenset(
    w[:4]
    for w in (
        "the and for with from that this these those into onto over under about above "
        "get set find fetch retrieve return returns calculate calculates calculation compute "
        "computes determine estimate check create make give given provide provides "
        "show list lists search lookup look display generate perform run use using used "
        "based specific specified particular certain value values number numbers amount "
        "data info information details detail result results function functions tool "
        "method type name names item items object request query api call service "
        "option options parameter parameters default optional required input output "
        "new current total all any each other some more most per can will may not "
        "you your our their its his her they them what which who how when where why "
        "also such like than then there here have has had does did was were are been "
        "being let want need would could should please tell help".split()
    )
)


def _keys(text: str) -> frozenset[str]:
    """The meaningful words of ``text``, each by its first four letters."""
    words = _WORD.findall(_CAMEL.sub(" ", text).lower())
    return frozenset(k for w in words if (k := w[:4]) not in _GENERIC)


def _tool_keys(spec: ToolSpec) -> frozenset[str]:
    props = spec.parameters.get("properties") if isinstance(spec.parameters, Mapping) else None
    # cached by name, description and parameter names: tools are declared again every turn
    key = (spec.name, spec.description, tuple(props) if isinstance(props, Mapping) else ())
    found = _TOOL_KEYS.get(key)
    if found is None:
        found = _TOOL_KEYS[key] = _compute_tool_keys(spec, props)
        if len(_TOOL_KEYS) > 1024:
            _TOOL_KEYS.pop(next(iter(_TOOL_KEYS)))
    return found


_TOOL_KEYS: dict[tuple[str, str, tuple[Any, ...]], frozenset[str]] = {}


def _compute_tool_keys(spec: ToolSpec, props: object) -> frozenset[str]:
    words = [spec.name.replace("_", " ").replace(".", " "), spec.description]
    if isinstance(props, Mapping):
        for param, prop in props.items():
            words.append(str(param).replace("_", " "))
            if isinstance(prop, Mapping):
                words.append(str(prop.get("description") or ""))
                enum = prop.get("enum")
                if isinstance(enum, list):
                    words.extend(str(e) for e in enum)
    return _keys(" ".join(words))


@functools.lru_cache(maxsize=64)  # an agent loop sends the same conversation step after step
def _conversation_keys(text: str) -> frozenset[str]:
    return _keys(text)


def call_grounded(
    args: Mapping[str, Any], grounding: _Grounding, props: Mapping[str, Any] | None = None
) -> bool | None:
    """Whether any argument value of a call is stated in the conversation.

    ``None`` when the call has no string a request would state (4+ letters, not an
    upper-case code, not picked from an ``enum`` in ``props``, the call's tool's parameter
    schemas): numbers alone are often implied rather than said, and an enum value is a
    choice among options the request may leave to the model. A value counts as
    stated when it, or one of its words of 4+ letters, is in the conversation
    (``"Washington state"`` for "Washington"), punctuation and spaces aside
    (``"4*x+7"`` for "4x+7").
    """
    chosen = {k for k, p in (props or {}).items() if isinstance(p, Mapping) and "enum" in p}
    if not any(_checkable(v) for k, v in args.items() if k not in chosen):
        return None
    for value in args.values():
        if value is None or isinstance(value, bool):
            continue
        if grounding.stated(value) or _some_word_stated(value, grounding):
            return True
    return False


def _checkable(value: Any) -> bool:
    """Whether a value is a name or phrase the request would state: 4+ letters, not a code.

    Numbers are not: a request often implies them (52 for "a deck of cards", 2 for
    "twice"); nor are short upper-case codes (``GBP`` for "British Pounds").
    """
    if isinstance(value, str):
        if len(value) <= 5 and value.isupper():
            return False
        return sum(map(str.isalpha, value)) >= 4
    if isinstance(value, list):
        return any(_checkable(v) for v in value)
    if isinstance(value, dict):
        return any(_checkable(v) for v in value.values())
    return False


def _some_word_stated(value: Any, grounding: _Grounding) -> bool:
    if isinstance(value, str):
        words = re.findall(r"[A-Za-z0-9]+", value)
        if any(grounding.stated(w) for w in words if len(w) >= 4):
            return True
        # "New York" for "NYC", "United States" for "the US"
        initials = "".join(w[0] for w in words if w[0].isupper())
        return len(initials) >= 2 and grounding.abbreviated(initials.lower())
    if isinstance(value, list):
        return any(grounding.stated(v) or _some_word_stated(v, grounding) for v in value)
    if isinstance(value, dict):
        return any(grounding.stated(v) or _some_word_stated(v, grounding) for v in value.values())
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFitCheck:
    """``tool_fit``: every called tool has something to do with the conversation.

    A call fits when at least one meaningful word of its tool's name, description,
    parameter names, parameter descriptions or enum values (generic words such as *get*,
    *calculate*, *data*, *specific* aside; words compared by their first four letters, so
    *payment* meets *pay* and *weather* meets *weathers*) appears in the conversation, or
    when one of its argument values is stated there (*euro* and ``currency_conversion``
    share no word, but ``amount=100`` is the request's 100). A call with neither is the
    model calling what it was offered when nothing offered fits (the right answer is
    prose or a question).

    Passes drafts without tool calls, turns whose ``tool_choice`` names or requires a
    tool (the caller asked for the call), and tools whose name and description have no
    meaningful word.
    """

    name: ClassVar[str] = "tool_fit"

    def __call__(self, completion: Completion, turn: Turn, /) -> list[str] | None:
        """Return the called tools that do not fit the conversation, or ``None``."""
        if not completion.tool_calls or not turn.tools:
            return None
        choice = turn.params.get("tool_choice")
        if requires_call(choice):
            return None
        specs: dict[str, ToolSpec] = {t.name: t for t in turn.tools}
        said: frozenset[str] | None = None
        grounding: _Grounding | None = None
        reasons = []
        seen: set[str] = set()
        for i, call in enumerate(completion.tool_calls):
            spec = specs.get(call.name)
            if spec is None or call.name in seen:
                continue  # undeclared: tool_arguments reports it
            seen.add(call.name)
            keys = _tool_keys(spec)
            if not keys:
                continue
            if said is None:
                said = _conversation_keys(_conversation(turn))
            if not keys.isdisjoint(said) or _short_word_meets(said, keys):
                continue
            if grounding is None:
                grounding = grounding_for(_conversation(turn))
            if _any_value_stated(call.arguments, grounding):
                continue  # the words differ ("euro" and currency_conversion), the values meet
            reasons.append(
                f"tool_calls[{i}] ({call.name}): nothing in the conversation asks for this "
                "tool (no word of its name, description or parameters is said, and none of "
                "its argument values); when no offered tool fits, answer in prose or ask"
            )
        return reasons or None


def _any_value_stated(arguments: str, grounding: _Grounding) -> bool:
    args = _parsed(arguments)
    if args is None:
        return False
    for value in args.values():
        if value is None or isinstance(value, bool) or value in (0, 1, ""):
            continue
        if grounding.stated(value) or _some_word_stated(value, grounding):
            return True
    return False


def _short_word_meets(said: frozenset[str], keys: frozenset[str]) -> bool:
    """Whether a 3-letter word said is the start of a tool word (*pay* and *paym*)."""
    return any(len(s) == 3 and any(k.startswith(s) for k in keys) for s in said)
