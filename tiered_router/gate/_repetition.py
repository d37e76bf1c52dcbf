"""The ``repetition`` check: a draft stuck in a loop.

Diffusion drafts (and autoregressive ones at high temperature) can fill the end of their
canvas with one phrase, line, character or fragment over and over; this check fails them
while passing ordinary prose, code and JSON.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from itertools import compress, islice
from typing import ClassVar

from tiered_router.gate._text import _int
from tiered_router.turn import Completion, Turn

__all__ = ["RepetitionCheck"]

_SEPARATORS = frozenset("-=_*#~.\u2500\u2501\u2550")
_PARTNER = {"]": "[", "}": "{", ")": "(", "[": "]", "{": "}", "(": ")"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RepetitionCheck:
    """``repetition``: the draft is not stuck in a loop.

    Three tests over the last ``window`` characters of the text (loops take over the end
    of a draft; bounding the window keeps the check O(1) on long drafts):

    - the share of repeated word ``n``-grams, ``1 - unique / total``, must not exceed
      ``max_ratio`` (skipped below ``min_words`` words). A phrase repeated k times over a
      share s of the text scores about ``s * (1 - 1/k)``. Real answers (prose, code,
      JSON) score a median of 0.01 and a 99th percentile near 0.2 at ``n=4``;
    - no line (with letters or digits) may repeat more than ``max_line_repeats`` times in
      a row;
    - no single character may repeat ``max_char_run`` times in a row (separators such as
      ``-``, ``=``, ``*`` and whitespace excepted, and brackets the draft balances: the
      start and end of deeply nested JSON are not a loop);
    - the text may not end in ``loop_chars`` characters that are one fragment of at most
      ``loop_fragment`` characters over and over (``<tool_call><tool_call>...``,
      ``{"a":1},{"a":1},...``): a loop with no space in it, which the word and line tests
      cannot see (fragments of whitespace and separators excepted).

    Attributes:
        n: Words per n-gram.
        max_ratio: Highest share of repeated n-grams that passes.
        min_words: Texts with fewer words skip the n-gram test.
        window: Characters from the end of the text examined (0: all of it).
        max_line_repeats: Most consecutive copies of one line.
        max_char_run: Shortest run of one character that fails.
        loop_fragment: Longest fragment whose repeats at the end fail (0: test off).
        loop_chars: How many characters at the end the repeats must fill.
    """

    name: ClassVar[str] = "repetition"
    n: int = 4
    max_ratio: float = 0.5
    min_words: int = 32
    window: int = 2048
    max_line_repeats: int = 4
    max_char_run: int = 48
    loop_fragment: int = 32
    loop_chars: int = 320

    def __post_init__(self) -> None:
        _int(self.n, "repetition.n", minimum=1)
        _int(self.min_words, "repetition.min_words", minimum=1)
        _int(self.window, "repetition.window")
        _int(self.max_line_repeats, "repetition.max_line_repeats", minimum=1)
        _int(self.max_char_run, "repetition.max_char_run", minimum=2)
        _int(self.loop_fragment, "repetition.loop_fragment")
        _int(self.loop_chars, "repetition.loop_chars", minimum=2)
        ratio = self.max_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ValueError(f"repetition.max_ratio: must be in (0, 1], got {ratio!r}")

    def __call__(self, completion: Completion, turn: Turn, /) -> str | None:
        """Return a reason when the draft loops."""
        text = completion.text
        cut = bool(self.window) and len(text) > self.window
        if cut:
            text = text[-self.window :]
        words = text.split()
        if cut and words:
            words = words[1:]  # the first word may be cut in half
        return (
            self._char_run(text, completion.text)
            or self._lines(text)
            or self._ngrams(words)
            or self._loop(text)
        )

    def _char_run(self, text: str, whole: str) -> str | None:
        # a run of >= 2h equal characters covers two neighbouring samples taken every h
        # characters, so only characters equal at neighbouring samples need a real search
        limit = self.max_char_run
        samples = text[:: limit // 2]
        pairs = compress(samples, map(operator.eq, samples, islice(samples, 1, None)))
        for char in set(pairs) - _SEPARATORS:
            if char.isspace() or char * limit not in text:
                continue
            partner = _PARTNER.get(char)
            if partner is not None and whole.count(partner) >= whole.count(char):
                continue  # each bracket is matched by one of its partner: nesting, not a loop
            return f"character {char!r} repeated {limit}+ times in a row"
        return None

    def _loop(self, text: str) -> str | None:
        span = self.loop_chars
        if not self.loop_fragment or len(text) < span:
            return None
        tail = text[-span:]
        for size in range(1, min(self.loop_fragment, span // 2) + 1):
            if tail[size:] == tail[:-size]:  # the tail has period `size`
                fragment = tail[-size:]
                if all(c.isspace() or c in _SEPARATORS for c in fragment):
                    return None
                return (
                    f"the text ends in {span}+ characters of one fragment repeated: "
                    f"{fragment[:40]!r}"
                )
        return None

    def _lines(self, text: str) -> str | None:
        lines = text.splitlines()
        limit = self.max_line_repeats
        if len(lines) <= limit:
            return None
        # equal[i] is 1 when line i+1 repeats line i: a run is `limit` ones in a row
        equal = bytes(map(operator.eq, lines, islice(lines, 1, None)))
        ones = b"\x01" * limit
        start = equal.find(ones)
        while start >= 0:
            line = lines[start]
            if any(c.isalnum() for c in line):
                return f"line {line.strip()[:60]!r} repeated {limit + 1}+ times in a row"
            start = equal.find(ones, start + 1)
        return None

    def _ngrams(self, words: list[str]) -> str | None:
        n = self.n
        if len(words) < max(self.min_words, n + 1):
            return None
        total = len(words) - n + 1
        # n-grams starting with different words differ, so distinct words bound the ratio
        # from above; most prose is cleared here without building any n-gram
        if 1 - (len(set(words)) - n + 1) / total <= self.max_ratio:
            return None
        grams = zip(*(islice(words, i, None) for i in range(n)), strict=False)
        unique = len(set(grams))
        ratio = 1 - unique / total
        if ratio <= self.max_ratio:
            return None
        top, count = Counter(
            zip(*(islice(words, i, None) for i in range(n)), strict=False)
        ).most_common(1)[0]
        phrase = " ".join(top)[:60]
        return (
            f"repetition loop: {ratio:.0%} of {n}-word sequences are repeats "
            f"(max {self.max_ratio:.0%}); {phrase!r} x{count}"
        )
