r"""Final answers read from prose: a number, an option letter, a boxed value, a date.

A draft that answers a question in prose can still give a checkable answer: the text marks
it (``\boxed{42}``, "the answer is (B)", ``#### 42``, ``Answer: 05/01/2021``) or is nothing
else (``42``, ``(B)``). :func:`final_answer` finds it and writes it in one form:

- ``number:<n>`` (``1,000`` and ``1000.0`` are ``number:1000``), followed by what the number
  is written with, when anything: ``number:42 %``, ``number:42 k``, ``number:42 million``,
  ``number:42 $``, ``number:42 eur``, ``number:5 km`` (a currency symbol before it, a
  percent sign, a scale or a unit of at most two words after it; case folded, unit names in
  one spelling). ``42``, ``42%``, ``42k``, ``42 million``, ``$42`` and ``42 EUR`` are six
  answers: the value written is the number with its unit, and a panel must never vouch for
  one as another;
- ``option:<letter>`` (``(b)``, ``B.``, ``B)``, "option B");
- ``date:<YYYY-MM-DD>`` (``05/01/2021``, ``2021-05-01``, ``May 1, 2021``, ``1 May 2021``);
- ``text:<canonical text>`` for a marked answer that is none of these (``the answer is Paris``).

Prose with no marked answer, that is not itself a bare number, letter or date, has none
(``None``): the panel calls it "not comparable". So has an answer whose number cannot be
read within the bounds of ``_limits`` (more than ``MAX_NUMBER_DIGITS`` digits, beyond the
float range, a zero denominator): two such answers are never "the same". Pure: no I/O, no
clock, no randomness.
"""

from __future__ import annotations

import re

from tiered_router import _limits
from tiered_router.panels._values import canonical_number, canonical_text

__all__ = ["final_answer", "normalise_answer"]

_MAX_TEXT = 20_000  # look at the end of a long draft only: the answer is stated last
_BOXED = "\\boxed{"
_MARKERS = re.compile(
    r"(?:final answer|the answer|answer|correct option|correct answer)"
    r"(?:\s+is|\s*:|\s*=)\s*:?\s*(.+)",
    re.IGNORECASE,
)
_HASHES = re.compile(r"####\s*(.+)$", re.MULTILINE)
_OPTION = re.compile(
    r"\A(?:option\s+|choice\s+)?\(?([A-Ja-j])\)?(?:[.:)]|\s*$|\s+(?=\S))", re.IGNORECASE
)
_LONE_OPTION = re.compile(r"\A\(?([A-Ja-j])\)?[.:)]?\Z")
_NUMBER = re.compile(r"\A([$€£¥₹])?\s*([+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+)")
_FRACTION = re.compile(r"\A\\?d?frac\{(-?\d+)\}\{(\d+)\}\Z")
_SLASH_DATE = re.compile(r"\A(\d{1,2})/(\d{1,2})/(\d{4})\b")
_ISO_DATE = re.compile(r"\A(\d{4})-(\d{1,2})-(\d{1,2})\b")
_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        )
    )
    for m in names
}
_MONTH_FIRST = re.compile(r"\A([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")
_DAY_FIRST = re.compile(r"\A(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]+)\.?,?\s+(\d{4})\b")
_TRAILING = " \t\n.,;:!*`'\"“”"
_SCALES = {"k": "thousand", "percent": "%", "per cent": "%", "pct": "%"}
"""Units read as the same word before unit names are (``k`` is a thousand, not kelvin)."""
_UNREADABLE = "unreadable"
"""What :func:`_bare` returns for a number it cannot read within bounds (no answer)."""


def final_answer(text: str) -> str | None:
    """The checkable answer ``text`` gives, in canonical form, or ``None`` when it has none.

    Args:
        text: A draft's prose.

    Returns:
        ``number:...``, ``option:...``, ``date:...`` or ``text:...``, or ``None``.
    """
    text = text[-_MAX_TEXT:].strip()
    if not text:
        return None
    boxed = _last_boxed(text)
    if boxed is not None:
        return normalise_answer(boxed)
    hashes = _HASHES.findall(text)
    if hashes:
        return normalise_answer(hashes[-1])
    marked = _MARKERS.findall(text)
    if marked:
        return normalise_answer(_first_sentence(marked[-1]))
    if "\n" not in text and len(text) <= 40:
        bare = _bare(text.strip(_TRAILING))
        if bare is not None:
            return None if bare is _UNREADABLE else bare
    return None


