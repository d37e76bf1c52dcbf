from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tiered_router.policy import ScoringConfig
from tiered_router.scoring import (
    DEFAULT_WEIGHTS,
    FEATURE_NAMES,
    HeuristicScorer,
    LearnedScorer,
    LearnedWeights,
    Score,
    Scorer,
    approx_tokens,
    build_scorer,
    fit,
)
from tiered_router.scoring.features import (
    FOCUS_SCAN_CHARS,
    extract,
    schema_complexity,
    text_signals,
)
from tiered_router.scoring.heuristic import DEFAULT_BIAS
from tiered_router.turn import Turn

HARD_CONVERSATION = [
    {
        "role": "user",
        "content": "Derive a closed form for the Fibonacci numbers step by step, then prove "
        "it by induction.",
    },
    {
        "role": "assistant",
        "content": "The characteristic equation is x^2 = x + 1 with roots phi = (1 + sqrt(5))/2 "
        "and psi = (1 - sqrt(5))/2, so F(n) = (phi^n - psi^n)/sqrt(5). By induction on n: "
        "the base cases n = 0 and n = 1 hold; assume it holds for n and n - 1 ... Shall I also "
        "prove the identity F(2n) = F(n)(2F(n+1) - F(n))?",
    },
]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def turn(*texts: str, **kwargs: Any) -> Turn:
    return Turn([user(t) for t in texts], **kwargs)


def tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "Look up an order.",
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
            },
        }
        for i in range(n)
    ]


def nested_schema() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "report",
            "schema": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string"},
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "scores": {"type": "array", "items": {"type": "number"}},
                                "owner": {
                                    "type": "object",
                                    "properties": {"id": {"type": "string"}},
                                },
                            },
                        },
                    },
                },
            },
        },
    }


SCORER = HeuristicScorer()


def score(t: Turn, scorer: Scorer = SCORER) -> Score:
    return scorer.score(t)


# -- the score's shape ---------------------------------------------------------------------


def test_feature_names_match_default_weights_and_score_keys() -> None:
    s = score(turn("What is the capital of France?"))
    assert set(DEFAULT_WEIGHTS) == FEATURE_NAMES
    assert set(s.features) == FEATURE_NAMES
    assert set(s.contributions) == FEATURE_NAMES


def test_value_is_a_probability_and_contributions_add_up() -> None:
    base = 1 / (1 + math.exp(-DEFAULT_BIAS))
    for t in (
        turn("hi"),
        turn("Prove that sqrt(2) is irrational, step by step, without using calculus."),
        Turn([*HARD_CONVERSATION, user("yes")], tools=tools(6), response_format=nested_schema()),
    ):
        s = score(t)
        assert 0.0 < s.value < 1.0
        assert sum(s.contributions.values()) == pytest.approx(s.value - base, abs=1e-9)


def test_reasons_come_most_important_first() -> None:
    s = score(
        turn(
            "Prove that the algorithm is optimal; compare it with a greedy one. It must "
            "run in exactly O(n log n)."
        ),
    )
    assert s.reasons
    assert s.reasons[0].startswith("reasoning/multi-step markers: ")
    ranked = sorted(s.contributions.values(), key=abs, reverse=True)
    # each reason ends with its signed share: they are in decreasing magnitude
    shares = [float(r.rsplit("(", 1)[1].rstrip(")")) for r in s.reasons]
    assert shares == sorted(shares, key=abs, reverse=True)
    assert abs(shares[0]) == pytest.approx(abs(ranked[0]), abs=0.005)


def test_negative_contributions_are_signed() -> None:
    s = score(turn("Translate 'good morning' into Spanish."))
    assert s.contributions["simple"] < 0
    assert any(r.startswith("simple-task markers") and "(-" in r for r in s.reasons)


# -- each feature moves the score the right way ----------------------------------------------

NEUTRAL = "Tell me about the history of the town library."


