"""The ``redundant_tool_calls`` check: calls a draft made twice, or more than it needed.

The same call twice; one call per element of a list the tool takes whole; the same call
again with extra arguments the request never mentions. Pure: reads only the completion and
the turn.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.gate._calls import (
    _NOT_ALNUM,
    _arguments,
    _canonical,
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
from tiered_router.turn import Completion, Turn

__all__ = ["RedundantToolCallsCheck"]


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
