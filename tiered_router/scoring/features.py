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
from collections.abc import Mapping
from typing import Any, NamedTuple

from tiered_router.scoring._text import (
    TextSignals,
    clip,
    normalised_words,
    saturate,
    text_signals,
)
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
    "request_chars",
    "schema_complexity",
    "sigmoid",
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

FOCUS_SCAN_CHARS = 3000
"""Characters of the focus message analysed (3/4 from its head, 1/4 from its tail)."""
CONTEXT_SCAN_CHARS = 500
"""Characters analysed of each context message (2/3 head, 1/3 tail)."""
CONTEXT_MESSAGES = 4
"""How many user/assistant messages besides the focus make up the context."""
CONTEXT_DECAY = 0.8
"""Weight of a context message relative to the next newer one."""

_SCHEMA_NODE_CAP = 256


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


def sigmoid(z: float) -> float:
    """Return the logistic ``1 / (1 + exp(-z))``, without overflow for large ``|z|``."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


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
    return (turn.prompt_chars + 3) // 4


_CONTEXT_ROLES = frozenset({"system", "developer"})


def request_chars(turn: Turn) -> int:
    """Characters of the request: :attr:`Turn.prompt_chars` without system/developer messages.

    An agent sends its system prompt (and its tool definitions, never counted) on every step
    of a task: that is context, not difficulty, and a scorer that read it as length would send
    every step of a loop with a long system prompt to the frontier.

    Args:
        turn: The turn.

    Returns:
        The number of characters of every other message's text and tool-call arguments.
    """
    context = sum(
        len(message_text(msg)) for msg in turn.messages if msg.get("role") in _CONTEXT_ROLES
    )
    return turn.prompt_chars - context


def focus_index(turn: Turn) -> int:
    """Index of the focus message: the last user message, else the last message."""
    messages = turn.messages
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages) - 1


def focus_text(turn: Turn) -> str:
    """Text of the focus message, clipped to :data:`FOCUS_SCAN_CHARS` (head and tail)."""
    return clip(message_text(turn.messages[focus_index(turn)]), FOCUS_SCAN_CHARS, 0.75)


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
    focus = text_signals(clip(message_text(messages[fi]), FOCUS_SCAN_CHARS, 0.75))

    context = 0.0
    weight = 1.0
    seen = 0
    tool_results = 0
    dialogue = 0
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        role = msg.get("role")
        if role == "tool" or role == "function":
            tool_results += 1
            continue
        if role == "system" or role == "developer":
            continue
        dialogue += 1
        if i == fi or seen >= CONTEXT_MESSAGES:
            continue
        content = msg.get("content")
        text = content if type(content) is str else message_text(msg)
        if not text:
            continue
        seen += 1
        signals = text_signals(clip(text, CONTEXT_SCAN_CHARS, 2 / 3))
        context = max(context, weight * signals.difficulty)
        weight *= CONTEXT_DECAY
    carry = _carry(focus)

    tokens = approx_tokens(turn)  # the turn counts its characters once, for rules too
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
        saturate(tool_results, 3.0),
        _SCHEMA_SCALE(schema),
        saturate(focus.reasoning, 1.0),
        saturate(focus.code, 3.0),
        saturate(focus.math, 3.0),
        saturate(focus.questions - 1, 4.0),
        saturate(focus.constraints, 2.0),
        min(1.0, float(focus.simple)),
        raw["final"],
        _STEP_SCALE(step),
        context * carry,
    )
    return FeatureVector(raw=raw, activations=activations, focus=focus, context_carry=carry)
