"""The bundled default policy serves an agent loop: a long system prompt is context, not difficulty.

A 10-step agent task with a 2 KB system prompt and tools runs over real HTTP (the scripted
server stands in for both tiers, with the default policy's scorer, rules and gate): the nine
tool steps are drafted fast and verified by the gate; only the final answer goes to the
frontier. Before the scorer counted the request alone, every step went to the frontier.
"""

from __future__ import annotations

from typing import Any

import yaml

from tiered_router import Router, Turn, load_policy
from tiered_router.evaluation import bundled_policy_path
from tiered_router.testing import Reply, ScriptedServer

SYSTEM = ("You are a careful travel assistant. Use the tools; cite what they return. " * 28)[:2048]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights between two cities on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "date": {"type": "string"},
                },
                "required": ["origin", "destination", "date"],
            },
        },
    }
]
ARGS = {"origin": "Paris", "destination": "Lyon"}


def _policy(base_url: str) -> Any:
    data = yaml.safe_load(bundled_policy_path().read_text())
    data["backends"] = {
        "fast": {
            "type": "openai",
            "model": "fast-m",
            "kind": "diffusion",
            "base_url": base_url,
            "api_key": "test",
            "max_retries": 0,
        },
        "frontier": {
            "type": "openai",
            "model": "frontier-m",
            "base_url": base_url,
            "api_key": "test",
            "max_retries": 0,
        },
    }
    return load_policy(data)


def _step(messages: list[dict[str, Any]], step: int, *, final: bool) -> Turn:
    return Turn(list(messages), tools=TOOLS, step=step, final=final)


def test_a_long_system_prompt_alone_does_not_send_a_turn_to_the_frontier() -> None:
    router = Router(load_policy(bundled_policy_path()))
    user = {"role": "user", "content": "Find me a flight from Paris to Lyon on 1 December."}
    bare = router.decide(Turn([user], tools=TOOLS))
    long = router.decide(Turn([{"role": "system", "content": SYSTEM}, user], tools=TOOLS))
    assert long.features["prompt_chars"] > 2000
    assert long.features["request_chars"] == bare.features["request_chars"] < 100
    assert long.score == bare.score
    assert long.tier == bare.tier == "fast"


def test_ten_step_agent_task_with_a_2kb_system_prompt_is_drafted_fast() -> None:
    with ScriptedServer() as upstream:
        # a different day on each step (the same call twice in a row is a stall: task.stall)
        upstream.script(
            [
                Reply.tool_calls([("search_flights", {**ARGS, "date": f"2026-12-{d:02d}"})])
                for d in range(1, 10)
            ],
            model="fast-m",
        )
        upstream.script([Reply.text("The 08:04 TGV is the cheapest.")], model="frontier-m")
        router = Router(_policy(upstream.base_url))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": "Find the cheapest flight from Paris to Lyon, any day of 1-9 December.",
            },
        ]
        tiers: list[str] = []
        rules: list[str | None] = []
        with router.task("trip") as task:
            for step in range(1, 11):
                result = router.complete(_step(messages, step, final=step == 10))
                tiers.append(result.tier)
                rules.append(result.trace.decision.rule)
                if step < 10:
                    call = result.completion.tool_calls[0]
                    messages.append(
                        {"role": "assistant", "content": None, "tool_calls": [call.to_openai()]}
                    )
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call.id,
                            "content": '{"flights": [{"dep": "08:04", "price": 39}]}',
                        }
                    )
        router.close()
        assert upstream.pending() == {}
    assert tiers == ["fast"] * 9 + ["frontier"]
    assert rules[0] is None  # the first step by its score, the request alone
    assert rules[1:9] == ["agent-step"] * 8
    assert rules[9] == "final-answer"
    summary = task.summary()
    assert summary.steps == 10 and summary.fast_share == 0.9 and summary.escalations == 0
