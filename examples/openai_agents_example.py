"""An OpenAI Agents SDK agent with a function tool and a typed output, routed by tiered_router.

    pip install ".[openai-agents]"      # from a checkout
    python examples/openai_agents_example.py --stand-in   # no keys: a local scripted upstream
    export INCEPTION_API_KEY=... OPENAI_API_KEY=...
    python examples/openai_agents_example.py              # built-in Mercury 2 + GPT policy
    python examples/openai_agents_example.py policy.yaml  # or your own policy

``--stand-in`` (or ``TIERED_ROUTER_STAND_IN=1``) points the policy's backends at
``tiered_router.testing.ScriptedServer`` on 127.0.0.1, which answers as ``stand_in_reply`` says.

``Runner.run`` drives the loop; every model call goes through the router, whose gate checks
the tool arguments and the final output against its JSON schema. See docs/openai_agents.md.
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
    from agents import Agent, RunConfig, Runner, function_tool

    from tiered_router.integrations.openai_agents import TieredModelProvider
except ImportError as exc:  # the extra is not installed: say which, not a traceback
    raise SystemExit(f"{exc.name or exc} is missing: {install_command('openai-agents')}") from None

POLICY = """
version: 1
backends:
  mercury: {preset: mercury-2, api_key: "${INCEPTION_API_KEY}"}
  frontier: {type: openai, model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}
tiers: {fast: mercury, frontier: frontier}
task: {max_escalations: 3}
"""


class WeatherReport(BaseModel):
    city: str
    celsius: float
    summary: str


@function_tool
def get_weather(city: str) -> str:
    """Return the current weather of a city.

    Args:
        city: The city.
    """
    return f"{city}: 21.0 C, sunny"


agent = Agent(
    name="weather",
    instructions="Look the weather up, then answer with a weather report.",
    tools=[get_weather],
    output_type=WeatherReport,
)


async def run(router: Router) -> int:
    # tracing_disabled: the SDK would otherwise upload traces to OpenAI
    config = RunConfig(model_provider=TieredModelProvider(router), tracing_disabled=True)
    async with router, router.task("agents-demo") as task:
        result = await Runner.run(agent, "What's the weather in Oslo?", run_config=config)
    report: WeatherReport = result.final_output
    print("report:", report.model_dump_json())
    for trace in task.traces:
        print(f"step {trace.metadata['agent_step']}: {trace.tier} (rule={trace.decision.rule})")
    print("task:", json.dumps(task.summary().to_dict()))
    return 0


def stand_in_reply(body: dict[str, Any]) -> Reply:
    """What the scripted upstream answers with --stand-in: the tool, then the report."""
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply.tool_calls([("get_weather", {"city": "Oslo"})])
    return Reply.json({"city": "Oslo", "celsius": 21.0, "summary": "Sunny and mild."})


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
