from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "agents",
    reason='OpenAI Agents SDK is not installed: pip install "tiered-router[openai-agents]"',
)

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from routerkit import make_policy, policy_file, tracked  # noqa: E402

from tiered_router import MemorySink, Router  # noqa: E402
from tiered_router.integrations.openai_agents import (  # noqa: E402
    TieredAgentsModel,
    TieredModelProvider,
)
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402


def make_router(server: ScriptedServer, sink: MemorySink | None = None) -> Router:
    """Two tiers on the scripted server; routers are closed after the test (conftest)."""
    policy = make_policy(server, scoring={"threshold": 0.9})
    return tracked(Router(policy, sinks=[sink] if sink is not None else []))


class WeatherReport(BaseModel):
    city: str
    celsius: float
    summary: str


@function_tool
def get_weather(city: str) -> str:
    """Return the current temperature of a city in degrees Celsius.

    Args:
        city: The city.
    """
    return f"{city}: 21.0 C, sunny"


def agent_reply(body: dict[str, Any]) -> Reply:
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply.tool_calls([("get_weather", {"city": "Oslo"})])
    return Reply.json({"city": "Oslo", "celsius": 21.0, "summary": "Sunny and mild."})


def run_config(router: Router) -> RunConfig:
    return RunConfig(model_provider=TieredModelProvider(router), tracing_disabled=True)


def make_agent(**kw: Any) -> Agent[Any]:
    return Agent(
        name="weather",
        instructions="Answer with a weather report.",
        tools=[get_weather],
        output_type=WeatherReport,
        **kw,
    )


@pytest.mark.anyio
async def test_runner_run_with_a_tool_and_a_structured_output(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = make_router(server, sink)
    server.default = agent_reply
    # the fast draft of the final answer breaks the output schema: escalated inside the run
    server.script(
        [
            Reply.tool_calls([("get_weather", {"city": "Oslo"})]),
            Reply.json({"city": "Oslo", "celsius": "warm"}),
        ],
        model="fast-model",
    )
    async with router.task("agents-1") as task:
        result = await Runner.run(make_agent(), "Weather in Oslo?", run_config=run_config(router))
    await router.aclose()
    report = result.final_output
    assert report == WeatherReport(city="Oslo", celsius=21.0, summary="Sunny and mild.")
    assert task.steps == 2 and task.escalations == 1
    first, second = sink.traces
    assert first.tier == "fast" and second.tier == "frontier"
    assert second.escalations == ("gate_failed",)
    assert second.metadata["agent_role"] == "observe"
    body = server.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "Answer with a weather report."}
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["response_format"]["type"] == "json_schema"
    tool_msg = next(m for m in server.requests[-1].body["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "Oslo: 21.0 C, sunny"
    call_item = result.raw_responses[0].output[0]
    routed = call_item.provider_data["tiered_router"]  # type: ignore[union-attr]
    assert routed["tier"] == "fast" and routed["step"] == 0
    assert result.context_wrapper.usage.requests == 2


@pytest.mark.anyio
async def test_runner_run_streamed(server: ScriptedServer) -> None:
    router = make_router(server)
    server.default = agent_reply
    result = Runner.run_streamed(make_agent(), "Weather in Oslo?", run_config=run_config(router))
    kinds = [event.type async for event in result.stream_events()]
    await router.aclose()
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert result.final_output == WeatherReport(
        city="Oslo", celsius=21.0, summary="Sunny and mild."
    )
    assert [r.body.get("stream") for r in server.requests] == [True, True]
    last = result.raw_responses[-1]
    assert last.usage.output_tokens > 0


@pytest.mark.anyio
async def test_model_on_an_agent_and_signals_in_extra_body(server: ScriptedServer) -> None:
    router = make_router(server)
    agent = Agent(
        name="plain",
        instructions="Be brief.",
        model=TieredAgentsModel(router),
        model_settings=ModelSettings(
            temperature=0.7, extra_body={"tiered_router": {"final": True}, "top_k": 3}
        ),
    )
    result = await Runner.run(agent, "hi", run_config=RunConfig(tracing_disabled=True))
    await router.aclose()
    assert result.final_output == "ok"
    request = server.requests[-1]
    assert request.model == "frontier-model"  # final=True matched the final-answer rule
    assert request.body["temperature"] == 0.7 and request.body["top_k"] == 3
    assert "tiered_router" not in request.body
    model = TieredModelProvider(router).get_model(None)
    assert isinstance(model, TieredAgentsModel) and model.name == "tiered-router"


def test_example_script_runs_against_the_local_server(
    server: ScriptedServer, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util
    import json
    from pathlib import Path

    path = policy_file(server, tmp_path / "policy.yaml")
    server.default = agent_reply
    file = Path(__file__).resolve().parents[1] / "examples" / "openai_agents_example.py"
    spec = importlib.util.spec_from_file_location("example_openai_agents", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(path)]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.split("report: ", 1)[1].splitlines()[0])
    assert report == {"city": "Oslo", "celsius": 21.0, "summary": "Sunny and mild."}
    assert "step 0: fast" in out and "step 1: fast" in out
    assert json.loads(out.split("task: ", 1)[1])["steps"] == 2
