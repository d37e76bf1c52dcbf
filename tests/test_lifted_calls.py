"""A fast draft whose whole text is tool calls comes back to the caller as real tool calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from routerkit import doubles_policy

from tiered_router import Completion, MemorySink, Router, ToolCall, Turn
from tiered_router.engine._machine import LIFTED_TEXT_CALLS
from tiered_router.testing import ScriptedBackend

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def _policy(**gate: Any) -> dict[str, Any]:
    return doubles_policy(scoring={"type": "heuristic", "threshold": 1.0}, gate=gate)


def _turn() -> Turn:
    return Turn(
        [{"role": "user", "content": "What's the weather in Paris, in celsius?"}], tools=[WEATHER]
    )


FRONTIER_CALL = Completion(
    tool_calls=(ToolCall(id="x", name="get_weather", arguments='{"city": "Paris"}'),),
    finish_reason="tool_calls",
)


@pytest.mark.parametrize(
    "text",
    [
        "[get_weather(city='Paris', unit='celsius')]",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
        "</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
        '<invoke name="get_weather"><parameter name="city">Paris</parameter>'
        '<parameter name="unit">celsius</parameter></invoke>',
    ],
)
def test_a_right_text_call_comes_back_as_a_tool_call(text: str) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", [Completion(text=text, finish_reason="stop")])
    frontier = ScriptedBackend("frontier", [])
    router = Router(_policy(), backends={"fast": fast, "frontier": frontier}, sinks=[sink])
    result = router.complete(_turn())
    assert result.tier == "fast" and not result.escalated
    completion = result.completion
    assert completion.text == "" and completion.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"})
    ]
    assert LIFTED_TEXT_CALLS in sink.traces[-1].attempts[0].conversions


def test_a_wrong_text_call_escalates_and_nothing_is_lifted_from_it() -> None:
    fast = ScriptedBackend("fast", [Completion(text="[get_weather(city='Paris', unit='kelvin')]")])
    frontier = ScriptedBackend("frontier", [FRONTIER_CALL])
    router = Router(_policy(), backends={"fast": fast, "frontier": frontier})
    result = router.complete(_turn())
    assert result.tier == "frontier" and result.escalated
    assert result.completion.tool_calls == FRONTIER_CALL.tool_calls
    assert result.trace.attempts[0].verdict is not None
    assert result.trace.attempts[0].verdict.failed_checks == ("tool_call_in_text",)
    assert '"kelvin" is not one of' in result.trace.attempts[0].verdict.reasons[0]
    assert LIFTED_TEXT_CALLS not in result.trace.attempts[0].conversions


def test_with_text_tool_calls_off_the_text_is_judged_as_text() -> None:
    fast = ScriptedBackend("fast", [Completion(text="[get_weather(city='Paris')]")])
    frontier = ScriptedBackend("frontier", [FRONTIER_CALL])
    router = Router(_policy(text_tool_calls=False), backends={"fast": fast, "frontier": frontier})
    result = router.complete(_turn())
    assert result.tier == "frontier"
    first = result.trace.attempts[0]
    assert LIFTED_TEXT_CALLS not in first.conversions
    assert first.verdict is not None and "tool_call_in_text" in first.verdict.failed_checks


@pytest.mark.anyio
async def test_a_buffered_stream_replays_the_lifted_calls() -> None:
    text = "[get_weather(city='Paris', unit='celsius')]"
    fast = ScriptedBackend("fast", [Completion(text=text, finish_reason="stop")])
    router = Router(_policy(), backends={"fast": fast, "frontier": ScriptedBackend("frontier")})
    stream = router.astream(_turn())
    chunks = [chunk async for chunk in stream]
    assert "".join(c.text for c in chunks) == ""
    names = [d.name for c in chunks for d in c.tool_calls]
    assert names == ["get_weather"]
    assert stream.result.completion.tool_calls[0].name == "get_weather"