def _conversation(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(n):
        messages.append(user(f"Note number {i}: the library opens at nine."))
        messages.append({"role": "assistant", "content": "Noted."})
    return messages


TOOL_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "tool_0", "arguments": "{}"}}
    ],
}

DIRECTIONS: list[tuple[str, Turn, Turn]] = [
    ("prompt_tokens", turn(NEUTRAL), turn(NEUTRAL + " The town is old." * 300)),
    ("depth", Turn([user(NEUTRAL)]), Turn([*_conversation(12), user(NEUTRAL)])),
    ("tools", turn(NEUTRAL), turn(NEUTRAL, tools=tools(5))),
    (
        "tool_results",
        Turn([user(NEUTRAL), {**TOOL_CALL, "content": "Calling."}]),
        Turn([user(NEUTRAL), TOOL_CALL, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]),
    ),
    ("response_schema", turn(NEUTRAL), turn(NEUTRAL, response_format=nested_schema())),
    ("reasoning", turn(NEUTRAL), turn(NEUTRAL + " Derive the trade-offs step by step.")),
    ("code", turn(NEUTRAL), turn(NEUTRAL + "\n```python\ndef f(x):\n    return {x: [x]}\n```")),
    ("math", turn(NEUTRAL), turn(NEUTRAL + " If 3x + 5 = 20 and y = 2x^2, solve for y.")),
    ("questions", turn(NEUTRAL + "?"), turn(NEUTRAL + "? Who built it? When? Why there?")),
    ("constraints", turn(NEUTRAL), turn(NEUTRAL + " You must use exactly three sources.")),
    ("final", turn(NEUTRAL), turn(NEUTRAL, final=True)),
    ("step", turn(NEUTRAL, step=0), turn(NEUTRAL, step=25)),
    ("context", Turn([user("ok")]), Turn([*HARD_CONVERSATION, user("ok")])),
]


@pytest.mark.parametrize(("feature", "before", "after"), DIRECTIONS, ids=[d[0] for d in DIRECTIONS])
def test_feature_raises_the_score(feature: str, before: Turn, after: Turn) -> None:
    low, high = score(before), score(after)
    assert high.features[feature] > low.features[feature]
    assert high.contributions[feature] > low.contributions[feature]
    assert high.value > low.value


def test_simple_task_markers_lower_the_score() -> None:
    plain = score(turn("Put this sentence in Spanish: the library opens at nine."))
    simple = score(turn("Translate this sentence into Spanish: the library opens at nine."))
    assert simple.contributions["simple"] < 0
    assert simple.value < plain.value


def test_schema_complexity_grows_with_the_contract() -> None:
    assert schema_complexity(None) == 0
    assert schema_complexity({"type": "text"}) == 0
    assert schema_complexity({"type": "json_object"}) == 1
    flat = {
        "type": "json_schema",
        "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
    }
    assert 1 < schema_complexity(flat) < schema_complexity(nested_schema())


def test_approx_tokens_counts_text_and_tool_arguments() -> None:
    t = Turn(
        [
            user("x" * 10),
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "f", "arguments": "y" * 6}}
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "z" * 4}]},
        ]
    )
    assert approx_tokens(t) == 5  # (10 + 6 + 4) / 4
    assert score(t).features["prompt_tokens"] == 5


