"""A LangGraph ReAct agent whose every model call goes through tiered_router.

    pip install ".[langchain]"      # from a checkout
    python examples/langgraph_agent.py --stand-in   # no keys: a local scripted upstream
    export INCEPTION_API_KEY=... OPENAI_API_KEY=...
    python examples/langgraph_agent.py              # the built-in Mercury 2 + GPT policy
    python examples/langgraph_agent.py policy.yaml  # or your own policy

``--stand-in`` (or ``TIERED_ROUTER_STAND_IN=1``) points the policy's backends at
``tiered_router.testing.ScriptedServer`` on 127.0.0.1, which answers as ``stand_in_reply`` says.

The agent has two tools and needs three model calls (tool, tool, answer). The router sends
each call to a tier; the gate checks every fast draft's tool arguments against the tool
schemas before LangGraph runs the tool; the task context numbers the steps and adds up the
cost. See docs/langchain.md.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from tiered_router import PolicyError, Router
from tiered_router.exceptions import install_command
from tiered_router.testing import Reply, ScriptedServer

try:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from tiered_router.integrations.langchain import TieredChatModel
except ImportError as exc:  # the extra is not installed: say which, not a traceback
    raise SystemExit(f"{exc.name or exc} is missing: {install_command('langchain')}") from None

POLICY = """
version: 1
backends:
  mercury: {preset: mercury-2, api_key: "${INCEPTION_API_KEY}"}
  frontier: {type: openai, model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}
tiers: {fast: mercury, frontier: frontier}
rules:
  - {name: final-answer, when: {final: true}, tier: frontier}
task: {lock_after_gate_failures: 2, unlock_after_clean_turns: 2}
"""


@tool
def get_weather(city: str) -> str:
    """Return the current temperature of a city in degrees Celsius."""
    return json.dumps({"city": city, "celsius": 21.0})


@tool
def to_fahrenheit(celsius: float) -> float:
    """Convert degrees Celsius to degrees Fahrenheit."""
    return celsius * 9 / 5 + 32


TOOLS = [get_weather, to_fahrenheit]


def build_agent(router: Router) -> Any:
    """A ReAct loop: the model calls tools until it answers."""
    model = TieredChatModel(router=router).bind_tools(TOOLS)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def stand_in_reply(body: dict[str, Any]) -> Reply:
    """What the scripted upstream answers with --stand-in: two tools in turn, then the answer."""
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done == 0:
        return Reply.tool_calls([("get_weather", {"city": "Oslo"})])
    if done == 1:
        return Reply.tool_calls([("to_fahrenheit", {"celsius": 21.0})])
    return Reply.text("It is 21 °C (69.8 °F) in Oslo.")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    stand_in = "--stand-in" in args or os.environ.get("TIERED_ROUTER_STAND_IN") == "1"
    args = [a for a in args if a != "--stand-in"]
    policy = args[0] if args else POLICY
    if stand_in:
        with ScriptedServer(default=stand_in_reply) as upstream:
            return run(upstream.stand_in(policy))
    try:
        return run(policy)
    except PolicyError as exc:  # a key not set: say which, and how to run without keys
        print(f"{exc}\n(no keys? run it with --stand-in)", file=sys.stderr)
        return 1


def run(policy: Any) -> int:
    with Router(policy) as router:  # closes clients
        agent = build_agent(router)
        with router.task("weather-demo") as task:
            question = "How warm is it in Oslo, in Fahrenheit?"
            state = agent.invoke({"messages": [("user", question)]})
    for message in state["messages"]:
        if isinstance(message, AIMessage):
            routed = message.response_metadata["tiered_router"]
            print(f"step {routed['step']}: {routed['tier']} (rule={routed['rule']})")
    print("answer:", state["messages"][-1].content)
    print("task:", json.dumps(task.summary().to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
