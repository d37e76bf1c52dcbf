"""Canonical values under a JSON Schema: the normalisation behind "the same answer".

Two drafts that fill the same argument with ``5`` and ``5.0``, with ``"Celsius"`` and
``"celsius"``, with ``"in"`` and ``"inches"``, or that leave an argument out where the other
spells out its schema default, said the same thing. :func:`canonical` rewrites a value so
that such pairs become equal, using the schema where it has one:

- numbers are compared as numbers (``5 == 5.0``, 12 significant digits); a string holding a
  number where the schema asks for a number or integer is read as one;
- ``"true"`` / ``"false"`` where the schema asks for a boolean are read as booleans;
- strings: Unicode NFKC, case folded, surrounding and repeated whitespace removed; unit names
  spelled in full or abbreviated (``in`` / ``inch`` / ``inches``) become one spelling; ``**``
  becomes ``^``; spaces around operators and punctuation are dropped (``x ^ 3`` is ``x^3``);
  a number times a name is written without ``*`` (``2*x`` is ``2x``); a final ``.`` is dropped;
- an enum value is the declared member it matches under the string rules;
- in an object, a property equal to its schema default, or ``null`` where the property is
  optional, is dropped: leaving it out says the same;
- with the request given (:class:`Request`): an optional property whose value the request
  does not write (``gravity: 9.81`` when the user never said 9.81) is an extra the model
  added, and is dropped; booleans are kept (a flag is rarely written as such); qualifiers
  after a comma that the request does not write are dropped (``"Boston, MA"`` is ``"boston"``
  when the user said "Boston");
- keys are sorted; array order is kept (order can matter inside an argument).

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["Request", "canonical", "canonical_number", "canonical_text"]

_SPACE = re.compile(r"\s+")
# spaces next to an operator or punctuation say nothing: "x ^ 3" is "x^3", "a, b" is "a,b"
_PUNCT_SPACE = re.compile(r"\s*([-+*/^=<>(),;:\[\]{}|&%])\s*")
# "2*x" is written "2x" as often: a product of a number and a name
_IMPLICIT_TIMES = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\*([a-z_(])")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

_UNITS: dict[str, tuple[str, ...]] = {
    "inch": ("in", "inch", "inches", '"'),
    "foot": ("ft", "foot", "feet"),
    "yard": ("yd", "yard", "yards"),
    "mile": ("mi", "mile", "miles"),
    "millimeter": ("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    "centimeter": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "meter": ("m", "meter", "meters", "metre", "metres"),
    "kilometer": ("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    "gram": ("g", "gram", "grams"),
    "kilogram": ("kg", "kilogram", "kilograms", "kilo", "kilos"),
    "pound": ("lb", "lbs", "pound", "pounds"),
    "ounce": ("oz", "ounce", "ounces"),
    "liter": ("l", "liter", "liters", "litre", "litres"),
    "milliliter": ("ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    "second": ("s", "sec", "secs", "second", "seconds"),
    "minute": ("min", "mins", "minute", "minutes"),
    "hour": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("day", "days"),
    "week": ("wk", "week", "weeks"),
    "month": ("mo", "month", "months"),
    "year": ("yr", "yrs", "year", "years"),
    "celsius": ("c", "°c", "celsius", "centigrade", "degc", "degrees celsius"),
    "fahrenheit": ("f", "°f", "fahrenheit", "degf", "degrees fahrenheit"),
    "kelvin": ("k", "kelvin", "kelvins"),
    "percent": ("%", "percent", "percentage", "pct"),
    "meters per second": ("m/s", "mps", "meters per second", "metres per second"),
    "kilometers per hour": ("km/h", "kmh", "kph", "kilometers per hour", "kilometres per hour"),
    "miles per hour": ("mph", "mi/h", "miles per hour"),
    "usd": ("usd", "$", "us dollar", "us dollars", "dollar", "dollars"),
    "eur": ("eur", "€", "euro", "euros"),
    "gbp": ("gbp", "£", "pound sterling", "british pound", "british pounds"),
}
_UNIT_OF = {alias: unit for unit, aliases in _UNITS.items() for alias in aliases}


def _written(word: str, text: str) -> bool:
    """Whether ``word`` is written in ``text`` as a word of its own."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def canonical_text(text: str) -> str:
    """A string in the form two drafts' strings are compared in (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold().strip()
    text = _SPACE.sub(" ", text).replace("**", "^")
    unit = _UNIT_OF.get(text)
    if unit is not None:
        return unit
    text = _PUNCT_SPACE.sub(r"\1", text)
    return _IMPLICIT_TIMES.sub(r"\1\2", text).rstrip(".")


def canonical_number(value: float) -> int | float | str:
    """A number as compared: integral values as ``int``, others to 12 significant digits."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value.is_integer() and abs(value) < 2**63:
        return int(value)
    return float(f"{value:.12g}")


