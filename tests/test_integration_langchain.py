from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip(
    "langchain_core", reason='LangChain is not installed: pip install "tiered-router[langchain]"'
)
pytest.importorskip(
    "langgraph", reason='LangGraph is not installed: pip install "tiered-router[langchain]"'
)

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from routerkit import make_policy, policy_file, tracked  # noqa: E402

from tiered_router import MemorySink, Router  # noqa: E402
from tiered_router.integrations import TieredChatModel as LazyChatModel  # noqa: E402
from tiered_router.integrations.langchain import TieredChatModel  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402


def make_router(server: ScriptedServer, sink: MemorySink | None = None) -> Router:
    """Two tiers on the scripted server; routers are closed after the test (conftest)."""
    policy = make_policy(server, scoring={"threshold": 0.9})
    return tracked(Router(policy, sinks=[sink] if sink is not None else []))


@tool
def get_weather(city: str) -> str:
    """Return the temperature in a city, in degrees Celsius."""
    return json.dumps({"city": city, "celsius": 21.0})


@tool
def to_fahrenheit(celsius: float) -> float:
    """Convert degrees Celsius to degrees Fahrenheit."""
    return celsius * 9 / 5 + 32


def weather_agent_reply(body: dict[str, Any]) -> Reply:
    """Two tools, one after the other, then the answer."""
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done == 0:
        return Reply.tool_calls([("get_weather", {"city": "Oslo"})])
    if done == 1:
        return Reply.tool_calls([("to_fahrenheit", {"celsius": 21.0})])
    return Reply.text("It is 21 °C (69.8 °F) in Oslo.")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moved in v1
def test_langgraph_react_agent_runs_a_multi_step_task(server: ScriptedServer) -> None:
    from langgraph.prebuilt import create_react_agent

    sink = MemorySink()
    router = make_router(server, sink)
    server.default = weather_agent_reply
    # the fast tier's first draft calls the tool with a wrong argument: the gate catches it
    server.script([Reply.tool_calls([("get_weather", {"town": "Oslo"})])], model="fast-model")
    agent = create_react_agent(TieredChatModel(router=router), [get_weather, to_fahrenheit])
    with router.task("weather") as task:
        state = agent.invoke({"messages": [("user", "How warm is Oslo in Fahrenheit?")]})
    messages = state["messages"]
    assert messages[-1].content == "It is 21 °C (69.8 °F) in Oslo."
    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.name for m in tool_results] == ["get_weather", "to_fahrenheit"]
    assert float(str(tool_results[1].content)) == pytest.approx(69.8)
    ai = [m for m in messages if isinstance(m, AIMessage)]
    routed = [m.response_metadata["tiered_router"] for m in ai]
    assert [r["step"] for r in routed] == [0, 1, 2]
    assert routed[0]["escalated"] is True and routed[0]["tier"] == "frontier"
    assert ai[0].tool_calls[0]["args"] == {"city": "Oslo"}
    assert {r["task_id"] for r in routed} == {"weather"}
    assert ai[-1].usage_metadata is not None and ai[-1].usage_metadata["output_tokens"] > 0
    # the router saw the tools and the tool results the framework sent
    assert task.steps == 3 and task.escalations == 1
    first = server.requests[0].body
    assert {t["function"]["name"] for t in first["tools"]} == {"get_weather", "to_fahrenheit"}
    assert sink.traces[-1].metadata["agent_role"] == "observe"
    assert sink.traces[0].escalations == ("gate_failed",)


@pytest.mark.anyio
async def test_ainvoke_and_signals(server: ScriptedServer) -> None:
    model = TieredChatModel(router=make_router(server))
    reply = await model.ainvoke([HumanMessage("hi")])
    assert reply.content == "ok"
    assert reply.response_metadata["tiered_router"]["tier"] == "fast"
    final = await model.bind(tiered_router={"final": True}).ainvoke("hi")
    assert final.response_metadata["tiered_router"]["rule"] == "final-answer"
    assert server.requests[-1].model == "frontier-model"
    with pytest.raises(ValueError, match="unknown tiered_router signal"):
        await model.ainvoke("hi", tiered_router={"last": True})
    await model.router.aclose()


def test_stream_yields_chunks_and_ends_with_the_decision(server: ScriptedServer) -> None:
    server.script([Reply.text("Hello there, traveller.", chunks=4)], model="fast-model")
    model = TieredChatModel(router=make_router(server))
    chunks = list(model.stream("hi"))
    assert len(chunks) >= 3
    assert "".join(str(c.content) for c in chunks) == "Hello there, traveller."
    assert chunks[-1].response_metadata["tiered_router"]["tier"] == "fast"
    assert chunks[-1].usage_metadata is not None
    assert server.requests[-1].body.get("stream") is True


