"""The heuristic scorer: explainable features combined by a logistic function.

``value = sigmoid(bias + sum(weight[f] * activation[f]))`` where each activation is a
saturating transform of a raw feature into [0, 1] (see :mod:`tiered_router.scoring.features`).
A weight is therefore "how far this feature at full strength moves the log-odds", which
keeps weights readable and lets a policy override them by name:

```yaml
scoring:
  type: heuristic
  threshold: 0.6
  weights: {tools: 0.2, math: 2.5, bias: -2.0}
```

Content dominates volume: a single strong reasoning marker ("prove", "derive", "step by
step") weighs more than 8,000 tokens of prompt or 20 tools, so a short hard question is
not mistaken for an easy one and a long easy one is not mistaken for a hard one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from tiered_router.scoring._base import Score
from tiered_router.scoring.features import FEATURE_ORDER, FeatureVector, extract, sigmoid
from tiered_router.turn import Turn

__all__ = ["DEFAULT_BIAS", "DEFAULT_WEIGHTS", "FEATURE_NAMES", "HeuristicScorer", "explain"]

FEATURE_NAMES: frozenset[str] = frozenset(FEATURE_ORDER)
"""Names of the heuristic features (and of the weights a policy may override)."""

DEFAULT_BIAS = -2.2
"""Log-odds of a turn with no signal at all (score about 0.10)."""

DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "prompt_tokens": 1.0,
        "depth": 0.4,
        "tools": 0.6,
        "tool_results": 0.4,
        "response_schema": 1.0,
        "reasoning": 4.0,
        "code": 1.6,
        "math": 2.2,
        "questions": 0.6,
        "constraints": 1.2,
        "simple": -1.0,
        "final": 1.5,
        "step": 0.3,
        "context": 3.5,
    }
)
"""Default weight of each feature: its log-odds push at full activation."""

_MIN_REASON_SHARE = 0.005


def _validated(
    weights: Mapping[str, float] | None, bias: float | None
) -> tuple[tuple[float, ...], float]:
    merged = dict(DEFAULT_WEIGHTS)
    new_bias = DEFAULT_BIAS
    for name, value in (weights or {}).items():
        if name != "bias" and name not in FEATURE_NAMES:
            known = ", ".join(sorted(FEATURE_NAMES | {"bias"}))
            raise ValueError(f"unknown heuristic weight {name!r}; known: {known}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"heuristic weight {name!r}: must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"heuristic weight {name!r}: must be finite, got {value!r}")
        if name == "bias":
            new_bias = float(value)
        else:
            merged[name] = float(value)
    if bias is not None:
        if not math.isfinite(bias):
            raise ValueError(f"heuristic bias: must be finite, got {bias!r}")
        new_bias = float(bias)
    return tuple(merged[name] for name in FEATURE_ORDER), new_bias


def explain(
    vector: FeatureVector,
    logits: Sequence[float],
    bias: float,
    *,
    max_reasons: int,
    extra: Sequence[tuple[str, float, str]] = (),
) -> Score:
    """Turn per-feature log-odds pushes into a :class:`Score` with shares and reasons.

    Each feature's share of the value is its log-odds push times the secant slope of the
    sigmoid between the bias and the total, so the shares add up exactly to
    ``value - sigmoid(bias)`` and keep the sign of their push.

    Args:
        vector: The features of the turn.
        logits: Each feature's log-odds push (``weight * activation``), in feature order.
        bias: The log-odds of a turn with no signal.
        max_reasons: How many feature reasons to keep.
        extra: Further pushes that are not named features, as ``(name, logit, reason)``
            (the learned scorer's hashed words).

    Returns:
        The score.
    """
    names = FEATURE_ORDER + tuple(name for name, _, _ in extra)
    pushes = tuple(logits) + tuple(logit for _, logit, _ in extra)
    push = math.fsum(pushes)
    value = sigmoid(bias + push)
    base = sigmoid(bias)
    # secant slope; tends to sigmoid'(bias) when the push is ~0
    slope = (value - base) / push if abs(push) > 1e-9 else base * (1.0 - base)
    contributions = dict(zip(names, [logit * slope for logit in pushes], strict=True))
    described = {name: reason for name, _, reason in extra}
    reasons = tuple(
        f"{described.get(name) or _describe(name, vector)} ({share:+.2f})"
        for name, share in sorted(contributions.items(), key=_by_magnitude)[:max_reasons]
        if abs(share) >= _MIN_REASON_SHARE
    )
    return Score(
        value=value,
        features=vector.raw,
        contributions=contributions,
        reasons=reasons,
    )


def _by_magnitude(item: tuple[str, float]) -> tuple[float, str]:
    return (-abs(item[1]), item[0])


def _describe(name: str, vector: FeatureVector) -> str:
    raw = vector.raw
    focus = vector.focus
    if name == "reasoning":
        shown = ", ".join(focus.markers) if focus.markers else "present"
        return f"reasoning/multi-step markers: {shown}"
    if name == "context":
        kind = "bare approval" if focus.approval else "follow-up"
        return f"{kind} in a conversation of difficulty {raw['context']:.2f}"
    if name == "prompt_tokens":
        return f"prompt ~{int(raw['prompt_tokens'])} tokens"
    if name == "depth":
        return f"conversation depth {int(raw['depth'])} messages"
    if name == "tools":
        return f"{int(raw['tools'])} tools declared"
    if name == "tool_results":
        return f"{int(raw['tool_results'])} tool results in context"
    if name == "response_schema":
        return f"output contract complexity {int(raw['response_schema'])}"
    if name == "questions":
        return f"{int(raw['questions'])} questions"
    if name == "constraints":
        return f"constraints {raw['constraints']:.1f} (must, exactly, at least, ...)"
    if name == "simple":
        return "simple-task markers (translate, summarize, greeting, ...)"
    if name == "code":
        # name what was counted: "json" in a sentence or a parenthesis is not code
        shown = "; ".join(focus.code_signs) if focus.code_signs else "code in earlier messages"
        return f"code signs: {shown} (code {raw['code']:.1f})"
    if name == "math":
        shown = "; ".join(focus.math_signs) if focus.math_signs else "math in earlier messages"
        return f"math signs: {shown} (math {raw['math']:.1f})"
    if name == "final":
        return "agent marked the turn final"
    if name == "step":
        return f"agent step {int(raw['step'])}"
    return f"{name} {raw.get(name, 0.0):g}"


class HeuristicScorer:
    """Explainable difficulty scorer: saturating features, logistic combination.

    Example:
        ```python
        scorer = HeuristicScorer(weights={"tools": 0.2})
        score = scorer.score(Turn([{"role": "user", "content": "Prove that ..."}]))
        score.value, score.reasons[0]
        ```

    Args:
        weights: Overrides of :data:`DEFAULT_WEIGHTS` by feature name; the key ``bias``
            overrides the bias too.
        bias: The log-odds of a turn with no signal (default :data:`DEFAULT_BIAS`);
            wins over ``weights["bias"]``.
        max_reasons: How many feature reasons a score carries, most important first.

    Raises:
        ValueError: On an unknown weight name (the message lists the known ones), or a
            weight that is not a finite number.
    """

    __slots__ = ("_bias", "_max_reasons", "_weights")

    def __init__(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        bias: float | None = None,
        max_reasons: int = 5,
    ) -> None:
        self._weights, self._bias = _validated(weights, bias)
        if max_reasons < 0:
            raise ValueError(f"max_reasons: must be >= 0, got {max_reasons}")
        self._max_reasons = max_reasons

    @property
    def weights(self) -> Mapping[str, float]:
        """The effective weight of every feature."""
        return MappingProxyType(dict(zip(FEATURE_ORDER, self._weights, strict=True)))

    @property
    def bias(self) -> float:
        """The effective bias."""
        return self._bias

    def score(self, turn: Turn) -> Score:
        """Score one turn: pure and deterministic.

        Args:
            turn: The turn.

        Returns:
            Value in (0, 1), raw features, signed contributions (they add up to
            ``value - sigmoid(bias)``) and reasons, most important first.
        """
        vector = extract(turn)
        logits = tuple(w * a for w, a in zip(self._weights, vector.activations, strict=True))
        return explain(vector, logits, self._bias, max_reasons=self._max_reasons)

    def __repr__(self) -> str:
        changed = {
            name: w
            for name, w in zip(FEATURE_ORDER, self._weights, strict=True)
            if w != DEFAULT_WEIGHTS[name]
        }
        return f"HeuristicScorer(weights={changed!r}, bias={self._bias!r})"