def _types(schema: Mapping[str, Any]) -> frozenset[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset((kind,))
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    return frozenset()


def _as_number(text: str) -> int | float | str | None:
    stripped = text.strip().replace(",", "")
    if not _NUMBER.fullmatch(stripped):
        return None
    return canonical_number(float(stripped))


class Request:
    """What the request says, for telling the arguments it determines from optional extras.

    Attributes:
        text: The request's text in canonical form (:func:`canonical_text`).
        numbers: The numbers written in it, canonical.
    """

    __slots__ = ("numbers", "text")

    def __init__(self, text: str) -> None:
        self.text = canonical_text(text)
        self.numbers = frozenset(
            canonical_number(float(n.replace(",", "")))
            for n in _NUMBER_IN_TEXT.findall(text)
            if n.replace(",", "").replace(".", "", 1).lstrip("+-").isdigit()
        )

    def qualified(self, text: str) -> str:
        """``text`` without the qualifiers after a comma that the request does not write.

        ``"boston,ma"`` for a request that says "Boston" is ``"boston"``.
        """
        head, *rest = text.split(",")
        if not head or head not in self.text:
            return text
        return ",".join([head, *(part for part in rest if part and part in self.text)])

    def says(self, value: Any) -> bool:
        """Whether the request determines ``value`` (a canonical value): it is written there."""
        if isinstance(value, bool):
            return True  # a flag is not written as such: keep it
        if isinstance(value, (int, float)):
            return value in self.numbers or (
                isinstance(value, float) and canonical_number(value * 100) in self.numbers
            )
        if isinstance(value, str):
            if value in _UNITS:  # a unit is written in any of its spellings
                return any(_written(alias, self.text) for alias in _UNITS[value])
            return bool(value) and value in self.text
        if isinstance(value, list):
            return all(self.says(v) for v in value)
        if isinstance(value, Mapping):
            return all(self.says(v) for v in value.values())
        return False


_NUMBER_IN_TEXT = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?|[+-]?\.\d+")


def canonical(value: Any, schema: Any = None, *, request: Request | None = None) -> Any:
    """Return ``value`` rewritten so that values that say the same thing are equal.

    Args:
        value: JSON data (a draft's arguments, a JSON output, or part of one).
        schema: The JSON Schema the value was written for, when known.
        request: What the request says: an optional argument it does not determine (a
            value written nowhere in it) is an extra, left out of the comparison.

    Returns:
        JSON data: equal for two values that say the same under ``schema``.
    """
    sch: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
    types = _types(sch)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return canonical_number(value)
    if isinstance(value, str):
        text = _string(value, sch, types)
        if request is not None and isinstance(text, str) and "," in text:
            text = request.qualified(text)
        return text
    if isinstance(value, list):
        items = sch.get("items")
        return [canonical(v, items, request=request) for v in value]
    if isinstance(value, Mapping):
        return _object(value, sch, request)
    return value


def _string(value: str, sch: Mapping[str, Any], types: frozenset[str]) -> Any:
    if types & {"number", "integer"}:
        number = _as_number(value)
        if number is not None:
            return number
    if "boolean" in types and value.strip().casefold() in ("true", "false"):
        return value.strip().casefold() == "true"
    text = canonical_text(value)
    enum = sch.get("enum")
    if isinstance(enum, list):
        for member in enum:
            if isinstance(member, str) and canonical_text(member) == text:
                return canonical_text(member)
    return text


def _object(
    value: Mapping[str, Any], sch: Mapping[str, Any], request: Request | None
) -> dict[str, Any]:
    props = sch.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = sch.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    out: dict[str, Any] = {}
    for key, item in value.items():
        prop = props.get(key)
        if key not in required_names and item is None:
            continue  # an optional argument set to null is an argument left out
        canon = canonical(item, prop, request=request)
        if key not in required_names and props:
            if isinstance(prop, Mapping) and "default" in prop:
                if canon == canonical(prop["default"], prop):
                    continue  # spelling out the default says what leaving it out says
            if request is not None and not request.says(canon):
                continue  # an optional extra the request does not determine
        out[str(key)] = canon
    return dict(sorted(out.items()))
