from __future__ import annotations

from typing import Any

import pytest

from tiered_router.policy import Policy, RuleCondition
from tiered_router.routing import Decision, decide, describe_condition, matches
from tiered_router.scoring import HeuristicScorer, Score, approx_tokens
from tiered_router.turn import Turn

LOW = Score(
    value=0.2,
    features={"reasoning": 0.0},
    contributions={"reasoning": 0.0},
    reasons=("prompt ~3 tokens (+0.01)",),
)
HIGH = Score(value=0.9, reasons=("reasoning/multi-step markers: prove (+0.50)",))


def make_policy(rules: list[dict[str, Any]] | None = None, threshold: float = 0.6) -> Policy:
    return Policy.model_validate(
        {
            "backends": {"mercury": {"model": "mercury-2"}, "big": {"model": "gpt-5.2"}},
            "tiers": {"fast": "mercury", "frontier": "big"},
            "scoring": {"threshold": threshold},
            "rules": rules or [],
        }
    )


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def tools(n: int) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": f"t{i}"}} for i in range(n)]


def cond(**when: Any) -> RuleCondition:
    return RuleCondition.model_validate(when)


# -- threshold -----------------------------------------------------------------------------


def test_threshold_routes_by_score() -> None:
    policy = make_policy()
    fast = decide(Turn([user()]), LOW, policy)
    frontier = decide(Turn([user()]), HIGH, policy)
    assert (fast.tier, fast.backend, fast.rule) == ("fast", "mercury", None)
    assert (frontier.tier, frontier.backend, frontier.rule) == ("frontier", "big", None)
    assert fast.reasons == ("score 0.20 <= threshold 0.60", "prompt ~3 tokens (+0.01)")
    assert frontier.reasons[0] == "score 0.90 > threshold 0.60"
    assert fast.threshold == 0.6 and fast.score == 0.2


def test_score_equal_to_threshold_stays_fast() -> None:
    policy = make_policy(threshold=0.6)
    at = decide(Turn([user()]), Score(value=0.6), policy)
    above = decide(Turn([user()]), Score(value=0.6000001), policy)
    assert at.tier == "fast"
    assert above.tier == "frontier"
    # printed with enough digits to show why it went up
    assert above.reasons[0] == "score 0.6000 > threshold 0.6000"


def test_decision_carries_features_and_contributions() -> None:
    d = decide(Turn([user()]), LOW, make_policy())
    assert d.features == LOW.features
    assert d.contributions == LOW.contributions


# -- rules ---------------------------------------------------------------------------------


def test_first_matching_rule_wins() -> None:
    policy = make_policy(
        [
            {"name": "tools-fast", "when": {"min_tools": 2}, "tier": "fast"},
            {"name": "final-answer", "when": {"final": True}, "tier": "frontier"},
            {"name": "catch-all", "when": {}, "tier": "frontier"},
        ]
    )
    both = Turn([user()], tools=tools(3), final=True)
    only_final = Turn([user()], final=True)
    neither = Turn([user()])
    assert decide(both, HIGH, policy).rule == "tools-fast"
    assert decide(both, HIGH, policy).tier == "fast"
    assert decide(only_final, LOW, policy).rule == "final-answer"
    assert decide(neither, LOW, policy).rule == "catch-all"
    assert decide(neither, LOW, policy).tier == "frontier"


def test_rule_reasons_come_first() -> None:
    policy = make_policy([{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}])
    d = decide(Turn([user()], final=True), LOW, policy)
    assert d.tier == "frontier" and d.backend == "big"
    assert d.reasons == (
        "rule final-answer: final=true",
        "score 0.20 <= threshold 0.60",
        "prompt ~3 tokens (+0.01)",
    )


def test_rule_can_send_a_hard_turn_to_the_fast_tier() -> None:
    policy = make_policy(
        [{"name": "cheap", "when": {"metadata": {"tier": "cheap"}}, "tier": "fast"}]
    )
    d = decide(Turn([user()], metadata={"tier": "cheap"}), HIGH, policy)
    assert (d.tier, d.backend, d.rule) == ("fast", "mercury", "cheap")


def test_no_rule_matches_falls_back_to_threshold() -> None:
    policy = make_policy([{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}])
    d = decide(Turn([user()]), LOW, policy)
    assert d.rule is None and d.tier == "fast"


def test_empty_condition_matches_everything() -> None:
    assert matches(cond(), Turn([user()]), prompt_tokens=0)
    assert matches(cond(), Turn([user()], final=True, tools=tools(9)), prompt_tokens=10**6)


def test_condition_final() -> None:
    assert matches(cond(final=True), Turn([user()], final=True), prompt_tokens=0)
    assert not matches(cond(final=True), Turn([user()]), prompt_tokens=0)
    assert matches(cond(final=False), Turn([user()]), prompt_tokens=0)


