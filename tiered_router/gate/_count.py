"""``enumerated_targets``: a request that lists several targets gets a call for each.

"Weather in Paris, London and Tokyo" needs three ``get_weather`` calls (or one call whose
list parameter holds the three); a draft that calls for Paris only has left two targets
out. The check anchors on the draft's own argument values: a value the request states
(``"Paris"``) that stands in a list of like items (names joined by commas and a final
*and* / *or*, or numbers) makes every other item of that list a target, and each target
must appear among the draft's arguments. The check is pure and reads only the completion
and the turn.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tiered_router.gate._calls import _arguments
from tiered_router.turn import Completion, Turn, message_text

__all__ = ["EnumeratedTargetsCheck"]

_NAME = r"[A-Z][\w'&.-]*(?:\s+(?:of|de|la|du|von|van|the)?\s*[A-Z][\w'&.-]*){0,3}"
_NUM = r"-?\d+(?:\.\d+)?"
_SEP = re.compile(r"\s*(,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+)")
_ITEM = {"name": re.compile(_NAME), "number": re.compile(_NUM)}
_RANGE = re.compile(r"(?:between|from|range|ranging)\s+\S*\s*$", re.I)
_MAX_ITEMS = 12


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str) and value[:1].isupper() and len(value) <= 60:
        return "name"
    return None


def _request(turn: Turn) -> str:
    for message in reversed(turn.messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


@functools.lru_cache(maxsize=4096)
def _list_around(text: str, start: int, end: int, kind: str) -> tuple[str, ...]:
    """Return the items of the list the span ``text[start:end]`` belongs to (it included).

    A list is items of one kind separated by commas or *and* / *or* / *&*, with at least
    one *and* / *or* / *&* among the separators ("Paris, France" is a place, not a list);
    for numbers, "between 5 and 10" and "from 100 to 1500" are ranges, not lists.
    """
    item = _ITEM[kind]
    items = [text[start:end]]
    joined = False
    pos = end
    while len(items) < _MAX_ITEMS:  # forwards
        sep = _SEP.match(text, pos)
        if sep is None:
            break
        nxt = item.match(text, sep.end())
        if nxt is None:
            break
        joined = joined or "," not in sep.group(1) or bool(re.search(r"and|or", sep.group(1)))
        items.append(nxt.group().strip())
        pos = nxt.end()
    head = text[:start]
    while len(items) < _MAX_ITEMS:  # backwards
        sep = re.search(r"(,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+)$", head)
        if sep is None:
            break
        before = head[: sep.start()]
        prev = re.search(rf"(?:{item.pattern})$", before)
        if prev is None:
            break
        joined = joined or "," not in sep.group(1) or bool(re.search(r"and|or", sep.group(1)))
        items.insert(0, prev.group().strip())
        head = before[: prev.start()]
    if len(items) < 2 or not joined:
        return ()
    if kind == "name" and any(_code(i) for i in items):
        return ()  # "New York City, NY": a state code, and names turned to codes (AAPL)
    if kind == "name" and len({i.isupper() for i in items}) > 1:
        return ()  # "NASDAQ and Microsoft Corporation": an exchange and a company
    if re.match(r"\W*respectively", text[pos:]):
        return ()
    if kind == "number" and _RANGE.search(head):
        return ()
    return tuple(items)


_UNIT = re.compile(r"\s*([A-Za-z][A-Za-z/^-]{2,})")
_LEAD = re.compile(r"([A-Za-z]{4,})\s+$")


@functools.lru_cache(maxsize=4096)
def _same_phrasing(text: str, start: int, end: int, kind: str) -> tuple[str, ...]:
    """Return other items the request states in the same words as the span.

    A number followed by the same unit ("a change in time of 4 seconds, then repeat with
    a change in time of 10 seconds") or a name after the same word ("the molecule ATP ...
    the molecule DNA") is the same kind of target stated again.
    """
    out: list[str] = []
    if kind == "number":
        unit = _UNIT.match(text, end)
        if unit is None or unit.group(1).lower() in _NOT_UNITS:
            return ()
        pattern = rf"(?<![\w.])({_NUM})\s*{re.escape(unit.group(1))}(?![\w/^-])"
    else:
        lead = _LEAD.search(text[:start])
        if lead is None or lead.group(1).lower() in _NOT_UNITS:
            return ()
        pattern = rf"(?<![A-Za-z]){re.escape(lead.group(1))}\s+({_NAME})"
    for match in re.finditer(pattern, text):
        if match.start(1) != start:
            out.append(match.group(1).strip())
    return tuple(out)


# words after a number or before a name that do not make a target of the same kind
_NOT_UNITS = frozenset(
    "and the for with from into than that this over under about each times time "
    "years year days day percent between".split()
)


def _code(item: str) -> bool:
    return item in ("I", "I'm", "I've", "I'd") or (item.isupper() and len(item) <= 5)


def _values(args: Mapping[str, Any]) -> Iterator[Any]:
    for value in args.values():
        if isinstance(value, list):
            yield from value
        else:
            yield value


@dataclass(frozen=True, slots=True, kw_only=True)
class EnumeratedTargetsCheck:
    """``enumerated_targets``: every item of a list the request makes gets its call.

    Fails when a draft's argument value (a name such as ``"Paris"``, or a number) stands in
    the latest user message inside a list of like items ("Paris, London and Tokyo",
    "BRCA1 and BRCA2", "radius 5, 10 and 15") and another item of that list appears in
    none of the draft's arguments: one call where the request asks for several. Lists need
    an *and* / *or* / *&* ("Paris, France" is one place); "between 5 and 10" and "from
    1990 to 2000" are ranges. Items are names (capitalised words) or numbers.

    It assumes the calls the request needs are made in one response, as in parallel
    function calling; a step-by-step agent that handles one item per step fails it.
    """

    name: ClassVar[str] = "enumerated_targets"

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return the listed targets no call covers, or ``None``."""
        if not completion.tool_calls or not turn.tools:
            return None
        request = _request(turn)
        if not request:
            return None
        values = [v for _, _, args in _arguments(completion) for v in _values(args)]
        if not values:
            return None
        covered = json.dumps(values, ensure_ascii=False).lower()
        numbers = {float(v) for v in values if type(v) in (int, float)}
        missing: dict[str, str] = {}
        for value in values:
            kind = _kind(value)
            if kind is None or (kind == "number" and value in (0, 1)):
                continue  # 0 and 1 are defaults more often than targets
            spelled = f"{value:g}" if kind == "number" else str(value)
            for match in re.finditer(rf"(?<![\w.]){re.escape(spelled)}(?![\w])", request):
                items = _list_around(request, match.start(), match.end(), kind)
                items += _same_phrasing(request, match.start(), match.end(), kind)
                for other in items:
                    if other in missing or _covered(other, kind, covered, numbers):
                        continue
                    missing[other] = spelled
                break  # the first place the value is stated is the one that counts
        if not missing:
            return None
        listed = ", ".join(f"{k!r} (listed with {v!r})" for k, v in missing.items())
        return (
            f"the request lists several targets, and no call covers {listed}: one call "
            "per listed item, or one call with all of them in a list parameter"
        )


def _covered(item: str, kind: str, covered: str, numbers: set[float]) -> bool:
    if kind == "number":
        return float(item) in numbers
    low = item.lower()
    if low in covered:
        return True
    words = [w for w in re.findall(r"[a-z0-9]+", low) if len(w) >= 3]
    return any(w in covered for w in words)
