"""A pydantic-ai agent with a tool and a typed output, routed by tiered_router.

    pip install ".[pydantic-ai]"      # from a checkout
    python examples/pydantic_ai_example.py --stand-in   # no keys: a local scripted upstream
    export INCEPTION_API_KEY=... OPENAI_API_KEY=...
    python examples/pydantic_ai_example.py              # built-in Mercury 2 + GPT policy
    python examples/pydantic_ai_example.py policy.yaml  # or your own policy

``--stand-in`` (or ``TIERED_ROUTER_STAND_IN=1``) points the policy's backends at
``tiered_router.testing.ScriptedServer`` on 127.0.0.1, which answers as ``stand_in_reply`` says.

pydantic-ai's output tool and function tools reach the router as tool specs, so a fast
draft with bad arguments is escalated before pydantic-ai spends a retry on it. See
docs/pydantic_ai.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from tiered_router import PolicyError, Router
from tiered_router.exceptions import install_command
from tiered_router.testing import Reply, ScriptedServer

try:
    from pydantic_ai import Agent

    from tiered_router.integrations.pydantic_ai import TieredPydanticAIModel
except ImportError as exc:  # the extra is not installed: say which, not a traceback
    raise SystemExit(f"{exc.name or exc} is missing: {install_command('pydantic-ai')}") from None

POLICY = """
version: 1
backends:
  mercury: {preset: mercury-2, api_key: "${INCEPTION_API_KEY}"}
  frontier: {type: openai, model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}
tiers: {fast: mercury, frontier: frontier}
task: {lock_after_gate_failures: 1, unlock_after_clean_turns: 3}
"""


class Forecast(BaseModel):
    city: str
    celsius: float


def build_agent(router: Router) -> Agent[None, Forecast]:
    agent = Agent(
        TieredPydanticAIModel(router),
        output_type=Forecast,
        instructions="Look the temperature up with the tool, then report it.",
    )

    @agent.tool_plain
    def get_temperature(city: str) -> float:
        """Return the current temperature of a city in degrees Celsius."""
        return 21.5

    return agent


async def run(router: Router) -> int:
    agent = build_agent(router)
    async with router, router.task("pydantic-ai-demo") as task:
        result = await agent.run("How warm is it in Oslo?")
    print("forecast:", result.output.model_dump_json())
    for trace in task.traces:
        print(f"step {trace.metadata['agent_step']}: {trace.tier} (rule={trace.decision.rule})")
    print("task:", json.dumps(task.summary().to_dict()))
    return 0


def stand_in_reply(body: dict[str, Any]) -> Reply:
    """What the scripted upstream answers with --stand-in: the tool, then the typed output."""
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply.tool_calls([("get_temperature", {"city": "Oslo"})])
    return Reply.tool_calls([("final_result", {"city": "Oslo", "celsius": 21.5})])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    stand_in = "--stand-in" in args or os.environ.get("TIERED_ROUTER_STAND_IN") == "1"
    args = [a for a in args if a != "--stand-in"]
    policy = args[0] if args else POLICY
    if stand_in:
        with ScriptedServer(default=stand_in_reply) as upstream:
            return asyncio.run(run(Router(upstream.stand_in(policy))))
    try:
        return asyncio.run(run(Router(policy)))
    except PolicyError as exc:  # a key not set: say which, and how to run without keys
        print(f"{exc}\n(no keys? run it with --stand-in)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