def test_long_messages_are_clipped_but_keep_head_and_tail() -> None:
    filler = "The library opens at nine. " * 1000
    assert len(filler) > 4 * FOCUS_SCAN_CHARS
    head = score(turn("Prove the following. " + filler))
    tail = score(turn(filler + " Now prove it."))
    middle = score(turn(filler[: len(filler) // 2] + " prove it " + filler[len(filler) // 2 :]))
    assert head.features["reasoning"] >= 1
    assert tail.features["reasoning"] >= 1
    assert middle.features["reasoning"] == 0


# -- traps ---------------------------------------------------------------------------------


def test_trap_a_short_hard_prompt_is_not_easy() -> None:
    hard = score(turn("Prove that there are infinitely many primes."))
    long_easy = score(turn("Summarize this for a newsletter. " + "The town fair was fun. " * 200))
    assert hard.value > 0.6
    assert hard.value > long_easy.value
    assert hard.contributions["reasoning"] > hard.contributions["prompt_tokens"]


@pytest.mark.parametrize("approval", ["yes", "ok", "go ahead", "Yes, please do it."])
def test_trap_b_bare_approval_inherits_the_conversation(approval: str) -> None:
    alone = score(turn(approval))
    late = score(Turn([*HARD_CONVERSATION, user(approval)]))
    assert alone.value < 0.2
    assert late.value > 0.5
    assert late.contributions["context"] > 0.2
    assert any("conversation of difficulty" in r for r in late.reasons)


def test_trap_b_context_decays_and_thanks_does_not_inherit() -> None:
    near = score(Turn([*HARD_CONVERSATION, user("yes")]))
    easy_between = [
        user("Also, what is the capital of France?"),
        {"role": "assistant", "content": "Paris."},
        user("And of Italy?"),
        {"role": "assistant", "content": "Rome."},
    ]
    far = score(Turn([*HARD_CONVERSATION, *easy_between, user("yes")]))
    thanks = score(Turn([*HARD_CONVERSATION, user("thanks!")]))
    assert far.features["context"] < near.features["context"]
    assert thanks.value < 0.3 < near.value


def test_trap_c_tools_alone_do_not_reach_the_frontier() -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        user("What's the weather in Paris today?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "tool_0", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 18, "sky": "cloudy"}'},
    ]
    eight = score(Turn(messages, tools=tools(8), step=2))
    hundred = score(Turn(messages, tools=tools(100), step=2))
    assert eight.value < 0.5
    assert hundred.value < 0.5
    # saturating: 92 more tools add less than the first 8
    assert (
        hundred.contributions["tools"] - eight.contributions["tools"] < eight.contributions["tools"]
    )


# -- weights -------------------------------------------------------------------------------


def test_weight_overrides_change_the_score() -> None:
    t = turn(NEUTRAL, tools=tools(8))
    default = score(t)
    off = score(t, HeuristicScorer(weights={"tools": 0.0}))
    heavy = score(t, HeuristicScorer(weights={"tools": 5.0}))
    assert off.contributions["tools"] == 0
    assert off.value < default.value < heavy.value


def test_bias_override() -> None:
    t = turn("hi")
    assert score(t, HeuristicScorer(bias=0.0)).value > score(t).value
    assert HeuristicScorer(weights={"bias": -1.0}).bias == -1.0
    assert HeuristicScorer(weights={"bias": -1.0}, bias=-3.0).bias == -3.0


def test_unknown_weight_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown heuristic weight 'tool'") as info:
        HeuristicScorer(weights={"tool": 1.0})
    for name in FEATURE_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, "1", True])
def test_weight_must_be_a_finite_number(value: Any) -> None:
    with pytest.raises(ValueError, match="reasoning"):
        HeuristicScorer(weights={"reasoning": value})


def test_build_scorer_heuristic_uses_config_weights() -> None:
    scorer = build_scorer(
        ScoringConfig(type="heuristic", weights={"reasoning": 0.0}, options={"max_reasons": 1})
    )
    assert isinstance(scorer, HeuristicScorer)
    s = scorer.score(turn("Prove that there are infinitely many primes."))
    assert s.contributions["reasoning"] == 0
    assert len(s.reasons) == 1
    assert s.value < score(turn("Prove that there are infinitely many primes.")).value


def test_build_scorer_rejects_unknown_options() -> None:
    with pytest.raises(ValueError, match=r"scoring\.options: unknown option\(s\) \['paht'\]"):
        build_scorer(ScoringConfig(options={"paht": "x"}))
    with pytest.raises(ValueError, match=r"scoring\.options\.max_reasons"):
        build_scorer(ScoringConfig(options={"max_reasons": -1}))


# -- determinism ---------------------------------------------------------------------------


def test_same_turn_same_score() -> None:
    t = Turn([*HARD_CONVERSATION, user("ok")], tools=tools(5), response_format=nested_schema())
    first = HeuristicScorer().score(t)
    text_signals.cache_clear()
    second = HeuristicScorer().score(t)
    assert first == second


def test_score_does_not_depend_on_the_hash_seed() -> None:
    script = (
        "from tiered_router.scoring import HeuristicScorer\n"
        "from tiered_router.turn import Turn\n"
        "t = Turn([{'role': 'user', 'content': 'Prove, derive and compare: why must it be "
        "optimal? Explain step by step.'}])\n"
        "print(repr(HeuristicScorer().score(t)))\n"
        "from tiered_router.scoring import LearnedScorer, LearnedWeights\n"
        "w = LearnedWeights(bias=-1.0, weights={'reasoning': 2.0}, hash_buckets=16,\n"
        "                   hash_weights=tuple(i / 7 - 1 for i in range(16)))\n"
        "print(repr(LearnedScorer(w).score(t)))\n"
    )
    root = Path(__file__).resolve().parents[1]
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(out.stdout)
    assert len(outputs) == 1


# -- learned scorer ------------------------------------------------------------------------

HARD = [
    "Prove that the square root of 2 is irrational.",
    "Derive the gradient of the softmax cross-entropy loss step by step.",
    "Design a rate limiter for a distributed API and analyze the trade-offs.",
    "Prove by induction that 1 + 2 + ... + n = n(n+1)/2.",
    "Optimize this algorithm: it must run in O(n log n) without extra memory.",
    "Compare two consensus protocols and justify which is optimal for our workload.",
]
EASY = [
    "hi",
    "Translate 'thank you' into French.",
    "What is the capital of Spain?",
    "Summarize: the meeting moved to Tuesday.",
    "hello there",
    "Rephrase: we are closed on Sunday.",
]


def _train(hash_buckets: int = 0) -> LearnedWeights:
    turns = [turn(t) for t in HARD + EASY]
    labels = [1.0] * len(HARD) + [0.0] * len(EASY)
    return fit(turns, labels, epochs=400, learning_rate=1.0, l2=1e-4, hash_buckets=hash_buckets)


@pytest.mark.parametrize("buckets", [0, 64])
def test_learned_scorer_separates_its_training_set(buckets: int) -> None:
    scorer = LearnedScorer(_train(buckets))
    hard = [scorer.score(turn(t)).value for t in HARD]
    easy = [scorer.score(turn(t)).value for t in EASY]
    assert min(hard) > 0.5 > max(easy)
    unseen_hard = scorer.score(turn("Prove that there are infinitely many primes."))
    unseen_easy = scorer.score(turn("Translate 'good night' into German."))
    assert unseen_hard.value > unseen_easy.value


def test_learned_weights_round_trip(tmp_path: Path) -> None:
    weights = _train(hash_buckets=32)
    path = tmp_path / "scorer.json"
    weights.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "tiered-router/learned-scorer"
    assert data["version"] == 1
    assert set(data["weights"]) == FEATURE_NAMES
    assert len(data["hashing"]["weights"]) == 32
    loaded = LearnedScorer.from_file(path)
    t = turn("Derive the closed form and prove it.")
    assert loaded.score(t) == LearnedScorer(weights).score(t)
    assert "words" in loaded.score(t).contributions


def test_learned_score_explains_itself() -> None:
    scorer = LearnedScorer(_train())
    s = scorer.score(turn("Prove that the algorithm is optimal."))
    assert set(s.contributions) == FEATURE_NAMES
    assert s.reasons and s.reasons[0].startswith("reasoning")


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "w.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


GOOD: Mapping[str, Any] = {
    "format": "tiered-router/learned-scorer",
    "version": 1,
    "bias": -1.0,
    "weights": {"reasoning": 2.0},
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ([], "must be a JSON object"),
        ({**GOOD, "format": "other"}, "'format' must be"),
        ({**GOOD, "version": 3}, "'version' must be 1 or 2"),
        ({**GOOD, "weights": {"reasonin": 1.0}}, r"unknown feature\(s\) \['reasonin'\]"),
        ({**GOOD, "weights": {"reasoning": "high"}}, "'weights' must map"),
        ({**GOOD, "bias": None}, "'bias' must be a number"),
        ({**GOOD, "hashing": {"buckets": 2, "weights": [0.1]}}, "2 hash buckets but 1"),
        ({**GOOD, "extra": 1}, r"unknown key\(s\) \['extra'\]"),
    ],
)
def test_learned_weights_file_errors(tmp_path: Path, data: Any, message: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=message) as info:
        LearnedScorer.from_file(path)
    assert str(path) in str(info.value)


