"""Text analysis for the scorers: markers, code and math density of one message.

Pure and memoised (a bounded LRU cache per text; the cache changes no result). Works on
UTF-8 bytes: ``bytes.translate``, ``split`` and one set lookup per word run in C, which is
what keeps a few kilobytes of text within tens of microseconds.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import NamedTuple

__all__ = ["TextSignals", "clip", "normalised_words", "saturate", "text_signals"]

_DILUTION_WORDS = 150

# bytes-level normalisation: ASCII letters lowered, ASCII punctuation and whitespace -> space,
# other bytes (UTF-8 of non-ASCII text) unchanged
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\t\n\r\x0b\x0c"
_NORMALISE = bytes(32 if i in _PUNCT else (i + 32 if 65 <= i <= 90 else i) for i in range(256))
# digits -> "0", everything else -> space: len(split()) is then the number of digit runs
_DIGIT_RUNS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
# digits -> "0", arithmetic operators kept, whitespace deleted, the rest -> "a": "12 + 3"
# becomes "00+0", so one regex with a literal first byte finds the operations quickly
_OPERATORS = b"+*/^="
_ARITHMETIC = bytes(48 if 48 <= i <= 57 else (i if i in _OPERATORS else 97) for i in range(256))
_OPERATION = re.compile(rb"0[+*/^=]0")
_CODE_CHARS = b"{};=<>()[]"
_NOT_CODE_CHARS = bytes(i for i in range(256) if i not in _CODE_CHARS)


def _words(*items: str) -> frozenset[bytes]:
    return frozenset(w.encode() for item in items for w in item.split())


_REASONING_STRONG = _words(
    "prove proof proofs derive derivation optimize optimise optimization optimal rigorous",
    "rigorously theorem lemma induction contradiction counterexample formally justify",
    "architect architecture debug refactor algorithm complexity tradeoff tradeoffs",
    "bottleneck invariant invariants asymptotic",
)
_REASONING_STRONG_PHRASES = (
    "step by step",
    "trade off",
    "trade offs",
    "root cause",
    "design a",
    "think carefully",
    "edge cases",
    "multi step",
    "show that",
    "show your work",
    "from first principles",
)
_REASONING_WEAK = _words(
    "why analyze analyse analysis compare comparison contrast plan planning reason reasoning",
    "evaluate assess implications consequences infer deduce determine estimate hypothesis",
    "strategy critique pros cons explain tradeoff diagnose investigate verify",
)
_REASONING_WEAK_PHRASES = ("what if", "how would", "how does", "how can", "in detail")
_CONSTRAINTS = _words(
    "must exactly without never always ensure require requires required cannot strictly",
    "mandatory only within maximum minimum limit",
)
_CONSTRAINT_PHRASES = (
    "at least",
    "at most",
    "no more than",
    "no less than",
    "do not",
    "don t",
    "should not",
    "must not",
    "make sure",
    "no longer than",
)
_SIMPLE = _words(
    "translate translation summarize summarise summary rephrase rewrite paraphrase spell",
    "spelling hi hello hey thanks greet greeting synonym synonyms define definition tl dr",
    "capitalize lowercase uppercase",
)
_SIMPLE_PHRASES = ("capital of", "what time", "fix the typo", "what is the date")
# programming words that are rare in everyday prose ("return", "list", "class" are not here)
_CODE = _words(
    "def function functions const lambda async await struct impl fn void nullptr",
    "python javascript typescript java golang rustc bash sql regex json yaml html css",
    "compile compiler exception traceback stacktrace bug unittest pytest endpoint api",
    "script code snippet runtime segfault recursion recursive array dict boolean kotlin",
    "cpp dockerfile kubernetes linter variable variables",
)
_MATH_TERMS = _words(
    "equation equations integral derivative theorem prime primes probability polynomial",
    "matrix matrices vector vectors sqrt modulo mod divisible integer integers fraction",
    "fractions percent percentage ratio average area volume radius angle triangle circle",
    "solve calculate compute logarithm log sin cos tan exponent algebra geometry calculus",
    "permutation permutations combination combinations variance median remainder",
    "perimeter interest sum product digits factorial infinitely infinite convergence",
    "eigenvalue eigenvalues determinant gcd lcm inequality",
)
_WORD_PROBLEM_PHRASES = (
    "how many",
    "how much",
    "how long",
    "how far",
    "how old",
    "what percent",
    "in total",
    "times as",
    "more than",
    "less than",
    "per day",
    "per hour",
    "each week",
)
_LATEX = (b"\\frac", b"\\sqrt", b"\\sum", b"\\int", b"\\cdot", b"\\le", b"\\ge", b"$$", b"\\(")
_APPROVAL = _words(
    "yes yeah yep yup ok okay k y sure go ahead do it continue proceed please sounds good",
    "great lgtm fine approved approve confirm confirmed right correct that works next on",
    "carry keep going agreed agree perfect alright all looks let s that s",
)
_GRATITUDE = _words("thanks thank you thx ty cheers bye goodbye so much")
# words that tie a short message to what came before ("and for n = 5?", "why is that?")
_ANAPHORA = _words(
    "it its that this those these them they same also again instead above previous earlier",
    "more else other then why how what about and but",
)

_Phrase = tuple[bytes, frozenset[bytes], int, str]
"""(needle padded with spaces, the phrase's words, category, the phrase)."""

# categories of the lexicon
_STRONG, _WEAK, _CONSTRAINT, _SIMPLE_TASK, _CODE_WORD, _MATH_WORD, _WORD_PROBLEM = range(7)


def _lexicon() -> tuple[dict[bytes, tuple[int, ...]], dict[bytes, tuple[_Phrase, ...]]]:
    words: dict[bytes, tuple[int, ...]] = {}
    for category, vocabulary in (
        (_STRONG, _REASONING_STRONG),
        (_WEAK, _REASONING_WEAK),
        (_CONSTRAINT, _CONSTRAINTS),
        (_SIMPLE_TASK, _SIMPLE),
        (_CODE_WORD, _CODE),
        (_MATH_WORD, _MATH_TERMS),
    ):
        for word in vocabulary:
            words[word] = (*words.get(word, ()), category)
    phrases: dict[bytes, tuple[_Phrase, ...]] = {}
    for category, items in (
        (_STRONG, _REASONING_STRONG_PHRASES),
        (_WEAK, _REASONING_WEAK_PHRASES),
        (_CONSTRAINT, _CONSTRAINT_PHRASES),
        (_SIMPLE_TASK, _SIMPLE_PHRASES),
        (_WORD_PROBLEM, _WORD_PROBLEM_PHRASES),
    ):
        for item in items:
            parts = item.split()
            first = parts[0].encode()
            entry = (f" {item} ".encode(), _words(item), category, item)
            phrases[first] = (*phrases.get(first, ()), entry)
    return words, phrases


# One pass of the text's words through a set lookup finds every word the analysis needs
# (markers, words of phrases, anaphora); a phrase's substring search runs only when all its
# words occur in the text. No set of all the text's words is built: that is the slow part.
_LEXICON, _PHRASE_INDEX = _lexicon()
_LOOKUP = frozenset(_LEXICON).union(
    *(words for entries in _PHRASE_INDEX.values() for _, words, _, _ in entries), _ANAPHORA
)
_SHORT_REPLY = _APPROVAL | _GRATITUDE


class TextSignals(NamedTuple):
    """Content signals of one text (raw, unweighted).

    A named tuple rather than a frozen dataclass: it is built for every analysed text, and
    a tuple is built several times faster than a frozen dataclass (whose ``__init__`` goes
    through ``object.__setattr__`` once per field); it is just as immutable.

    Attributes:
        reasoning: Reasoning / multi-step markers (distinct; strong count 1, weak 0.3,
            thinned out in texts longer than 150 words).
        code: Code density score (fences, code-like symbols per word, code vocabulary).
        math: Math density score (numbers, operations, LaTeX, math terms, word problems).
        questions: Number of question marks.
        constraints: Distinct constraint markers ("must", "exactly", "at least", ...),
            thinned out in texts longer than 150 words.
        simple: Distinct simple-task markers ("translate", "summarize", "hello", ...).
        words: Number of words.
        approval: The text is a bare approval ("yes", "ok", "go ahead", ...).
        gratitude: The text is only thanks or goodbye.
        anaphoric: The text refers back ("it", "that", "what about", ...).
        markers: Up to four matched reasoning markers (strong first), for explanations.
        difficulty: Weight-free difficulty in [0, 1] (reasoning, code, math, constraints),
            used to carry an earlier message's difficulty into later turns.
        code_signs: What made ``code`` (fenced blocks, programming words such as "json",
            code-like symbols such as brackets), for explanations: a sentence that only names
            JSON or has a parenthesis is said to, not called code.
        math_signs: What made ``math`` (math terms, LaTeX, operations, numbers, a word
            problem), for explanations.
    """

    reasoning: float
    code: float
    math: float
    questions: int
    constraints: float
    simple: int
    words: int
    approval: bool
    gratitude: bool
    anaphoric: bool
    markers: tuple[str, ...]
    difficulty: float
    code_signs: tuple[str, ...] = ()
    math_signs: tuple[str, ...] = ()


def _difficulty(reasoning: float, code: float, math_: float, constraints: float) -> float:
    rest = (
        (1.0 - saturate(reasoning, 1.0))
        * (1.0 - saturate(code, 3.0))
        * (1.0 - saturate(math_, 3.0))
        * (1.0 - 0.5 * saturate(constraints, 2.0))
    )
    return 1.0 - rest


def saturate(x: float, scale: float) -> float:
    """Map ``x >= 0`` to [0, 1): ``1 - exp(-x / scale)``."""
    return 1.0 - math.exp(-x / scale) if x > 0 else 0.0


def clip(text: str, limit: int, head_share: float) -> str:
    """Cut ``text`` to ``limit`` characters, keeping ``head_share`` of them from its head."""
    if len(text) <= limit:
        return text
    head = int(limit * head_share)
    return text[:head] + "\n" + text[len(text) - (limit - head) :]


@lru_cache(maxsize=1024)
def text_signals(text: str) -> TextSignals:
    """Analyse one text (callers clip long texts first). Memoised; pure.

    Args:
        text: The text to analyse.

    Returns:
        Its content signals.
    """
    raw = text.encode("utf-8", "replace")
    norm = raw.translate(_NORMALISE)
    words = norm.split()
    hits = _LOOKUP.intersection(words)
    padded = b" " + norm + b" "

    counts = [0, 0, 0, 0, 0, 0, 0]
    strong: list[str] = []
    weak: list[str] = []
    code_words: list[str] = []
    math_words: list[str] = []
    for word in hits:
        for category in _LEXICON.get(word, ()):
            counts[category] += 1
            if category == _STRONG:
                strong.append(word.decode())
            elif category == _WEAK:
                weak.append(word.decode())
            elif category == _CODE_WORD:
                code_words.append(word.decode())
            elif category == _MATH_WORD:
                math_words.append(word.decode())
        for needle, needed, category, name in _PHRASE_INDEX.get(word, ()):
            if needed <= hits and needle in padded:
                counts[category] += 1
                if category == _STRONG:
                    strong.append(name)
                elif category == _WEAK:
                    weak.append(name)
    n_words = len(words)
    # in a short message "why" or "must" is the ask; in a long pasted text it is mostly
    # incidental, so weak markers and constraints thin out with length (strong ones do not)
    dilution = 1.0 if n_words <= _DILUTION_WORDS else math.sqrt(_DILUTION_WORDS / n_words)
    reasoning = counts[_STRONG] + 0.3 * counts[_WEAK] * dilution
    constraints = counts[_CONSTRAINT] * dilution
    simple = counts[_SIMPLE_TASK]

    fence_marks = raw.count(b"```")
    fences = (fence_marks + 1) // 2
    symbols = len(raw.translate(None, _NOT_CODE_CHARS))
    code = (
        3.0 * min(fences, 2) + 0.6 * counts[_CODE_WORD] + min(4.0, 6.0 * symbols / max(n_words, 10))
    )

    numbers = len(raw.translate(_DIGIT_RUNS).split())
    operations = 0
    word_problem = False
    if numbers >= 2:
        operations = len(_OPERATION.findall(raw.translate(_ARITHMETIC, b" \t\r\n")))
        word_problem = counts[_WORD_PROBLEM] > 0
    latex = sum(1 for s in _LATEX if s in raw) if (b"\\" in raw or b"$$" in raw) else 0
    math_ = (
        counts[_MATH_WORD]
        + 1.5 * latex
        + 0.7 * min(operations, 6)
        + (2.0 if word_problem else 0.0)
        + 0.1 * min(numbers, 10)
    )

    approval = gratitude = False
    if 0 < n_words <= 6:
        vocab = frozenset(words)
        approval = vocab <= _APPROVAL
        gratitude = not approval and vocab <= _SHORT_REPLY
    markers = (sorted(strong) + sorted(weak))[:4] if strong or weak else []
    signs: list[str] = []
    if fences:
        signs.append(f"{fences} fenced block{'s' if fences > 1 else ''}")
    if code_words:
        signs.append("programming words " + ", ".join(sorted(code_words)[:3]))
    if symbols:
        signs.append(f"{symbols} code-like symbol{'s' if symbols > 1 else ''} ({{}};=<>()[])")
    maths: list[str] = []
    if math_words:
        maths.append("math terms " + ", ".join(sorted(math_words)[:3]))
    if latex:
        maths.append("LaTeX")
    if operations:
        maths.append(f"{operations} arithmetic operation{'s' if operations > 1 else ''}")
    if word_problem:
        maths.append("a word problem")
    if numbers:
        maths.append(f"{numbers} number{'s' if numbers > 1 else ''}")
    return TextSignals(
        reasoning=reasoning,
        code=code,
        math=math_,
        questions=raw.count(b"?"),
        constraints=constraints,
        simple=simple,
        words=n_words,
        approval=approval,
        gratitude=gratitude,
        anaphoric=not hits.isdisjoint(_ANAPHORA),
        markers=tuple(markers),
        difficulty=_difficulty(reasoning, code, math_, constraints),
        code_signs=tuple(signs),
        math_signs=tuple(maths),
    )


@lru_cache(maxsize=256)
def normalised_words(text: str) -> frozenset[bytes]:
    """Distinct words of a text, lowered, split on ASCII punctuation and whitespace (UTF-8).

    Args:
        text: The text.

    Returns:
        Its distinct normalised words, as UTF-8 bytes.
    """
    return frozenset(text.encode("utf-8", "replace").translate(_NORMALISE).split())
