"""Deciding a tier: rules first (first match wins), then the score threshold.

Example:
    ```python
    decision = decide(turn, scorer.score(turn), policy)
    decision.tier, decision.rule, decision.reasons
    ```

Pure and deterministic: the same turn, score and policy always give the same
:class:`Decision`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_router._types import Tier
from tiered_router.scoring._base import Score
from tiered_router.scoring.features import approx_tokens
from tiered_router.turn import Turn

if TYPE_CHECKING:
    from tiered_router.policy._schema import Policy, RuleCondition

__all__ = ["Decision", "approx_tokens", "decide", "describe_condition", "matches"]

_MISSING = object()
# RuleCondition's scalar fields, in the order the policy schema declares them
_CONDITION_KEYS = (
    "final",
    "min_tools",
    "min_prompt_tokens",
    "has_response_format",
    "has_tool_results",
    "step_at_least",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Where a turn goes, and why.

    Attributes:
        tier: ``fast`` or ``frontier``.
        backend: Name of the backend serving that tier.
        score: The scorer's value in [0, 1].
        threshold: The policy threshold the score was compared with.
        rule: Name of the rule that decided, or ``None`` when the threshold did.
        reasons: Human-readable reasons (rule first, then the scorer's).
        features: The scorer's raw feature values.
        contributions: Each feature's signed share of the score.
    """

    tier: Tier
    backend: str
    score: float
    threshold: float
    rule: str | None = None
    reasons: tuple[str, ...] = ()
    features: Mapping[str, float] = field(default_factory=dict)
    contributions: Mapping[str, float] = field(default_factory=dict)


def matches(condition: RuleCondition, turn: Turn, *, prompt_tokens: int) -> bool:
    """Whether a turn meets every condition a rule sets (an empty condition matches all).

    - ``final``: ``turn.final`` equals it.
    - ``min_tools``: at least this many tools declared.
    - ``min_prompt_tokens``: ``prompt_tokens`` (see :func:`approx_tokens`) is at least it.
    - ``has_response_format``: the turn has (``true``) / lacks (``false``) an output
      contract; ``{"type": "text"}`` counts as none.
    - ``has_tool_results``: the last message is (``true``) / is not (``false``) a tool result.
    - ``step_at_least``: the agent's step is given and at least it.
    - ``metadata``: every key is in ``turn.metadata`` with an equal value.

    Args:
        condition: The rule's ``when``.
        turn: The turn.
        prompt_tokens: The turn's approximate prompt tokens.

    Returns:
        True when every given condition holds.
    """
    if condition.final is not None and turn.final != condition.final:
        return False
    if condition.min_tools is not None and len(turn.tools or ()) < condition.min_tools:
        return False
    if condition.min_prompt_tokens is not None and prompt_tokens < condition.min_prompt_tokens:
        return False
    if (
        condition.has_response_format is not None
        and _has_response_format(turn) != condition.has_response_format
    ):
        return False
    if (
        condition.has_tool_results is not None
        and (turn.messages[-1].get("role") == "tool") != condition.has_tool_results
    ):
        return False
    if condition.step_at_least is not None and (
        turn.step is None or turn.step < condition.step_at_least
    ):
        return False
    if condition.metadata:
        meta = turn.metadata
        for key, value in condition.metadata.items():
            if meta.get(key, _MISSING) != value:
                return False
    return True


def _has_response_format(turn: Turn) -> bool:
    rf = turn.response_format
    return bool(rf) and rf is not None and rf.get("type") != "text"


def _needs_tokens(condition: RuleCondition) -> bool:
    return condition.min_prompt_tokens is not None


def describe_condition(condition: RuleCondition) -> str:
    """Render a rule's conditions as ``key=value`` pairs (``final=true, min_tools=6``).

    Args:
        condition: The rule's ``when``.

    Returns:
        The description; ``always`` for an empty condition.
    """
    parts: list[str] = []
    for key in _CONDITION_KEYS:
        value = getattr(condition, key, None)
        if value is not None:
            parts.append(f"{key}={_literal(value)}")
    metadata = getattr(condition, "metadata", None)
    if metadata:
        parts.extend(f"metadata.{k}={_literal(v)}" for k, v in metadata.items())
    return ", ".join(parts) or "always"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):  # a value json cannot render (cyclic): show its repr
        return repr(value)


def decide(turn: Turn, score: Score, policy: Policy) -> Decision:
    """Pick the tier of a turn: the first matching rule, else ``score > threshold``.

    A score equal to the threshold stays on the fast tier.

    Args:
        turn: The turn.
        score: Its score (from the policy's scorer).
        policy: The routing policy.

    Returns:
        The decision; its reasons start with the rule (``rule final-answer: final=true``)
        when one decided, then the threshold comparison, then the scorer's reasons.
    """
    threshold = policy.scoring.threshold
    value = score.value
    above = value > threshold
    # two decimals, unless that would print a score just above the threshold as equal to it
    digits = 2 if f"{value:.2f}" != f"{threshold:.2f}" else 4
    op = ">" if above else "<="
    comparison = f"score {value:.{digits}f} {op} threshold {threshold:.{digits}f}"
    tier: Tier = "frontier" if above else "fast"
    rule_name: str | None = None
    head: tuple[str, ...] = (comparison,)
    if policy.rules:
        tokens = approx_tokens(turn) if any(_needs_tokens(r.when) for r in policy.rules) else 0
        for rule in policy.rules:
            if matches(rule.when, turn, prompt_tokens=tokens):
                tier = rule.tier
                rule_name = rule.name
                head = (f"rule {rule.name}: {describe_condition(rule.when)}", comparison)
                break
    return Decision(
        tier=tier,
        backend=policy.backend_for(tier),
        score=value,
        threshold=threshold,
        rule=rule_name,
        reasons=head + tuple(score.reasons),
        features=score.features,
        contributions=score.contributions,
    )
