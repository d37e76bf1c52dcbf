"""Feature extraction shared by the scorers and the rules: pure functions of a :class:`Turn`.

A turn becomes a fixed vector of named features. Each feature has a *raw* value (a count, a
size, a flag; what :attr:`Score.features` reports) and an *activation* in [0, 1] (a
saturating transform of the raw value; what the scorers weigh). Saturation is the point:
the 30th tool or the 8,000th token adds almost nothing, so no single feature can carry a
turn to the frontier on volume alone.

What is read, and how much of it:

- the focus message (the last user message; the last message when there is none) is
  scanned up to ``FOCUS_SCAN_CHARS`` (head and tail);
- the context (the newest ``CONTEXT_MESSAGES`` user/assistant messages other than the
  focus) is scanned up to ``CONTEXT_SCAN_CHARS`` each, and weighed with a decay per
  message back;
- tool results, system prompts and tool-call arguments count only towards sizes.

Text analysis is memoised per (truncated) text in a bounded LRU cache: an agent re-sends
the same messages every step, so most of them are analysed once. The cache changes no
result, only the time it takes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from tiered_router.turn import Turn, message_text

__all__ = [
    "CONTEXT_DECAY",
    "CONTEXT_MESSAGES",
    "CONTEXT_SCAN_CHARS",
    "FEATURE_ORDER",
    "FOCUS_SCAN_CHARS",
    "FeatureVector",
    "TextSignals",
    "approx_tokens",
    "extract",
    "focus_index",
    "focus_text",
    "normalised_words",
    "schema_complexity",
    "text_signals",
]

FEATURE_ORDER: tuple[str, ...] = (
    "prompt_tokens",
    "depth",
    "tools",
    "tool_results",
    "response_schema",
    "reasoning",
    "code",
    "math",
    "questions",
    "constraints",
    "simple",
    "final",
    "step",
    "context",
)
"""Feature names, in the order of :attr:`FeatureVector.activations`."""

FOCUS_SCAN_CHARS = 4000
"""Characters of the focus message analysed (3/4 from its head, 1/4 from its tail)."""
CONTEXT_SCAN_CHARS = 600
"""Characters analysed of each context message (2/3 head, 1/3 tail)."""
CONTEXT_MESSAGES = 4
"""How many user/assistant messages besides the focus make up the context."""
CONTEXT_DECAY = 0.8
"""Weight of a context message relative to the next newer one."""

_SCHEMA_NODE_CAP = 256
_DILUTION_WORDS = 150

# bytes-level normalisation: ASCII letters lowered, ASCII punctuation and whitespace -> space,
# other bytes (UTF-8 of non-ASCII text) unchanged. bytes.translate runs in C, which is what
# keeps a 4 KB message under ~30 microseconds.
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


def _phrases(*items: str) -> tuple[str, ...]:
    return items


_REASONING_STRONG = _words(
    "prove proof proofs derive derivation optimize optimise optimization optimal rigorous",
    "rigorously theorem lemma induction contradiction counterexample formally justify",
    "architect architecture debug refactor algorithm complexity tradeoff tradeoffs",
    "bottleneck invariant invariants asymptotic",
)
_REASONING_STRONG_PHRASES = _phrases(
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
_REASONING_WEAK_PHRASES = _phrases("what if", "how would", "how does", "how can", "in detail")
_CONSTRAINTS = _words(
    "must exactly without never always ensure require requires required cannot strictly",
    "mandatory only within maximum minimum limit",
)
_CONSTRAINT_PHRASES = _phrases(
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
_SIMPLE_PHRASES = _phrases("capital of", "what time", "fix the typo", "what is the date")
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
_WORD_PROBLEM_PHRASES = _phrases(
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


_Phrase = tuple[bytes, frozenset[bytes], int, str]
# One set intersection with the text's vocabulary finds every candidate marker; a phrase's
# substring search runs only when all its words occur in the text.
_LEXICON, _PHRASE_INDEX = _lexicon()
_LOOKUP = frozenset(_LEXICON) | frozenset(_PHRASE_INDEX)


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


def _difficulty(reasoning: float, code: float, math_: float, constraints: float) -> float:
    rest = (
        (1.0 - _saturate(reasoning, 1.0))
        * (1.0 - _saturate(code, 3.0))
        * (1.0 - _saturate(math_, 3.0))
        * (1.0 - 0.5 * _saturate(constraints, 2.0))
    )
    return 1.0 - rest


def _saturate(x: float, scale: float) -> float:
    """Map ``x >= 0`` to [0, 1): ``1 - exp(-x / scale)``."""
    return 1.0 - math.exp(-x / scale) if x > 0 else 0.0


class _LogScale:
    """Map ``x >= 0`` to [0, 1] on a log scale, reaching 1 at ``x == full``."""

    __slots__ = ("_denominator", "_unit")

    def __init__(self, full: float, unit: float = 1.0) -> None:
        self._unit = unit
        self._denominator = math.log1p(full / unit)

    def __call__(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return min(1.0, math.log1p(x / self._unit) / self._denominator)


_TOKENS_SCALE = _LogScale(8000.0, 64.0)
_DEPTH_SCALE = _LogScale(40.0)
_TOOLS_SCALE = _LogScale(20.0)
_SCHEMA_SCALE = _LogScale(60.0)
_STEP_SCALE = _LogScale(30.0)


def _clip(text: str, limit: int, head_share: float) -> str:
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
    vocab = frozenset(words)
    padded = b" " + norm + b" "

    counts = [0, 0, 0, 0, 0, 0, 0]
    strong: list[str] = []
    weak: list[str] = []
    for word in vocab & _LOOKUP:
        for category in _LEXICON.get(word, ()):
            counts[category] += 1
            if category == _STRONG:
                strong.append(word.decode())
            elif category == _WEAK:
                weak.append(word.decode())
        for needle, needed, category, name in _PHRASE_INDEX.get(word, ()):
            if needed <= vocab and needle in padded:
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

    approval = 0 < n_words <= 6 and vocab <= _APPROVAL
    gratitude = 0 < n_words <= 6 and not approval and vocab <= (_GRATITUDE | _APPROVAL)
    markers = (sorted(strong) + sorted(weak))[:4] if strong or weak else []
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
        anaphoric=not vocab.isdisjoint(_ANAPHORA),
        markers=tuple(markers),
        difficulty=_difficulty(reasoning, code, math_, constraints),
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


def approx_tokens(turn: Turn) -> int:
    """Approximate prompt tokens of a turn: characters of the messages / 4, rounded up.

    Counts every message's text and its tool-call arguments; tool specs and the
    ``response_format`` are not counted. Shared by the scorers and the
    ``min_prompt_tokens`` rule condition so both see the same number.

    Args:
        turn: The turn.

    Returns:
        The approximate number of prompt tokens.
    """
    return (_message_chars(turn) + 3) // 4


def _message_chars(turn: Turn) -> int:
    chars = 0
    for msg in turn.messages:
        chars += len(message_text(msg))
        calls = msg.get("tool_calls")
        if calls:
            chars += _call_chars(calls)
    return chars


def _call_chars(calls: Any) -> int:
    chars = 0
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if type(args) is str:
            chars += len(args)
    return chars


def focus_index(turn: Turn) -> int:
    """Index of the focus message: the last user message, else the last message."""
    messages = turn.messages
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages) - 1


def focus_text(turn: Turn) -> str:
    """Text of the focus message, clipped to :data:`FOCUS_SCAN_CHARS` (head and tail)."""
    return _clip(message_text(turn.messages[focus_index(turn)]), FOCUS_SCAN_CHARS, 0.75)


def schema_complexity(response_format: Mapping[str, Any] | None) -> int:
    """Size of the output contract: 0 none/text, 1 ``json_object``, else schema nodes + depth.

    For ``json_schema`` the value is the number of schema nodes (capped at 256) plus twice
    the nesting depth beyond the top level.

    Args:
        response_format: OpenAI's ``response_format``, or ``None``.

    Returns:
        The complexity (0 when there is no contract).
    """
    if not response_format:
        return 0
    kind = response_format.get("type")
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        schema = wrapper.get("schema") if isinstance(wrapper, Mapping) else None
        if not isinstance(schema, Mapping):
            return 1
        nodes, depth = _walk_schema(schema)
        return nodes + 2 * max(0, depth - 1)
    return 1 if kind == "json_object" else 0


_ONE_CHILD = frozenset({"items", "additionalProperties", "not", "if", "then", "else"})
_CHILD_MAP = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_CHILD_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_CHILD_KEYS = _ONE_CHILD | _CHILD_MAP | _CHILD_LIST


def _walk_schema(schema: Mapping[str, Any]) -> tuple[int, int]:
    nodes = 0
    max_depth = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack and nodes < _SCHEMA_NODE_CAP:
        node, depth = stack.pop()
        if type(node) is not dict and not isinstance(node, Mapping):
            continue
        nodes += 1
        if depth > max_depth:
            max_depth = depth
        for key in _CHILD_KEYS.intersection(node):
            child = node[key]
            if key in _ONE_CHILD:
                stack.append((child, depth + 1))
            elif key in _CHILD_MAP:
                if type(child) is dict or isinstance(child, Mapping):
                    stack.extend((c, depth + 1) for c in child.values())
            elif isinstance(child, list):
                stack.extend((c, depth + 1) for c in child)
    return nodes, max_depth


class FeatureVector(NamedTuple):
    """The features of one turn (a named tuple, like :class:`TextSignals`, for speed).

    Attributes:
        raw: Raw value of each feature, by name (what :attr:`Score.features` reports).
        activations: Each feature squashed into [0, 1], in :data:`FEATURE_ORDER`.
        focus: Signals of the focus message (for explanations).
        context_carry: How much of the context counts (1.0 after a bare approval).
    """

    raw: dict[str, float]
    activations: tuple[float, ...]
    focus: TextSignals
    context_carry: float


def _carry(focus: TextSignals) -> float:
    # a bare "yes" / "go ahead" continues the conversation: it is as hard as what it approves
    if focus.approval or focus.words == 0:
        return 1.0
    if focus.gratitude:
        return 0.2
    if focus.words <= 12 and focus.anaphoric:
        return 0.7  # a short follow-up ("and for n = 5?") leans on what came before
    return 0.3


def extract(turn: Turn) -> FeatureVector:
    """Compute the feature vector of a turn. Pure; fast (see the module docstring).

    Args:
        turn: The turn.

    Returns:
        Raw values and activations of every feature in :data:`FEATURE_ORDER`.
    """
    messages = turn.messages
    fi = focus_index(turn)
    focus = text_signals(_clip(message_text(messages[fi]), FOCUS_SCAN_CHARS, 0.75))

    context = 0.0
    weight = 1.0
    seen = 0
    tool_results = 0
    dialogue = 0
    chars = 0
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        content = msg.get("content")
        text = content if type(content) is str else message_text(msg)
        chars += len(text)
        calls = msg.get("tool_calls")
        if calls:
            chars += _call_chars(calls)
        role = msg.get("role")
        if role == "tool" or role == "function":
            tool_results += 1
            continue
        if role == "system" or role == "developer":
            continue
        dialogue += 1
        if i == fi or seen >= CONTEXT_MESSAGES:
            continue
        if not text:
            continue
        seen += 1
        signals = text_signals(_clip(text, CONTEXT_SCAN_CHARS, 2 / 3))
        context = max(context, weight * signals.difficulty)
        weight *= CONTEXT_DECAY
    carry = _carry(focus)

    tokens = (chars + 3) // 4  # approx_tokens(turn), from the same pass over the messages
    n_tools = len(turn.tools or ())
    schema = schema_complexity(turn.response_format)
    step = turn.step or 0
    raw: dict[str, float] = {
        "prompt_tokens": float(tokens),
        "depth": float(dialogue),
        "tools": float(n_tools),
        "tool_results": float(tool_results),
        "response_schema": float(schema),
        "reasoning": focus.reasoning,
        "code": round(focus.code, 4),
        "math": round(focus.math, 4),
        "questions": float(focus.questions),
        "constraints": float(focus.constraints),
        "simple": float(focus.simple),
        "final": 1.0 if turn.final else 0.0,
        "step": float(step),
        "context": round(context, 4),
    }
    activations = (
        _TOKENS_SCALE(tokens),
        _DEPTH_SCALE(dialogue - 1),
        _TOOLS_SCALE(n_tools),
        _saturate(tool_results, 3.0),
        _SCHEMA_SCALE(schema),
        _saturate(focus.reasoning, 1.0),
        _saturate(focus.code, 3.0),
        _saturate(focus.math, 3.0),
        _saturate(focus.questions - 1, 4.0),
        _saturate(focus.constraints, 2.0),
        min(1.0, float(focus.simple)),
        raw["final"],
        _STEP_SCALE(step),
        context * carry,
    )
    return FeatureVector(raw=raw, activations=activations, focus=focus, context_carry=carry)
