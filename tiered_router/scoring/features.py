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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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

# bytes-level normalisation: ASCII letters lowered, ASCII punctuation and whitespace -> space,
# other bytes (UTF-8 of non-ASCII text) unchanged. bytes.translate runs in C, which is what
# keeps a 4 KB message under ~30 microseconds.
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\t\n\r\x0b\x0c"
_NORMALISE = bytes(
    32 if i in _PUNCT else (i + 32 if 65 <= i <= 90 else i) for i in range(256)
)
# digits -> "0", everything else -> space: len(split()) is then the number of digit runs
_DIGIT_RUNS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_MATH_OPERATION = re.compile(rb"\d\s*[-+*/^=<>\xc3\x97]\s*[\d(]")


def _words(*items: str) -> frozenset[bytes]:
    return frozenset(w.encode() for item in items for w in item.split())


def _phrases(*items: str) -> tuple[bytes, ...]:
    # padded with spaces so a phrase matches whole words of the normalised text
    return tuple(f" {p} ".encode() for p in items)


_REASONING_STRONG = _words(
    "prove proof proofs derive derivation optimize optimise optimization optimal rigorous",
    "rigorously theorem lemma induction contradiction counterexample formally justify",
    "architect architecture debug refactor algorithm complexity tradeoff tradeoffs",
    "bottleneck invariant invariants asymptotic",
)
_REASONING_STRONG_PHRASES = _phrases(
    "step by step", "trade off", "trade offs", "root cause", "design a", "think carefully",
    "edge cases", "multi step", "show that", "show your work", "from first principles",
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
    "at least", "at most", "no more than", "no less than", "do not", "don t", "should not",
    "must not", "make sure", "no longer than",
)
_SIMPLE = _words(
    "translate translation summarize summarise summary rephrase rewrite paraphrase spell",
    "spelling hi hello hey thanks greet greeting synonym synonyms define definition tl dr",
    "capitalize lowercase uppercase",
)
_SIMPLE_PHRASES = _phrases("capital of", "what time", "fix the typo", "what is the date")
_CODE = _words(
    "def class return import function const let var lambda async await struct impl fn",
    "public static void int null none python javascript typescript java rust golang",
    "bash sql select regex json yaml html css compile compiler exception traceback",
    "stacktrace bug implement unittest pytest endpoint script program code snippet",
    "runtime segfault recursion recursive array dict list integer string boolean",
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
    "how many", "how much", "how long", "how far", "how old", "what percent", "in total",
    "times as", "more than", "less than", "per day", "per hour", "each week",
)
_LATEX = (b"\\frac", b"\\sqrt", b"\\sum", b"\\int", b"\\cdot", b"\\le", b"\\ge", b"$$", b"\\(")
_APPROVAL = _words(
    "yes yeah yep yup ok okay k y sure go ahead do it continue proceed please sounds good",
    "great lgtm fine approved approve confirm confirmed right correct that works next on",
    "carry keep going agreed agree perfect alright all looks let s that s",
)
_GRATITUDE = _words("thanks thank you thx ty cheers bye goodbye")
_CODE_SYMBOLS = (b"{", b";", b"()", b"==", b"=>", b"->", b"::", b"</", b"!=")


@dataclass(frozen=True, slots=True)
class TextSignals:
    """Content signals of one text (raw, unweighted).

    Attributes:
        reasoning: Reasoning / multi-step markers (strong count 1, weak 0.5; distinct).
        code: Code density score (fences, code-like symbols per word, code vocabulary).
        math: Math density score (numbers, operations, LaTeX, math terms, word problems).
        questions: Number of question marks.
        constraints: Distinct constraint markers ("must", "exactly", "at least", ...).
        simple: Distinct simple-task markers ("translate", "summarize", "hello", ...).
        words: Number of words.
        approval: The text is a bare approval ("yes", "ok", "go ahead", ...).
        gratitude: The text is only thanks or goodbye.
        markers: Up to four matched reasoning / constraint markers, for explanations.
    """

    reasoning: float
    code: float
    math: float
    questions: int
    constraints: int
    simple: int
    words: int
    approval: bool
    gratitude: bool
    markers: tuple[str, ...]

    @property
    def difficulty(self) -> float:
        """Weight-free difficulty in [0, 1], used to carry context into later turns."""
        rest = (
            (1.0 - _saturate(self.reasoning, 1.0))
            * (1.0 - _saturate(self.code, 3.0))
            * (1.0 - _saturate(self.math, 3.0))
            * (1.0 - 0.5 * _saturate(self.constraints, 2.0))
        )
        return 1.0 - rest


def _saturate(x: float, scale: float) -> float:
    """Map ``x >= 0`` to [0, 1): ``1 - exp(-x / scale)``."""
    return 1.0 - math.exp(-x / scale) if x > 0 else 0.0


