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
        # a different day on each step (the same call twice in a row is a stall: task.stall);
        # every draft of a step's panel (the shipped policy verifies tool steps) gives it
        def fast(body: dict[str, Any]) -> Reply:
            day = 1 + sum(m["role"] == "tool" for m in body["messages"])
            return Reply.tool_calls([("search_flights", {**ARGS, "date": f"2026-12-{day:02d}"})])

        upstream.script([Reply.text("The 08:04 TGV is the cheapest.")], model="frontier-m")
        upstream.default = lambda body: (
            fast(body) if body["model"] == "fast-m" else Reply.text("unexpected")
        )
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


CITIES = ["Lyon", "Nice", "Lille", "Nantes", "Bordeaux"]
BOOK = [
    {
        "type": "function",
        "function": {
            "name": "book_trip",
            "description": "Book a train trip from Paris.",
            "parameters": {
                "type": "object",
                "properties": {"destination": {"type": "string"}, "day": {"type": "integer"}},
                "required": ["destination", "day"],
            },
        },
    }
]


def _wrong_on_30_percent(body: dict[str, Any], seen: dict[int, int]) -> Reply:
    """The fast model: a wrong but grounded destination on 30 % of calls (fixed per draft)."""
    text = str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])
    day = int(text.split("day ")[1].split(":")[0])
    dest = text.split("go to ")[1].rstrip(".")
    if body["model"] == "fast-m":
        draft = seen[day] = seen.get(day, -1) + 1
        h = (day * 7919 + draft * 104729) % 100
        if h < 30:  # independent across drafts and steps, the same on every run
            dest = [c for c in CITIES if c != dest][h % 4]
    return Reply.tool_calls([("book_trip", {"destination": dest, "day": day})])


def test_the_shipped_policy_verifies_tool_steps_whose_fast_model_errs_on_30_percent() -> None:
    """Without drafts such a loop returns ~30 % wrong calls: no gate check sees them."""
    with ScriptedServer() as upstream:
        seen: dict[int, int] = {}
        upstream.default = lambda body: _wrong_on_30_percent(body, seen)
        router = Router(_policy(upstream.base_url))
        assert router.policy.drafts is not None and router.policy.drafts.k >= 3
        wrong = fast = 0
        steps = 60
        for day in range(1, steps + 1):
            dest = CITIES[day % 5]
            messages = [
                {"role": "system", "content": "You book trains."},
                {
                    "role": "user",
                    "content": f"Cities: {', '.join(CITIES)}. On day {day}: go to {dest}.",
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c0",
                            "type": "function",
                            "function": {"name": "book_trip", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c0", "content": '{"ok": true}'},
            ]
            messages = [messages[0], *messages[2:], messages[1]]
            result = router.complete(Turn(messages, tools=BOOK, step=day))
            call = result.completion.tool_calls[0]
            wrong += '"' + dest + '"' not in call.arguments
            fast += result.tier == "fast"
            if result.tier == "fast":
                assert result.trace.panel is not None  # verified by agreement, not one draft
        router.close()
    assert wrong / steps <= 0.05
    assert fast / steps >= 0.5
