from __future__ import annotations

import json

import pytest

from tiered_router.calls._prompted import lift_prompted_calls, split_tool_calls
from tiered_router.calls._prompted import read_tool_calls as parse_text_tool_calls
from tiered_router.calls._protocol import (
    render_tool_call,
    render_tool_prompt,
    render_tool_result,
)
from tiered_router.turn import Completion, ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    description="Current   weather\nfor a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
TOOLS = [WEATHER, TIME]


def calls(text: str, tools: list[object] | None = None) -> list[tuple[str, object]]:
    found = parse_text_tool_calls(text, tools if tools is not None else TOOLS)  # type: ignore[arg-type]
    out: list[tuple[str, object]] = []
    for c in found:
        try:
            out.append((c.name, json.loads(c.arguments)))
        except ValueError:
            out.append((c.name, c.arguments))
    return out


def test_prompt_lists_tools_protocol_and_choice() -> None:
    prompt = render_tool_prompt(
        TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}
    )
    assert prompt.startswith("# Tools\n")
    assert '- get_weather {"type":"object"' in prompt
    assert ": Current weather for a city." in prompt
    assert '- get_time {"type":"object","properties":{}}' in prompt
    assert '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>' in prompt
    assert "You must call the tool get_time now." in prompt
    required = render_tool_prompt(["x"], tool_choice="required", parallel_tool_calls=False)
    assert "at least one tool" in required and "at most one tool" in required
    assert "must" not in render_tool_prompt(["x"], tool_choice="auto")


def test_render_history_pieces_round_trip() -> None:
    text = render_tool_call("get_weather", '{"city": "Paris"}')
    assert text == '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert calls(text) == [("get_weather", {"city": "Paris"})]
    assert render_tool_call("f", {"a": 1}).endswith('"arguments": {"a": 1}}</tool_call>')
    assert '"arguments": "{bad"' in render_tool_call("f", "{bad")
    assert render_tool_call("f", None).endswith('"arguments": {}}</tool_call>')
    assert render_tool_result("18C", name="get_weather", call_id="c1") == (
        '<tool_result name="get_weather" id="c1">18C</tool_result>'
    )
    assert render_tool_result("ok") == "<tool_result>ok</tool_result>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            [("get_weather", {"city": "Paris"})],
        ),
        (  # two tagged calls, parameters for arguments, a missing closing tag at the end
            '<tool_call>{"name": "get_time", "parameters": {}}</tool_call>\n'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}',
            [("get_time", {}), ("get_weather", {"city": "Oslo"})],
        ),
        (  # arguments as a JSON string
            '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}'
            "\n</tool_call>",
            [("get_weather", {"city": "Rome"})],
        ),
        (
            '{"name": "get_weather", "arguments": {"city": "Lyon"}}',
            [("get_weather", {"city": "Lyon"})],
        ),
        (
            '[{"name": "get_time", "arguments": {}},'
            ' {"name": "get_weather", "arguments": {"city": "A"}}]',
            [("get_time", {}), ("get_weather", {"city": "A"})],
        ),
        (
            '{"tool_calls": [{"id": "x", "type": "function", "function": '
            '{"name": "get_weather", "arguments": "{\\"city\\": \\"Nice\\"}"}}]}',
            [("get_weather", {"city": "Nice"})],
        ),
        (
            "{'name': 'get_weather', 'arguments': {'city': 'Bern'}}",
            [("get_weather", {"city": "Bern"})],
        ),
        (
            '[get_weather(city="Paris"), get_time()]',
            [("get_weather", {"city": "Paris"}), ("get_time", {})],
        ),
        ('get_weather("Paris", unit="C")', [("get_weather", {"city": "Paris", "unit": "C"})]),
        ('functions.get_weather(city="Kyiv")', [("get_weather", {"city": "Kyiv"})]),
    ],
)
def test_common_formats_are_read(text: str, expected: list[tuple[str, object]]) -> None:
    assert calls(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "It is sunny in Paris.",
        '{"name": "get_weather"}',  # a JSON answer, not a call: no arguments key
        '{"name": "Ada", "arguments": {}}',  # names no declared tool
        '{"answer": 4}',
        "[1, 2, 3]",
        "[]",
        "print(city='Paris')",  # not a declared tool
        "get_weather(**opts)",
        "get_weather(city=lookup())",  # not a literal
        'get_weather("a", "b", "c")',  # more positional arguments than properties
        "(1 + 2)",
        "get_weather(",
        "x.y().z(a=1)",
        '["a", get_weather(city="x")]',
        '```python\nget_weather(city="Riga")\n```',  # an example in a fence
        'Let me check.\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',  # not offered
        '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>',
        "<tool_call>{'name': 'get_time', oops</tool_call>",
        # a fence inside a tag: only Command R's Action: asks for a fence
        '<tool_call>\n```json\n{"name": "get_time", "arguments": {}}\n```\n</tool_call>',
        # prose in a comment among the calls, in Python syntax or a Python-literal object
        '[get_weather(city="Paris")  # the memo asks for this\n]',
        "<tool_call>{'name': 'get_time',  # as the document says\n 'arguments': {}}</tool_call>",
    ],
)
def test_text_that_is_not_a_call(text: str) -> None:
    assert calls(text) == []


def test_a_reply_made_only_of_calls_loses_its_text_and_keeps_its_thinking() -> None:
    reply = (
        '<think>Time first.</think>\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    rest, found = split_tool_calls(reply, TOOLS, id_prefix="call_ab_")
    assert rest == ""
    assert [(c.id, c.name, c.arguments) for c in found] == [("call_ab_0", "get_time", "{}")]
    # the same, through the backend's path: the thinking becomes the reasoning
    done = lift_prompted_calls(Completion(text=reply), TOOLS, id_prefix="c_")
    assert done.reasoning == "Time first." and done.finish_reason == "tool_calls"


def test_a_reply_that_breaks_a_rule_stays_text() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    named = {"type": "function", "function": {"name": "get_time"}}
    assert split_tool_calls(text, TOOLS, tool_choice=named) == (text, [])
    assert split_tool_calls(text, TOOLS, tool_choice="none") == (text, [])
    assert split_tool_calls(text, TOOLS, validate=lambda spec, args: "no") == (text, [])
    assert split_tool_calls(text + text, TOOLS, parallel_tool_calls=False) == (text + text, [])
    assert len(split_tool_calls(text + text, TOOLS)[1]) == 2


def test_unreadable_tag_leaves_the_text() -> None:
    text = "<tool_call>call the weather tool please</tool_call>"
    assert split_tool_calls(text, TOOLS) == (text, [])
    assert split_tool_calls("<tool_call>[1, 2]</tool_call>", TOOLS)[1] == []


def test_no_tools_means_no_calls() -> None:
    text = '{"name": "get_weather", "arguments": {}}'
    assert split_tool_calls(text, None) == (text, [])
    assert parse_text_tool_calls(text, ["get_weather"])[0].id == "call_0"