@pytest.mark.anyio
async def test_astream_assembles_tool_calls(server: ScriptedServer) -> None:
    server.script([Reply.tool_calls([("get_weather", {"city": "Paris"})])], model="fast-model")
    router = make_router(server)
    model = TieredChatModel(router=router).bind_tools([get_weather])
    total: Any = None
    async for chunk in model.astream("weather in Paris?"):
        total = chunk if total is None else total + chunk
    await router.aclose()
    assert total.tool_calls[0]["name"] == "get_weather"
    assert total.tool_calls[0]["args"] == {"city": "Paris"}
    assert total.response_metadata["tiered_router"]["escalated"] is False


def test_bind_tools_passes_specs_and_tool_choice(server: ScriptedServer) -> None:
    server.script([Reply.tool_calls([("get_weather", {"city": "Rome"})])], model="fast-model")
    model = TieredChatModel(router=make_router(server))
    reply = model.bind_tools([get_weather], tool_choice="get_weather").invoke("Rome?")
    body = server.requests[-1].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    spec = body["tools"][0]["function"]
    assert spec["name"] == "get_weather" and spec["parameters"]["required"] == ["city"]
    assert isinstance(reply, AIMessage) and reply.tool_calls[0]["args"] == {"city": "Rome"}
    model.bind_tools([get_weather], tool_choice="any").invoke("Rome?")
    assert server.requests[-1].body["tool_choice"] == "required"


def test_invalid_arguments_from_the_last_tier_never_reach_the_agent_as_calls(
    server: ScriptedServer,
) -> None:
    # the lifting rules: a call whose arguments are not JSON is dropped from every tier's
    # answer (docs/gate.md), so LangChain gets neither a tool call nor an invalid one to run
    server.default = Reply.tool_calls([("get_weather", "{not json")])
    model = TieredChatModel(router=make_router(server)).bind_tools([get_weather])
    reply = model.invoke("weather?")
    assert isinstance(reply, AIMessage)
    assert reply.tool_calls == [] and reply.invalid_tool_calls == []
    assert reply.response_metadata["tiered_router"]["escalated"] is True


class Forecast(BaseModel):
    city: str
    celsius: float


def test_with_structured_output_gates_the_schema(server: ScriptedServer) -> None:
    server.script([Reply.json({"city": "Oslo"})], model="fast-model")  # missing celsius
    server.script([Reply.json({"city": "Oslo", "celsius": 4.5})], model="frontier-model")
    model = TieredChatModel(router=make_router(server))
    result = model.with_structured_output(Forecast).invoke("Oslo forecast")
    assert result == Forecast(city="Oslo", celsius=4.5)
    rf = server.requests[0].body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "Forecast"
    raw = model.with_structured_output(Forecast, include_raw=True).invoke("again")
    assert isinstance(raw, dict) and raw["parsed"] is None and raw["parsing_error"] is not None


def test_with_structured_output_json_mode_and_function_calling(server: ScriptedServer) -> None:
    server.script([Reply.json({"a": 1})], model="fast-model")
    model = TieredChatModel(router=make_router(server))
    assert model.with_structured_output(
        {"title": "x", "type": "object"}, method="json_mode"
    ).invoke("x") == {"a": 1}
    assert server.requests[-1].body["response_format"] == {"type": "json_object"}
    server.script([Reply.tool_calls([("Forecast", {"city": "Bergen", "celsius": 9})])])
    forecast = model.with_structured_output(Forecast, method="function_calling").invoke("Bergen")
    assert forecast == Forecast(city="Bergen", celsius=9)


def test_lazy_import_from_the_integrations_package() -> None:
    assert LazyChatModel is TieredChatModel


def load_example(name: str) -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_script_runs_against_the_local_server(
    server: ScriptedServer, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:

    path = policy_file(server, tmp_path / "policy.yaml")
    server.default = weather_agent_reply
    assert load_example("langgraph_agent").main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "answer: It is 21 °C (69.8 °F) in Oslo." in out
    assert "step 0: fast" in out and "step 2: fast" in out
    summary = json.loads(out.split("task: ", 1)[1])
    assert summary["task_id"] == "weather-demo" and summary["steps"] == 3
    assert len(server.requests) == 3
