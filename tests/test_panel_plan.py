"""Draft panels and hedges: the policy sections, and the pure planning pieces."""

from __future__ import annotations

from typing import Any

import pytest

from tiered_router import PolicyError, Turn, load_policy
from tiered_router.engine._latency import LatencyTracker
from tiered_router.engine._panel_plan import DraftSpec, draft_turn, panel_kinds, plan_panel
from tiered_router.policy import DraftsConfig, HedgeConfig

NOWHERE = "http://127.0.0.1:9/v1"


def policy(**sections: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "backends": {
            "fast": {"model": "f", "base_url": NOWHERE},
            "fast2": {"model": "g", "base_url": NOWHERE},
            "big": {"model": "F", "base_url": NOWHERE},
        },
        "tiers": {"fast": "fast", "frontier": "big"},
        **sections,
    }


@pytest.mark.parametrize(
    ("section", "where", "words"),
    [
        ({"drafts": {"k": 3, "backends": ["fast", "fast"]}}, "drafts.backends", "twice"),
        ({"drafts": {"k": 2, "variants": ["a", "b", "c"]}}, "drafts.variants", "at most k"),
        ({"drafts": {"k": 3, "backends": ["fsat"]}}, "drafts.backends[0]", "did you mean"),
        ({"drafts": {"k": 3, "when": ["tool"]}}, "drafts.when", "tools"),
        ({"drafts": {"k": 0}}, "drafts.k", "1"),
        ({"hedge": {}}, "hedge", "at least one trigger"),
        ({"hedge": {"after_percentile": 100}}, "hedge.after_percentile", "100"),
    ],
)
def test_bad_sections_are_named(section: dict[str, Any], where: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(policy(**section))
    assert where in str(caught.value) and words in str(caught.value)


def test_a_greedy_panel_is_fine_with_a_second_backend_or_variants() -> None:
    greedy = {"preset": "sglang", "model": "llada2", "base_url": NOWHERE}
    base = policy()
    base["backends"]["fast"] = greedy
    with pytest.raises(PolicyError, match="decodes greedily"):
        load_policy({**base, "drafts": {"k": 2}})
    assert load_policy({**base, "drafts": {"k": 2, "backends": ["fast", "fast2"]}}).drafts
    assert load_policy({**base, "drafts": {"k": 2, "variants": ["", "Be brief."]}}).drafts
    # the same variant twice is still the same prompt
    with pytest.raises(PolicyError, match="decodes greedily"):
        load_policy({**base, "drafts": {"k": 2, "variants": ["x", " x"]}})


def test_panel_kinds_of_turns() -> None:
    assert panel_kinds(Turn([{"role": "user", "content": "hi"}])) == {"all"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert "tools" in panel_kinds(Turn([{"role": "user", "content": "x"}], tools=tools))
    fmt = {"type": "json_object"}
    assert "json" in panel_kinds(Turn([{"role": "user", "content": "x"}], response_format=fmt))
    question = "Which is it?\n(A) red\n(B) blue"
    assert "answer" in panel_kinds(Turn([{"role": "user", "content": question}]))
    assert "answer" in panel_kinds(Turn([{"role": "user", "content": "How many cats?"}]))


def test_plan_panel_rotates_backends_and_variants() -> None:
    loaded = load_policy(
        policy(drafts={"k": 3, "backends": ["fast", "fast2"], "variants": ["", "v"]})
    )
    turn = Turn([{"role": "user", "content": "How many?"}])
    plan = plan_panel(loaded, turn, usable=lambda name: True)
    assert plan is not None and not plan.n
    assert [(d.backend, d.variant) for d in plan.drafts] == [
        ("fast", ""),
        ("fast2", "v"),
        ("fast", ""),
    ]
    assert plan_panel(loaded, turn, usable=lambda name: name == "fast2") is not None
    assert plan_panel(loaded, turn, usable=lambda name: False) is None
    assert plan_panel(loaded, Turn([{"role": "user", "content": "hi"}]), usable=bool) is None


def test_draft_turn_adds_the_variant_to_the_system_prompt() -> None:
    turn = Turn([{"role": "user", "content": "q"}], params={"max_tokens": 5})
    spec = DraftSpec(index=0, backend="fast", variant="Be brief.")
    made = draft_turn(turn, spec, temperature=0.5, n=None)
    assert made.messages[0] == {"role": "system", "content": "Be brief."}
    assert made.params == {"max_tokens": 5, "temperature": 0.5} and made.id == turn.id
    with_system = Turn([{"role": "system", "content": "S"}, {"role": "user", "content": "q"}])
    assert draft_turn(with_system, spec, temperature=None).messages[0]["content"] == (
        "S\n\nBe brief."
    )
    plain = DraftSpec(index=1, backend="fast")
    assert draft_turn(turn, plain, temperature=None) is turn
    assert draft_turn(turn, plain, temperature=None, n=3).params["n"] == 3


def test_latency_percentile() -> None:
    tracker = LatencyTracker()
    assert tracker.percentile("fast", 95) is None
    for i in range(1, 101):
        tracker.record("fast", i / 100, 10)
    assert tracker.percentile("fast", 95) == pytest.approx(0.95)
    assert tracker.percentile("fast", 50) == pytest.approx(0.50)
    assert tracker.percentile("fast", 95, min_samples=101) is None


def test_the_sections_build_in_python() -> None:
    assert DraftsConfig(k=3).when == ["tools", "json", "answer"]
    assert HedgeConfig(band=0.1).after_s is None


def test_a_task_budget_counts_every_draft_of_a_panel() -> None:
    from tiered_router import Router

    loaded = load_policy(
        policy(drafts={"k": 3, "when": ["all"]})
        | {
            "backends": {
                "fast": {"model": "f", "base_url": NOWHERE, "price": {"input_per_mtok": 1.0}},
                "fast2": {"model": "g", "base_url": NOWHERE},
                "big": {"model": "F", "base_url": NOWHERE},
            }
        }
    )
    single = load_policy({**loaded.model_dump(exclude_unset=True, mode="json"), "drafts": None})
    turn = Turn([{"role": "user", "content": "hello " * 100}])
    with Router(loaded) as router, router.task() as task:
        panel_cost = task.expected_cost("fast", turn)
    with Router(single) as router, router.task() as task:
        one_cost = task.expected_cost("fast", turn)
    assert one_cost > 0 and panel_cost == pytest.approx(3 * one_cost)