def test_learned_weights_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read learned scorer weights"):
        LearnedWeights.from_file(tmp_path / "missing.json")


def test_build_scorer_learned(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    scorer = build_scorer(ScoringConfig(type="learned", options={"path": str(path)}))
    assert isinstance(scorer, LearnedScorer)
    assert scorer.weights.weights["reasoning"] == 2.0
    assert scorer.weights.weights["tools"] == 0.0


def test_build_scorer_learned_errors(tmp_path: Path) -> None:
    shipped = build_scorer(ScoringConfig(type="learned"))  # no path: the shipped weights
    assert 0.0 <= shipped.score(Turn([{"role": "user", "content": "2 + 2?"}])).value <= 1.0
    with pytest.raises(ValueError, match=r"scoring\.options\.path: must be the path"):
        build_scorer(ScoringConfig(type="learned", options={"path": ""}))
    with pytest.raises(ValueError, match=r"scoring\.options\.path: .*missing\.json"):
        build_scorer(
            ScoringConfig(type="learned", options={"path": str(tmp_path / "missing.json")})
        )
    with pytest.raises(ValueError, match=r"scoring\.weights: only the heuristic"):
        build_scorer(
            ScoringConfig(type="learned", weights={"tools": 1.0}, options={"path": "x.json"})
        )


@pytest.mark.parametrize(
    ("turns", "labels", "kwargs", "message"),
    [
        ([], [], {}, "at least one"),
        ([turn("a")], [1.0, 0.0], {}, "1 turns but 2 labels"),
        ([turn("a")], [2.0], {}, r"in \[0, 1\]"),
        ([turn("a")], [1.0], {"epochs": 0}, "epochs"),
    ],
)
def test_fit_validates_its_input(
    turns: list[Turn], labels: list[float], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        fit(turns, labels, **kwargs)


def test_extract_is_shared_by_both_scorers() -> None:
    t = turn("Compare the two plans and explain why one is better.")
    vector = extract(t)
    assert LearnedScorer(_train()).score(t).features == vector.raw == SCORER.score(t).features


def test_code_and_math_reasons_name_what_was_counted() -> None:
    from tiered_router import Router, Turn

    router = Router(
        {
            "backends": {"f": {"model": "m", "price": {"input_per_mtok": 0, "output_per_mtok": 0}}},
            "tiers": {"fast": "f", "frontier": "f"},
            "scoring": {"type": "heuristic"},
        }
    )

    def reasons(text: str) -> str:
        return " | ".join(router.decide(Turn([{"role": "user", "content": text}])).reasons)

    prose = reasons("Extract the city as JSON: I moved to Lyon in May.")
    assert "code signs: programming words json (code 0.6)" in prose
    assert "density" not in prose
    aside = reasons("I moved (last year) to Lyon, a city I love.")
    assert "code signs: 2 code-like symbols" in aside
    code = reasons("Fix this:\n```python\ndef f(x): return x[0]\n```")
    assert "1 fenced block; programming words def, python" in code
    assert "math signs: 1 arithmetic operation; 2 numbers (math 0.9)" in reasons("What is 2 + 2?")
