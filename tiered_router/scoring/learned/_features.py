"""Features of the learned scorer (weights format version 2): structure of the request.

The heuristic features (:mod:`tiered_router.scoring.features`) look for *kinds* of work
(reasoning markers, code, math, tools). Within one kind of work they barely separate the
requests a cheap model gets wrong from the ones it gets right. What does, measured on
RouteLLM's recorded outcomes with subjects held out, is the *shape* of the request:

- the answer options of a multiple-choice question: how long they are and how alike
  (options that share most of their words ask for a fine distinction);
- the stem: length, sentences, numbers, proper nouns, rare words, negations ("NOT",
  "EXCEPT"), quantity words of a word problem ("each", "per", "twice", ...).

Every feature has a raw value (reported in :attr:`Score.features`) and an activation in
[0, 1] (what the weights multiply). A request is in one of two *blocks*: ``choice`` when
its focus message has at least two lettered options (``A. ...``, ``(b) ...``), else
``open``; the learned model keeps one set of weights per block, because a number or a
long stem means something else in a multiple-choice question than in an open task.

Optional hashed words (sublinear term frequency, L2-normalised; word pairs optional)
capture wording; bucket = ``zlib.crc32(word) % buckets``; a word pair ``(a, b)`` lands in
``(crc32(a) * 0x9E3779B1 + crc32(b)) % 2**32 % buckets``.

Pure and memoised per focus text (a bounded LRU cache; it changes no result).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

from tiered_router.scoring._choices import NORMALISE as _NORMALISE
from tiered_router.scoring._choices import option_overlap as _overlap
from tiered_router.scoring._choices import split_options as _options
from tiered_router.scoring.features import FEATURE_ORDER, FeatureVector, extract, focus_text
from tiered_router.turn import Turn

__all__ = [
    "BLOCKS",
    "STRUCTURE_FEATURES",
    "V2_FEATURES",
    "V2Vector",
    "hashed_words",
    "v2_features",
]

BLOCKS: tuple[str, str] = ("choice", "open")
"""Blocks of the version-2 model: multiple-choice requests and everything else."""

STRUCTURE_FEATURES: tuple[str, ...] = (
    "text_chars",
    "stem_chars",
    "stem_words",
    "sentences",
    "question_marks",
    "numbers",
    "distinct_numbers",
    "digit_share",
    "decimals",
    "large_numbers",
    "money",
    "percent",
    "fractions",
    "capitalised",
    "long_words",
    "word_length",
    "distinct_words",
    "negation_caps",
    "negation",
    "blank",
    "quotes",
    "symbols",
    "quantity_words",
    "which_of",
    "options",
    "option_chars",
    "option_chars_max",
    "option_spread",
    "option_words",
    "numeric_options",
    "paired_options",
    "option_overlap",
    "option_overlap_max",
    "option_catchall",
    "statements",
)
"""Structure features of the focus message, in activation order."""

V2_FEATURES: tuple[str, ...] = FEATURE_ORDER + STRUCTURE_FEATURES
"""All version-2 feature names: the heuristic ones, then the structure ones."""

_WORD = re.compile(r"[A-Za-z]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_NUMERIC_OPTION = re.compile(r"[-\u2212+]?[$\u20ac\u00a3]?\s*\d[\d.,/\s]*(?:%|[A-Za-z]{0,6})?\.?")
_FRACTION = re.compile(r"\d/\d")
_CAPS_NEGATIONS = ("NOT", "EXCEPT", "LEAST", "FALSE", "INCORRECT", "NEVER")
_NEGATION_CAPS = re.compile(r"\b(?:NOT|EXCEPT|LEAST|FALSE|INCORRECT|NEVER)\b")
_NEGATION = frozenset({"not", "except", "least", "false", "incorrect", "never", "cannot"})
_QUANTITY = frozenset(
    {
        "each",
        "every",
        "per",
        "total",
        "remaining",
        "left",
        "twice",
        "half",
        "times",
        "fewer",
        "after",
        "then",
        "rest",
        "altogether",
        "combined",
    }
)
_FRACTION_WORDS = frozenset({"half", "third", "thirds", "quarter", "quarters", "fifth", "fifths"})
_CATCHALL = re.compile(r"\b(?:all|none|both|neither) of the (?:above|these|options)\b", re.I)
# ASCII letters lowered, ASCII punctuation and whitespace -> space, other bytes unchanged
_NOT_UPPER = bytes(i for i in range(256) if not 65 <= i <= 90)
_NOT_DIGITS = bytes(i for i in range(256) if not 48 <= i <= 57)
_NOT_SYMBOLS = bytes(i for i in range(256) if i not in b"=+*/^<>()[]{}|")


def _log_scale(x: float, full: float, unit: float) -> float:
    if x <= 0:
        return 0.0
    return min(1.0, math.log1p(x / unit) / math.log1p(full / unit))


def _catchall(options: list[str]) -> bool:
    return any(" of the " in o.lower() and _CATCHALL.search(o) for o in options)


def _caps_negation(text: str) -> bool:
    # substring tests first: the regex runs only when a capitalised negation may be there
    return any(w in text for w in _CAPS_NEGATIONS) and bool(_NEGATION_CAPS.search(text))


class _Structure(NamedTuple):
    block: int
    raw: tuple[float, ...]
    activations: tuple[float, ...]


@lru_cache(maxsize=1024)
def _structure(text: str) -> _Structure:
    stem, options = _options(text)
    words = _WORD.findall(stem)
    n_words = len(words)
    lowered = " ".join(words).lower().split()
    vocabulary = frozenset(lowered)
    stem_chars = len(stem)
    encoded = stem.encode("utf-8", "replace")
    digits = len(encoded.translate(None, _NOT_DIGITS))
    numbers = _NUMBER.findall(stem) if digits else []
    symbols = len(encoded.translate(None, _NOT_SYMBOLS))
    # capitalised words after the first (proper nouns, in a question's stem)
    initials = "".join(map(itemgetter(0), words[1:])).encode()
    capitalised = len(initials.translate(None, _NOT_UPPER))
    long_words = sum(map((8).__lt__, map(len, words)))
    distinct = len(vocabulary)
    fractions = not vocabulary.isdisjoint(_FRACTION_WORDS) or (
        "/" in stem and bool(_FRACTION.search(stem))
    )
    n_opt = len(options)
    if options:
        lengths = [len(o) for o in options]
        option_chars = sum(lengths) / n_opt
        option_max = float(max(lengths))
        spread = (max(lengths) - min(lengths)) / (max(lengths) + 1)
        option_words = sum(len(o.split()) for o in options) / n_opt
        numeric = sum(1 for o in options if _NUMERIC_OPTION.fullmatch(o)) / n_opt
        paired = 1.0 if all("," in o for o in options) else 0.0
        overlap, overlap_max = _overlap(options)
    else:
        option_chars = option_max = spread = option_words = numeric = paired = 0.0
        overlap = overlap_max = 0.0
    share = n_words or 1
    raw = (
        float(len(text)),
        float(stem_chars),
        float(n_words),
        float(len(_SENTENCE_END.findall(stem))),
        float(stem.count("?")),
        float(len(numbers)),
        float(len(set(numbers))),
        digits / (stem_chars + 1),
        1.0 if numbers and any("." in n for n in numbers) else 0.0,
        1.0
        if numbers and any(len(n.replace(",", "").split(".")[0]) >= 4 for n in numbers)
        else 0.0,
        1.0 if ("$" in stem or "\u20ac" in stem or "\u00a3" in stem) else 0.0,
        1.0 if ("%" in stem or "percent" in vocabulary) else 0.0,
        1.0 if fractions else 0.0,
        capitalised / share,
        long_words / share,
        (len("".join(words)) / n_words) if n_words else 0.0,
        distinct / share,
        1.0 if _caps_negation(text) else 0.0,
        1.0 if not _NEGATION.isdisjoint(vocabulary) else 0.0,
        1.0 if "_" in stem else 0.0,
        1.0 if ('"' in stem or "\u201c" in stem) else 0.0,
        symbols / (stem_chars + 1),
        float(len(list(filter(_QUANTITY.__contains__, lowered)))),
        1.0 if "which of the following" in stem.lower() else 0.0,
        float(n_opt),
        option_chars,
        option_max,
        spread,
        option_words,
        numeric,
        paired,
        overlap,
        overlap_max,
        1.0 if options and _catchall(options) else 0.0,
        1.0 if "Statement 1" in stem else 0.0,
    )
    activations = (
        _log_scale(raw[0], 6000.0, 50.0),
        _log_scale(raw[1], 6000.0, 50.0),
        _log_scale(raw[2], 1000.0, 10.0),
        _log_scale(raw[3], 40.0, 1.0),
        min(1.0, raw[4] / 4.0),
        _log_scale(raw[5], 40.0, 1.0),
        _log_scale(raw[6], 40.0, 1.0),
        min(1.0, 5.0 * raw[7]),
        raw[8],
        raw[9],
        raw[10],
        raw[11],
        raw[12],
        min(1.0, 3.0 * raw[13]),
        min(1.0, 3.0 * raw[14]),
        min(1.0, max(0.0, (raw[15] - 3.0) / 5.0)),
        raw[16],
        raw[17],
        raw[18],
        raw[19],
        raw[20],
        min(1.0, 10.0 * raw[21]),
        _log_scale(raw[22], 20.0, 1.0),
        raw[23],
        min(1.0, raw[24] / 8.0),
        _log_scale(raw[25], 1000.0, 10.0),
        _log_scale(raw[26], 1000.0, 10.0),
        raw[27],
        _log_scale(raw[28], 200.0, 1.0),
        raw[29],
        raw[30],
        raw[31],
        raw[32],
        raw[33],
        raw[34],
    )
    return _Structure(block=0 if options else 1, raw=raw, activations=activations)


class V2Vector(NamedTuple):
    """The version-2 features of one turn.

    Attributes:
        block: Index into :data:`BLOCKS` (0 ``choice``, 1 ``open``).
        raw: Raw value of every feature in :data:`V2_FEATURES`, by name.
        activations: Activations in [0, 1], in :data:`V2_FEATURES` order.
        heuristic: The heuristic feature vector (for explanations).
    """

    block: int
    raw: dict[str, float]
    activations: tuple[float, ...]
    heuristic: FeatureVector


def v2_features(turn: Turn) -> V2Vector:
    """Compute the version-2 features of a turn (heuristic + structure of the focus).

    Args:
        turn: The turn.

    Returns:
        Block, raw values and activations.
    """
    vector = extract(turn)
    structure = _structure(focus_text(turn))
    raw = dict(vector.raw)
    raw.update(zip(STRUCTURE_FEATURES, structure.raw, strict=True))
    return V2Vector(
        block=structure.block,
        raw=raw,
        activations=vector.activations + structure.activations,
        heuristic=vector,
    )


_MASK = 0xFFFFFFFF
_PAIR_MIX = 0x9E3779B1
_PAIR_TAG = 1 << 32


@lru_cache(maxsize=256)
def hashed_words(text: str, buckets: int, pairs: bool) -> tuple[tuple[int, float], ...]:
    """Hashed bag of words of a text: ``(bucket, value)`` pairs, buckets ascending.

    Words are lowered and split on ASCII punctuation and whitespace (UTF-8 bytes); each
    distinct word (and, with ``pairs``, each distinct pair of neighbouring words) counts
    ``1 + ln(count)``; the vector is L2-normalised.

    Args:
        text: The text (the focus message).
        buckets: Number of buckets (> 0).
        pairs: Also hash neighbouring word pairs.

    Returns:
        The non-zero buckets and their values.
    """
    words = text.encode("utf-8", "replace").translate(_NORMALISE).split()
    if not words:
        return ()
    codes = [zlib.crc32(w) for w in words]
    counts: Counter[int] = Counter(codes)
    if pairs:
        # bit 32 keeps a pair's code apart from a word's in the counter
        counts.update(
            ((a * _PAIR_MIX + b) & _MASK) | _PAIR_TAG
            for a, b in zip(codes, codes[1:], strict=False)
        )
    out: dict[int, float] = {}
    for code, count in counts.items():
        value = 1.0 + math.log(count)
        bucket = (code & _MASK) % buckets
        out[bucket] = out.get(bucket, 0.0) + value
    norm = math.sqrt(math.fsum(v * v for v in out.values()))
    return tuple((b, out[b] / norm) for b in sorted(out))
