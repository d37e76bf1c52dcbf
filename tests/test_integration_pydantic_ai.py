from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai", reason='pydantic-ai is not installed: pip install "tiered-router[pydantic-ai]"'
)

from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelResponse  # noqa: E402
from routerkit import make_policy, policy_file, tracked  # noqa: E402

from tiered_router import MemorySink, Router  # noqa: E402
from tiered_router.integrations.pydantic_ai import TieredPydanticAIModel  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402


def make_router(server: ScriptedServer, sink: MemorySink | None = None) -> Router:
    """Two tiers on the scripted server; routers are closed after the test (conftest)."""
    policy = make_policy(server, scoring={"threshold": 0.9})
    return tracked(Router(policy, sinks=[sink] if sink is not None else []))


class Forecast(BaseModel):
    city: str
    celsius: float


def make_agent(router: Router, **kw: Any) -> Agent[None, Forecast]:
    agent = Agent(
        TieredPydanticAIModel(router),
        output_type=Forecast,
        instructions="Use the tool, then report.",
        **kw,
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Return the temperature of a city in degrees Celsius."""
        return f"{city}: 21.5"

    return agent


def agent_reply(body: dict[str, Any]) -> Reply:
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply.tool_calls([("get_weather", {"city": "Oslo"})])
    return Reply.tool_calls([("final_result", {"city": "Oslo", "celsius": 21.5})])


@pytest.mark.anyio
async def test_agent_with_a_tool_and_a_typed_output(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = make_router(server, sink)
    server.default = agent_reply
    # the fast draft calls the output tool with a bad argument: the gate escalates it
    server.script(
        [
            Reply.tool_calls([("get_weather", {"city": "Oslo"})]),
            Reply.tool_calls([("final_result", {"city": "Oslo", "celsius": "warm"})]),
        ],
        model="fast-model",
    )
    async with router.task("pyd-1") as task:
        result = await make_agent(router).run("How warm is Oslo?")
    await router.aclose()
    assert result.output == Forecast(city="Oslo", celsius=21.5)
    assert task.steps == 2 and task.escalations == 1
    assert [t.tier for t in sink.traces] == ["fast", "frontier"]
    first = server.requests[0].body
    assert first["messages"][0] == {"role": "system", "content": "Use the tool, then report."}
    assert {t["function"]["name"] for t in first["tools"]} == {"get_weather", "final_result"}
    assert first["tool_choice"] == "required"
    tool_msg = next(m for m in server.requests[-1].body["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "Oslo: 21.5"
    responses = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    routed = [r.provider_details["tiered_router"] for r in responses if r.provider_details]
    assert [r["step"] for r in routed] == [0, 1]
    assert routed[1]["escalated"] is True
    assert result.usage.requests == 2 and result.usage.output_tokens > 0


@pytest.mark.anyio
async def test_native_output_and_signals(server: ScriptedServer) -> None:
    from pydantic_ai import NativeOutput

    router = make_router(server)
    server.default = Reply.json({"city": "Rome", "celsius": 30})
    agent = Agent(TieredPydanticAIModel(router), output_type=NativeOutput(Forecast))
    result = await agent.run(
        "Rome?",
        model_settings={"temperature": 0.6, "extra_body": {"tiered_router": {"final": True}}},
    )
    await router.aclose()
    assert result.output == Forecast(city="Rome", celsius=30)
    body = server.requests[-1].body
    assert body["model"] == "frontier-model"
    assert body["response_format"]["type"] == "json_schema"
    assert body["temperature"] == 0.6 and "tiered_router" not in body


@pytest.mark.anyio
async def test_run_stream(server: ScriptedServer) -> None:
    router = make_router(server)
    server.default = Reply.text("Sunny in Oslo today.", chunks=4)
    agent = Agent(TieredPydanticAIModel(router))
    async with agent.run_stream("Weather?") as run:
        pieces = [text async for text in run.stream_output(debounce_by=None)]
    await router.aclose()
    assert pieces[-1] == "Sunny in Oslo today."
    assert len(pieces) >= 2
    assert server.requests[-1].body.get("stream") is True


@pytest.mark.anyio
async def test_run_stream_with_tools_and_typed_output(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = make_router(server, sink)
    server.default = agent_reply
    async with make_agent(router).run_stream("How warm is Oslo?") as run:
        output = await run.get_output()
    await router.aclose()
    assert output == Forecast(city="Oslo", celsius=21.5)
    assert [r.body.get("stream") for r in server.requests] == [True, True]
    assert len(sink.traces) == 2
    assert "agent_role" not in sink.traces[1].metadata  # no task: no signals added
    assert server.requests[1].body["messages"][-1]["role"] == "tool"


def test_example_script_runs_against_the_local_server(
    server: ScriptedServer, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util
    import json
    from pathlib import Path

    path = policy_file(server, tmp_path / "policy.yaml")

    def reply(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply.tool_calls([("get_temperature", {"city": "Oslo"})])
        return Reply.tool_calls([("final_result", {"city": "Oslo", "celsius": 21.5})])

    server.default = reply
    file = Path(__file__).resolve().parents[1] / "examples" / "pydantic_ai_example.py"
    spec = importlib.util.spec_from_file_location("example_pydantic_ai", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.split("forecast: ", 1)[1].splitlines()[0]) == {
        "city": "Oslo",
        "celsius": 21.5,
    }
    assert json.loads(out.split("task: ", 1)[1])["steps"] == 2