def _log_saturate(x: float, full: float, unit: float = 1.0) -> float:
    """Map ``x >= 0`` to [0, 1] on a log scale, reaching 1 at ``x == full``."""
    if x <= 0:
        return 0.0
    return min(1.0, math.log1p(x / unit) / math.log1p(full / unit))


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
    padded = b" " + b" ".join(words) + b" "

    strong = vocab & _REASONING_STRONG
    weak = vocab & _REASONING_WEAK
    strong_phrases = [p for p in _REASONING_STRONG_PHRASES if p in padded]
    weak_phrases = [p for p in _REASONING_WEAK_PHRASES if p in padded]
    reasoning = len(strong) + len(strong_phrases) + 0.5 * (len(weak) + len(weak_phrases))

    constraint_words = vocab & _CONSTRAINTS
    constraints = len(constraint_words) + sum(1 for p in _CONSTRAINT_PHRASES if p in padded)
    simple = len(vocab & _SIMPLE) + sum(1 for p in _SIMPLE_PHRASES if p in padded)

    n_words = len(words)
    fences = raw.count(b"```") // 2 + (1 if raw.count(b"```") % 2 else 0)
    symbols = sum(raw.count(s) for s in _CODE_SYMBOLS)
    code = (
        3.0 * min(fences, 2)
        + 0.7 * len(vocab & _CODE)
        + min(4.0, 10.0 * symbols / max(n_words, 10))
    )

    numbers = len(raw.translate(_DIGIT_RUNS).split())
    operations = len(_MATH_OPERATION.findall(raw)) if numbers >= 2 else 0
    latex = sum(1 for s in _LATEX if s in raw)
    word_problem = numbers >= 2 and any(p in padded for p in _WORD_PROBLEM_PHRASES)
    math_ = (
        len(vocab & _MATH_TERMS)
        + 1.5 * latex
        + 0.7 * min(operations, 6)
        + (1.0 if word_problem else 0.0)
        + 0.25 * min(numbers, 12)
    )

    approval = 0 < n_words <= 6 and vocab <= _APPROVAL
    gratitude = 0 < n_words <= 6 and not approval and vocab <= (_GRATITUDE | _APPROVAL)
    markers = sorted(w.decode() for w in strong) + sorted(p.decode().strip() for p in strong_phrases)
    markers += sorted(w.decode() for w in weak) + sorted(w.decode() for w in constraint_words)
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
        markers=tuple(markers[:4]),
    )


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
        content = msg.get("content")
        chars += len(content) if isinstance(content, str) else len(message_text(msg))
        calls = msg.get("tool_calls")
        if calls:
            for call in calls:
                fn = call.get("function") if isinstance(call, Mapping) else None
                args = fn.get("arguments") if isinstance(fn, Mapping) else None
                if isinstance(args, str):
                    chars += len(args)
    return chars


def focus_index(turn: Turn) -> int:
    """Index of the focus message: the last user message, else the last message."""
    messages = turn.messages
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages) - 1


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


def _walk_schema(schema: Mapping[str, Any]) -> tuple[int, int]:
    nodes = 0
    max_depth = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack and nodes < _SCHEMA_NODE_CAP:
        node, depth = stack.pop()
        if not isinstance(node, Mapping):
            continue
        nodes += 1
        max_depth = max(max_depth, depth)
        for key in ("properties", "$defs", "definitions", "patternProperties"):
            children = node.get(key)
            if isinstance(children, Mapping):
                stack.extend((c, depth + 1) for c in children.values())
        for key in ("items", "additionalProperties", "not", "if", "then", "else"):
            child = node.get(key)
            if isinstance(child, Mapping):
                stack.append((child, depth + 1))
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            children = node.get(key)
            if isinstance(children, list):
                stack.extend((c, depth + 1) for c in children)
    return nodes, max_depth


@dataclass(frozen=True, slots=True)
class FeatureVector:
    """The features of one turn.

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
        return 0.3
    return 0.8 if focus.words <= 12 else 0.4


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
    for i in range(len(messages) - 1, -1, -1):
        role = messages[i].get("role")
        if role == "tool" or role == "function":
            tool_results += 1
            continue
        if role == "system" or role == "developer":
            continue
        dialogue += 1
        if i == fi or seen >= CONTEXT_MESSAGES:
            continue
        text = message_text(messages[i])
        if not text:
            continue
        seen += 1
        signals = text_signals(_clip(text, CONTEXT_SCAN_CHARS, 2 / 3))
        context = max(context, weight * signals.difficulty)
        weight *= CONTEXT_DECAY
    carry = _carry(focus)

    tokens = approx_tokens(turn)
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
        _log_saturate(tokens, 8000.0, 64.0),
        _log_saturate(dialogue - 1, 40.0),
        _log_saturate(n_tools, 20.0),
        _saturate(tool_results, 3.0),
        _log_saturate(schema, 60.0),
        _saturate(focus.reasoning, 1.0),
        _saturate(focus.code, 3.0),
        _saturate(focus.math, 3.0),
        min(1.0, max(0, focus.questions - 1) / 3.0),
        _saturate(focus.constraints, 2.0),
        min(1.0, float(focus.simple)),
        raw["final"],
        _log_saturate(step, 30.0),
        context * carry,
    )
    return FeatureVector(raw=raw, activations=activations, focus=focus, context_carry=carry)
