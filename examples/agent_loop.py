"""A small multi-step, tool-using agent loop routed through tiered_router.

With no argument it runs against the scripted local OpenAI-compatible server that ships in
``tiered_router.testing`` (no keys, no network): the fast tier first drafts a tool call with a
wrong argument type, the gate catches it and escalates, then the loop runs the tool and the
final answer goes to the frontier tier.

With a policy file it runs the same loop against real providers, or with ``--stand-in`` (or
``TIERED_ROUTER_STAND_IN=1``) against the scripted server standing in for them:

    python examples/agent_loop.py                                    # local scripted server
    python examples/agent_loop.py examples/policy.yaml --stand-in    # the policy, no keys
    python examples/agent_loop.py examples/policy.yaml               # needs its API keys
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tiered_router import Router, Turn
from tiered_router.testing import Reply, ScriptedServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def get_weather(city: str, days: int = 1) -> dict[str, Any]:
    """A stand-in tool: a real agent would call a weather API here."""
    return {"city": city, "days": days, "forecast": "sunny", "high_c": 24}


def run_agent(router: Router, question: str, *, max_steps: int = 6) -> str:
    """Run the loop: route each turn, run the tools it calls, stop at a text answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a concise travel assistant. Use tools."},
        {"role": "user", "content": question},
    ]
    with router.task("weather-question") as task:
        for step in range(max_steps):
            final = step > 0 and messages[-1]["role"] == "tool"
            result = router.complete(Turn(messages, tools=TOOLS, final=final))
            trace = result.trace
            print(
                f"step {step}: tier={result.tier} escalated={result.escalated} "
                f"score={trace.decision.score:.2f} rule={trace.decision.rule} "
                f"attempts={len(trace.attempts)} escalations={list(trace.escalations)}"
            )
            for attempt in trace.attempts:
                if attempt.verdict is not None and not attempt.verdict.passed:
                    print(f"    gate stopped {attempt.backend}: {attempt.verdict.reasons[0]}")
            completion = result.completion
            messages.append(completion.to_message())
            if not completion.tool_calls:
                summary = task.summary()
                print(f"task: {summary.steps} steps, cost ${summary.cost:.6f}")
                return completion.text
            for call in completion.tool_calls:
                output = get_weather(**call.parsed_arguments())
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(output)}
                )
    raise RuntimeError(f"no answer after {max_steps} steps")


def local_policy(base_url: str) -> dict[str, Any]:
    """Two tiers on the scripted server: a fast diffusion model and a frontier model."""
    backend = {"type": "openai", "base_url": base_url, "api_key": "local-test-key"}
    return {
        "version": 1,
        "backends": {
            "fast": {
                **backend,
                "model": "local-diffusion",
                "kind": "diffusion",
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
            },
            "frontier": {
                **backend,
                "model": "local-frontier",
                "price": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
    }


def main(argv: list[str]) -> int:
    question = "What's the weather in Lyon for the next 2 days?"
    stand_in = "--stand-in" in argv or os.environ.get("TIERED_ROUTER_STAND_IN") == "1"
    argv = [a for a in argv if a != "--stand-in"]
    if len(argv) > 1 and stand_in:
        with ScriptedServer() as server:
            # the same three answers, whatever the policy's model names: a bad draft, the
            # escalated call, the final answer
            server.script(
                [
                    Reply.tool_calls([("get_weather", {"city": "Lyon", "days": "two"})]),
                    Reply.tool_calls([("get_weather", {"city": "Lyon", "days": 2})]),
                    Reply.text("Lyon: sunny, highs around 24 °C for the next 2 days."),
                ]
            )
            with Router(server.stand_in(argv[1])) as router:
                print(run_agent(router, question))
        return 0
    if len(argv) > 1:
        with Router.from_yaml(argv[1]) as router:
            print(run_agent(router, question))
        return 0
    with ScriptedServer() as server:
        # the fast model's first draft passes "two" for an integer: the gate must catch it
        server.script(
            [Reply.tool_calls([("get_weather", {"city": "Lyon", "days": "two"})])],
            model="local-diffusion",
        )
        server.script(
            [Reply.tool_calls([("get_weather", {"city": "Lyon", "days": 2})])],
            model="local-frontier",
        )
        server.script(
            [Reply.text("Lyon: sunny, highs around 24 °C for the next 2 days.")],
            model="local-frontier",
        )
        with Router(local_policy(server.base_url)) as router:
            print(run_agent(router, question))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
