"""One reader of tool calls written as text, two entry points: strict (gate), tolerant (dialect).

Every format both read is checked through both on right calls, and on text that is not a
call (or not only calls, or breaks a lifting rule); then what tells the two apart (syntax
only), and the reasons the rules give.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered_router.calls._prompted import read_tool_calls, split_tool_calls
from tiered_router.calls._text import parse_text_tool_calls, read_calls
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
PARIS_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
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
    # an example in a fence: shown, not called (no format here asks for a fence)
    '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    '```python\n[get_weather(city="Paris")]\n```',
    # prose around the calls, or the calls inside reasoning
    'Sure.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    '<think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    "</think>It is sunny.",
    # a tagged call to a tool not offered, or with arguments that do not parse
    '<tool_call>{"name": "send_email", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": Paris}}</tool_call>',
    "get_weather(city=paris)",  # a value that is not a literal
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


def test_where_the_policies_differ_syntax_only() -> None:
    # single-quoted JSON (a Python literal) is read by the tolerant entry point only
    single = "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}"
    assert _pairs(read_tool_calls(single, TOOLS)) == PARIS
    assert parse_text_tool_calls(single, TOOLS) is None
    # so is a last <tool_call> tag left unclosed after closed ones
    unclosed = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}'
    )
    assert _pairs(read_tool_calls(unclosed, TOOLS)) == BOTH
    assert parse_text_tool_calls(unclosed, TOOLS) is None
    # the rules are the same: a tool not offered is refused by both
    assert (
        read_tool_calls(
            unclosed.replace(
                '"get_weather", "arguments": {"city": "O', '"x", "arguments": {"city": "O'
            ),
            TOOLS,
        )
        == []
    )
    # Hermes-style prefixes without closing tags are read by both
    assert _pairs(parse_text_tool_calls('<|python_tag|>get_weather(city="Paris")', TOOLS)) == PARIS
    assert _pairs(read_tool_calls('<|python_tag|>get_weather(city="Paris")', TOOLS)) == PARIS


def test_the_rules_refuse_with_a_reason() -> None:
    def refused(text: str, **rules: Any) -> str | None:
        return read_calls(text, TOOLS, **rules).refused

    assert "'send_email', a tool not offered" in str(refused("send_email(to='x')"))
    named = {"type": "function", "function": {"name": "math_range"}}
    assert "tool_choice names 'math_range'" in str(refused(PARIS_TEXT, tool_choice=named))
    assert read_calls(PARIS_TEXT, TOOLS, tool_choice="none") == read_calls("", TOOLS)
    two = PARIS_TEXT + "\n" + PARIS_TEXT
    assert "parallel_tool_calls is false" in str(refused(two, parallel_tool_calls=False))
    assert refused(two) is None and len(read_calls(two, TOOLS).calls) == 2

    def no_paris(spec: ToolSpec, args: dict[str, Any]) -> str | None:
        return "no Paris" if args.get("city") == "Paris" else None

    assert "get_weather': no Paris" in str(refused(PARIS_TEXT, validate=no_paris))
    # arguments that are not JSON data once read: NaN, infinity, bytes
    for text in ("get_weather(city=1e999)", PARIS_TEXT.replace('"Paris"', "NaN")):
        assert "are not JSON" in str(refused(text)), text
    single = "{'name': 'get_weather', 'arguments': {'city': b'Paris'}}"
    assert "are not JSON" in str(read_calls(single, TOOLS, tolerant=True).refused)
    # a leading think block is reasoning; the calls after it are read
    reading = read_calls("<think>Paris.</think>" + PARIS_TEXT, TOOLS)
    assert reading.thinking == "Paris." and reading.calls == (("get_weather", {"city": "Paris"}),)
