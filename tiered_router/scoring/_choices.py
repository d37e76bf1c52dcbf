"""The lettered answer options of a multiple-choice question, and how alike they are.

Shared by the transfer scorer and the learned scorer's features; it loads neither model.
"""

from __future__ import annotations

__all__ = ["LETTERS", "NORMALISE", "option_overlap", "split_options"]

LETTERS = "abcdefgh"
"""Option letters read, in order."""
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\t\n\r\x0b\x0c"
NORMALISE = bytes(32 if i in _PUNCT else (i + 32 if 65 <= i <= 90 else i) for i in range(256))
"""A ``bytes.translate`` table: punctuation to spaces, ASCII upper case to lower."""


def _option(line: str) -> tuple[str, str] | None:
    """``("b", "text")`` for a line ``B. text`` / ``(b) text`` / ``b) text``, else ``None``."""
    line = line.strip()
    if len(line) < 2:
        return None
    if line[0] == "(" and len(line) >= 3 and line[2] == ")":
        letter, rest = line[1], line[3:]
    elif line[1] in ".)":
        letter, rest = line[0], line[2:]
    else:
        return None
    letter = letter.lower()
    return (letter, rest.strip()) if letter in LETTERS else None


def split_options(text: str) -> tuple[str, list[str]]:
    """Split a multiple-choice text into its stem and its lettered options (in order)."""
    if "\n" not in text:
        return text, []
    found: list[str] = []
    start = -1
    offset = 0
    for line in text.split("\n"):
        option = _option(line) if len(line) >= 2 else None
        if option is not None:
            letter, rest = option
            if letter == LETTERS[len(found) % len(LETTERS)] and len(found) < len(LETTERS):
                if not found:
                    start = offset
                found.append(rest)
            elif letter == "a":  # a new list starts: keep the later one (the question's)
                found = [rest]
                start = offset
        offset += len(line) + 1
    if len(found) < 2:
        return text, []
    return text[:start], found


def option_overlap(options: list[str]) -> tuple[float, float]:
    """Mean and highest word overlap (Jaccard) between two options, over every pair."""
    joined = "\x00".join(options).encode("utf-8", "replace").translate(NORMALISE)
    sets = [frozenset(part.split()) for part in joined.split(b"\x00")]
    sizes = [len(a) for a in sets]
    total = 0.0
    top = 0.0
    pairs = 0
    for i, a in enumerate(sets):
        for j in range(i + 1, len(sets)):
            shared = len(a.intersection(sets[j]))
            union = sizes[i] + sizes[j] - shared
            value = shared / union if union else 1.0
            total += value
            top = value if value > top else top
            pairs += 1
    return (total / pairs, top) if pairs else (0.0, 0.0)