def test_condition_min_tools() -> None:
    assert matches(cond(min_tools=3), Turn([user()], tools=tools(3)), prompt_tokens=0)
    assert not matches(cond(min_tools=3), Turn([user()], tools=tools(2)), prompt_tokens=0)
    assert not matches(cond(min_tools=1), Turn([user()]), prompt_tokens=0)


def test_condition_min_prompt_tokens() -> None:
    t = Turn([user("x" * 400)])
    assert matches(cond(min_prompt_tokens=100), t, prompt_tokens=100)
    assert not matches(cond(min_prompt_tokens=101), t, prompt_tokens=100)


def test_decide_counts_prompt_tokens_for_rules() -> None:
    policy = make_policy([{"name": "long", "when": {"min_prompt_tokens": 100}, "tier": "frontier"}])
    assert approx_tokens(Turn([user("x" * 400)])) == 100
    assert decide(Turn([user("x" * 400)]), LOW, policy).rule == "long"
    assert decide(Turn([user("x" * 396)]), LOW, policy).rule is None


def test_condition_has_response_format() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    with_rf = Turn([user()], response_format=schema)
    text_rf = Turn([user()], response_format={"type": "text"})
    plain = Turn([user()])
    assert matches(cond(has_response_format=True), with_rf, prompt_tokens=0)
    assert not matches(cond(has_response_format=True), plain, prompt_tokens=0)
    assert not matches(cond(has_response_format=True), text_rf, prompt_tokens=0)
    assert matches(cond(has_response_format=False), plain, prompt_tokens=0)
    assert not matches(cond(has_response_format=False), with_rf, prompt_tokens=0)


def test_condition_has_tool_results() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "t0", "arguments": "{}"}}
        ],
    }
    after_tool = Turn([user(), call, {"role": "tool", "tool_call_id": "1", "content": "{}"}])
    answered = Turn([user(), call, {"role": "tool", "tool_call_id": "1", "content": "{}"}, user()])
    assert matches(cond(has_tool_results=True), after_tool, prompt_tokens=0)
    assert not matches(cond(has_tool_results=True), answered, prompt_tokens=0)
    assert matches(cond(has_tool_results=False), answered, prompt_tokens=0)


def test_condition_step_at_least() -> None:
    assert matches(cond(step_at_least=3), Turn([user()], step=3), prompt_tokens=0)
    assert not matches(cond(step_at_least=3), Turn([user()], step=2), prompt_tokens=0)
    assert not matches(cond(step_at_least=0), Turn([user()]), prompt_tokens=0)


def test_condition_metadata_needs_every_key_equal() -> None:
    c = cond(metadata={"team": "billing", "priority": 1})
    assert matches(
        c, Turn([user()], metadata={"team": "billing", "priority": 1, "x": 2}), prompt_tokens=0
    )
    assert not matches(c, Turn([user()], metadata={"team": "billing"}), prompt_tokens=0)
    assert not matches(
        c, Turn([user()], metadata={"team": "billing", "priority": 2}), prompt_tokens=0
    )
    assert not matches(cond(metadata={"x": None}), Turn([user()]), prompt_tokens=0)
    assert matches(
        cond(metadata={"x": None}), Turn([user()], metadata={"x": None}), prompt_tokens=0
    )


def test_all_conditions_must_hold() -> None:
    c = cond(final=True, min_tools=2)
    assert matches(c, Turn([user()], final=True, tools=tools(2)), prompt_tokens=0)
    assert not matches(c, Turn([user()], final=True), prompt_tokens=0)
    assert not matches(c, Turn([user()], tools=tools(2)), prompt_tokens=0)


@pytest.mark.parametrize(
    ("when", "text"),
    [
        ({}, "always"),
        ({"final": True}, "final=true"),
        ({"min_tools": 6, "has_tool_results": False}, "min_tools=6, has_tool_results=false"),
        ({"metadata": {"team": "billing", "n": 1}}, "metadata.team=billing, metadata.n=1"),
    ],
)
def test_describe_condition(when: dict[str, Any], text: str) -> None:
    assert describe_condition(cond(**when)) == text


# -- determinism ---------------------------------------------------------------------------


def test_same_turn_same_decision() -> None:
    policy = make_policy(
        [
            {"name": "many-tools", "when": {"min_tools": 6}, "tier": "frontier"},
            {"name": "long", "when": {"min_prompt_tokens": 5000}, "tier": "frontier"},
        ]
    )
    scorer = HeuristicScorer()
    t = Turn(
        [user("Compare the two designs and explain the trade-offs."), user("ok")],
        tools=tools(4),
        step=3,
    )
    first = decide(t, scorer.score(t), policy)
    second = decide(t, HeuristicScorer().score(t), policy)
    assert isinstance(first, Decision)
    assert first == second
