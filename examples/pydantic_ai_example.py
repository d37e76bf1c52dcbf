"""A pydantic-ai agent with a tool and a typed output, routed by tiered_router.

    pip install ".[pydantic-ai]"      # from a checkout
    export INCEPTION_API_KEY=... OPENAI_API_KEY=...
    python examples/pydantic_ai_example.py              # built-in Mercury 2 + GPT policy
    python examples/pydantic_ai_example.py policy.yaml  # or your own policy

pydantic-ai's output tool and function tools reach the router as tool specs, so a fast
draft with bad arguments is escalated before pydantic-ai spends a retry on it. See
docs/pydantic_ai.md.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

from pydantic import BaseModel
from pydantic_ai import Agent

from tiered_router import Router
from tiered_router.integrations.pydantic_ai import TieredPydanticAIModel

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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    router = Router.from_yaml(args[0]) if args else Router(POLICY)
    return asyncio.run(run(router))


if __name__ == "__main__":
    raise SystemExit(main())