def normalise_answer(answer: str) -> str | None:
    """An answer already picked out (a recorded final answer, a marked one) in canonical form.

    Returns:
        ``number:...``, ``option:...``, ``date:...`` or ``text:...``; ``None`` when empty.
    """
    answer = answer.strip().strip(_TRAILING).strip()
    answer = answer.replace("\\$", "$").replace("\\%", "%").replace("\\!", "").replace("\\,", "")
    if answer.startswith("\\text{") and answer.endswith("}"):
        answer = answer[len("\\text{") : -1].strip()
    if not answer:
        return None
    bare = _bare(answer)
    if bare is not None:
        return None if bare is _UNREADABLE else bare
    option = _OPTION.match(answer)
    if option is not None:
        return f"option:{option.group(1).upper()}"
    number = _NUMBER.match(answer)
    if number is not None and _only_units_after(answer[number.end() :]):
        value = _read_number(number.group(2))
        if value is None:
            return None
        return _number_key(value, number.group(1), answer[number.end() :])
    return f"text:{canonical_text(answer)}"


def _number_key(value: float, symbol: str | None, after: str) -> str:
    """``number:<n>``, with the currency symbol, percent, scale or unit it is written with.

    The unit is part of the value written: ``42``, ``42%``, ``42k`` and ``42 EUR`` are four
    answers (the comparison widens; a panel never vouches for one as another).
    """
    unit = [symbol] if symbol else []
    rest = after.strip(_TRAILING)
    if rest.startswith("%"):
        unit.append("%")
        rest = rest[1:]
    words = " ".join(rest.strip(_TRAILING).split()).casefold()
    if words:
        unit.append(_SCALES.get(words) or canonical_text(words))
    shown = " ".join(unit)
    return f"number:{canonical_number(value)}" + (f" {shown}" if shown else "")


def _bare(text: str) -> str | None:
    """A text that is nothing but a number, an option letter or a date."""
    lone = _LONE_OPTION.match(text)
    if lone is not None:
        return f"option:{lone.group(1).upper()}"
    date = _date(text)
    if date is not None:
        return f"date:{date}"
    fraction = _FRACTION.match(text.replace(" ", ""))
    if fraction is not None:
        top, bottom = _limits.read_int(fraction.group(1)), _limits.read_int(fraction.group(2))
        if top is None or not bottom:  # too many digits to read, or a zero denominator
            return _UNREADABLE
        return f"number:{canonical_number(top / bottom)}"
    number = _NUMBER.match(text)
    if number is not None and text[number.end() :].strip() in ("", "%"):
        value = _read_number(number.group(2))
        if value is None:
            return _UNREADABLE
        return _number_key(value, number.group(1), text[number.end() :])
    return None


def _read_number(written: str) -> float | None:
    """A number as written (``1,000.5``) within the bounds of ``_limits``, or ``None``."""
    return _limits.read_float(written.replace(",", ""))


def _only_units_after(rest: str) -> bool:
    """Whether what follows a number is at most a short unit (``42 apples``, ``5 km``)."""
    rest = rest.strip(_TRAILING)
    words = (rest[1:] if rest.startswith("%") else rest).strip(_TRAILING).split()
    return len(words) <= 2 and all(w.isalpha() for w in words)


def _date(text: str) -> str | None:
    lowered = text.lower()
    found = _SLASH_DATE.match(lowered)
    if found is not None:
        month, day, year = (int(g) for g in found.groups())
        return _iso(year, month, day)
    found = _ISO_DATE.match(lowered)
    if found is not None:
        year, month, day = (int(g) for g in found.groups())
        return _iso(year, month, day)
    found = _MONTH_FIRST.match(lowered)
    if found is not None and found.group(1) in _MONTHS:
        return _iso(int(found.group(3)), _MONTHS[found.group(1)], int(found.group(2)))
    found = _DAY_FIRST.match(lowered)
    if found is not None and found.group(2) in _MONTHS:
        return _iso(int(found.group(3)), _MONTHS[found.group(2)], int(found.group(1)))
    return None


def _iso(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{year:04d}-{month:02d}-{day:02d}"


def _first_sentence(text: str) -> str:
    """The answer after a marker: up to the end of its line, or of its sentence."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    end = re.search(r"\.(?:\s|$)", line)
    if end is not None and not _NUMBER.match(line[end.start() :]):
        line = line[: end.start()]
    return line


def _last_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (braces inside it balanced), or ``None``."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, pos = 1, start + len(_BOXED)
    for i in range(pos, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[pos:i]
    return None
