"""One reader of tool calls written as text, two policies: strict (gate), tolerant (dialect).

Every format both policies read is checked through both on right calls, and on text that is
not a call (or not only calls); then what tells the two apart.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered_router.calls._prompted import read_tool_calls, split_tool_calls
from tiered_router.calls._text import parse_text_tool_calls
from tiered_router.turn import ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)
RANGE = ToolSpec(
    name="math_range",
    parameters={"type": "object", "properties": {"from": {"type": "integer"}}},
)
TOOLS = [WEATHER, RANGE]
PARIS = [("get_weather", {"city": "Paris"})]
BOTH = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo", "unit": "C"})]

# formats both policies read, each with the calls it holds
SHARED = [
    ('[get_weather(city="Paris")]', PARIS),
    ("get_weather(city='Paris')", PARIS),
    ('get_weather("Paris")', PARIS),  # positional, in declared order
    ("functions.get_weather(city='Paris')", PARIS),
    ('[get_weather(city="Paris"), get_weather(city="Oslo", unit="C")]', BOTH),
    ('(get_weather(city="Paris"), get_weather(city="Oslo", unit="C"))', BOTH),
    ('get_weather(city="Paris")\nget_weather(city="Oslo", unit="C")', BOTH),
    ("math_range(from=3)", [("math_range", {"from": 3})]),  # a Python keyword as a name
    ('get_weather(city="Paris", unit=null)', [("get_weather", {"city": "Paris", "unit": None})]),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', PARIS),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', PARIS),
    ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', PARIS),
    (
        '[{"name": "get_weather", "arguments": {"city": "Paris"}},'
        ' {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}]',
        BOTH,
    ),
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}', PARIS),
    (
        '{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
        PARIS,
    ),
    ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', PARIS),
    ('```python\n[get_weather(city="Paris")]\n```', PARIS),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', PARIS),
    (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}'
        "</tool_call>",
        BOTH,
    ),
]

# text neither policy reads as calls
NEITHER = [
    "",
    "The weather in Paris is mild.",
    '{"name": "Ada", "age": 36}',  # JSON that is not a call
    "[send_email(to='x')]",  # an undeclared tool
    '{"name": "send_email", "arguments": {}}',
    "get_weather(**kwargs)",
    "get_weather('Paris', 'C', 'extra')",  # more positionals than parameters
    "[]",
]


def _pairs(calls: Any) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in calls or ()]


@pytest.mark.parametrize(("text", "expected"), SHARED)
def test_both_policies_read_the_shared_formats(text: str, expected: list[Any]) -> None:
    strict = parse_text_tool_calls(text, TOOLS)
    assert strict is not None, text
    assert _pairs(strict) == expected
    assert [c.id for c in strict] == [f"text_call_{i}" for i in range(len(expected))]
    rest, tolerant = split_tool_calls(text, TOOLS, id_prefix="r7_")
    assert _pairs(tolerant) == expected
    assert rest == ""  # the reply was only calls
    assert [c.id for c in tolerant] == [f"r7_{i}" for i in range(len(expected))]


@pytest.mark.parametrize("text", NEITHER)
def test_neither_policy_reads_other_text(text: str) -> None:
    assert parse_text_tool_calls(text, TOOLS) is None
    assert split_tool_calls(text, TOOLS) == (text, [])
    assert read_tool_calls(text, TOOLS) == []


def test_where_the_policies_differ() -> None:
    # a tagged call to an undeclared tool: the dialect passes it on for the gate to reject,
    # the gate's own reading does not take it as a call
    tagged = '<tool_call>{"name": "send_email", "arguments": {}}</tool_call>'
    assert _pairs(read_tool_calls(tagged, TOOLS)) == [("send_email", {})]
    assert parse_text_tool_calls(tagged, TOOLS) is None
    # text around the tags: kept by the dialect, not a pure call for the gate
    around = 'Sure.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert split_tool_calls(around, TOOLS)[0] == "Sure."
    assert _pairs(split_tool_calls(around, TOOLS)[1]) == PARIS
    assert parse_text_tool_calls(around, TOOLS) is None
    # unreadable tagged arguments: kept as written by the dialect, so the gate says why
    broken = '<tool_call>{"name": "get_weather", "arguments": {"city": Paris}}</tool_call>'
    assert [c.arguments for c in read_tool_calls(broken, TOOLS)] == ['{"city": Paris}']
    # a value that is not a literal: the gate judges it as written, the dialect leaves it
    variable = "get_weather(city=paris)"
    assert _pairs(parse_text_tool_calls(variable, TOOLS)) == [("get_weather", {"city": "paris"})]
    assert read_tool_calls(variable, TOOLS) == []
    # Hermes-style prefixes without closing tags are read by the gate
    assert _pairs(parse_text_tool_calls('<|python_tag|>get_weather(city="Paris")', TOOLS)) == PARIS
    # single-quoted JSON (a Python literal) is read by the dialect
    single = "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}"
    assert _pairs(read_tool_calls(single, TOOLS)) == PARIS
