"""Tool calls written in XML-style tags (Qwen3-Coder, Llama 3.1 user-defined, Claude's XML
tool use, GLM-4.5) and in other families' wrappers (Mistral v11, Phi-4-mini, Command R,
Seed-OSS): read by the gate's strict reader, typed by the schema, judged as calls.

Each format is pinned on right calls (lifted, the gate passes them), on wrong ones (the
gate fails them for what is wrong, not for being text), and on text that is not only calls
(not lifted; ``tool_call_in_text`` fails it when it names a declared tool).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered_router import Completion, QualityGate, Turn
from tiered_router.calls._text import parse_text_tool_calls
from tiered_router.gate import lift_text_tool_calls
from tiered_router.turn import ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "scale": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "where": {"type": ["object", "null"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
)
SEARCH = ToolSpec(name="web.search", parameters={"type": "object"})
TOOLS = [WEATHER, SEARCH]

QWEN = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
)
LLAMA = '<function=get_weather>{"city": "Paris", "days": 3}</function>'
INVOKE = (
    '<function_calls>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    '<parameter name="days">3</parameter>\n</invoke>\n</function_calls>'
)
GLM = (
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
)
PARIS_3 = [("get_weather", {"city": "Paris", "days": 3})]


def _calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    calls = parse_text_tool_calls(text, TOOLS)
    return None if calls is None else [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("text", [QWEN, LLAMA, INVOKE, GLM, "<|python_tag|>" + LLAMA])
def test_each_format_is_read_as_the_calls_it_holds(text: str) -> None:
    assert _calls(text) == PARIS_3


def test_a_glm_call_without_arguments_is_its_name_in_tags() -> None:
    assert _calls("<tool_call>web.search\n</tool_call>") == [("web.search", {})]
    assert _calls("<tool_call>get_time</tool_call>") is None  # not a declared tool
    assert _calls("<tool_call>Paris is sunny</tool_call>") is None


def test_several_calls_and_a_namespaced_tool() -> None:
    two = (
        "<function=get_weather><parameter=city>Paris</parameter></function>\n"
        "<function=web.search><parameter=q>rain</parameter></function>"
    )
    assert _calls(two) == [("get_weather", {"city": "Paris"}), ("web.search", {"q": "rain"})]
    invoke_two = (
        '<invoke name="get_weather"><parameter name="city">Oslo</parameter></invoke>'
        '<invoke name="web_search"><parameter name="q">snow</parameter></invoke>'
    )
    assert _calls(invoke_two) == [("get_weather", {"city": "Oslo"}), ("web.search", {"q": "snow"})]


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("city", "\n  São Paulo \n", "  São Paulo "),  # a string keeps its text, one newline off
        ("city", "42", "42"),  # a declared string is never converted
        ("days", "7", 7),
        ("days", "seven", "seven"),  # not an integer: kept as text for the schema to report
        ("metric", "True", True),
        ("metric", "yes", "yes"),
        ("scale", "1.5", 1.5),
        ("scale", "2", 2),
        ("tags", '["a", "b"]', ["a", "b"]),
        ("tags", "['a', 'b']", ["a", "b"]),  # a Python literal too
        ("where", '{"lat": 1}', {"lat": 1}),
        ("where", "null", None),
        ("where", "somewhere", "somewhere"),
    ],
)
def test_values_are_read_by_the_declared_type(name: str, raw: str, value: Any) -> None:
    params = f"<parameter={name}>{raw}</parameter>"
    if name != "city":
        params = "<parameter=city>Paris</parameter>" + params
    text = f"<function=get_weather>{params}</function>"
    calls = _calls(text)
    assert calls is not None and calls[0][1][name] == value


@pytest.mark.parametrize(
    "text",
    [
        "Let me check. " + LLAMA,  # prose around the call
        LLAMA + "\nDone.",
        '<function=get_time>{"tz": "CET"}</function>',  # a tool that was not declared
        '<invoke name="get_time"><parameter name="tz">CET</parameter></invoke>',
        "<function=get_weather>{not json}</function>",
        "<function=get_weather><parameter=city>Paris</parameter>",  # never closed
        "<function=get_weather><parameter=city>Paris</parameter>junk</function>",
        "<function=get_weather><parameter=city>A</parameter><parameter=city>B</parameter></function>",
        "<tool_call>get_weather Paris</tool_call>",
    ],
)
def test_text_that_is_not_only_calls_is_not_read(text: str) -> None:
    assert _calls(text) is None


def _turn() -> Turn:
    return Turn(
        [{"role": "user", "content": "What's the weather in Paris for 3 days?"}],
        tools=[t.to_openai() for t in TOOLS],
    )


GATE = QualityGate(["json_schema", "tool_arguments", "tool_call_in_text", "argument_grounding"])


@pytest.mark.parametrize("text", [QWEN, LLAMA, INVOKE, GLM])
def test_the_gate_passes_a_right_call_and_the_router_gets_real_tool_calls(text: str) -> None:
    draft = Completion(text=text)
    assert GATE.evaluate(draft, _turn()).passed
    lifted = lift_text_tool_calls(draft, _turn())
    assert lifted.text == "" and lifted.finish_reason == "tool_calls"
    assert [c.name for c in lifted.tool_calls] == ["get_weather"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (QWEN.replace("\n3\n", "\nthree\n"), 'is not of type "integer"'),
        (INVOKE.replace('name="city"', 'name="town"'), '"city" is a required property'),
        (GLM.replace("<arg_value>3<", "<arg_value>3 days<"), 'is not of type "integer"'),
    ],
)
def test_the_gate_fails_a_wrong_call_for_what_is_wrong(text: str, problem: str) -> None:
    # not lifted (its arguments do not validate): judged as text, the reason says why
    assert lift_text_tool_calls(Completion(text=text), _turn()).tool_calls == ()
    verdict = GATE.evaluate(Completion(text=text), _turn())
    assert verdict.failed_checks == ("tool_call_in_text",)
    assert "cannot be made" in verdict.reasons[0] and problem in verdict.reasons[0]


@pytest.mark.parametrize(
    "text",
    [
        "I will call it now: " + LLAMA,
        "Calling:\n" + INVOKE + "\nok",
        'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"} Done.',
        'I would send {"tool_name": "get_weather", "parameters": {"city": "Paris"}} now.',
    ],
)
def test_a_tagged_call_inside_prose_is_a_call_written_as_text(text: str) -> None:
    verdict = GATE.evaluate(Completion(text=text), _turn())
    assert verdict.failed_checks == ("tool_call_in_text",)


def test_call_markup_that_is_not_read_as_calls_fails_whatever_it_names() -> None:
    for text in ("Use <function=get_time> for that.", '<tool_call>{"name": "get_time"}'):
        assert lift_text_tool_calls(Completion(text=text), _turn()).tool_calls == ()
        verdict = GATE.evaluate(Completion(text=text), _turn())
        assert verdict.failed_checks == ("tool_call_in_text",), text
    # a call to a tool the turn does not offer, as the whole answer: refused, and said so
    verdict = GATE.evaluate(Completion(text='<function=get_time>{"tz": "CET"}</function>'), _turn())
    assert "'get_time', a tool not offered" in verdict.reasons[0]
    # markup quoted inside a leading reasoning block is not the answer's
    thought = "<think>Maybe <function=get_time>?</think>It is sunny in Paris."
    assert GATE.evaluate(Completion(text=thought), _turn()).passed


# -- other families' wrappers: Mistral v11, Phi-4-mini, Command R, Seed-OSS ------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[TOOL_CALLS]get_weather{"city": "Paris", "days": 3}', PARIS_3),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}', PARIS_3),
        ('[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris", "days": 3}', PARIS_3),
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]web.search[ARGS]{"q": "x"}',
            [("get_weather", {"city": "Paris"}), ("web.search", {"q": "x"})],
        ),
        ('functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]', PARIS_3),
        (
            'Action: ```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris", '
            '"days": 3}}]\n```',
            PARIS_3,
        ),
        (
            "<seed:tool_call><function=get_weather><parameter=city>Paris</parameter>"
            "<parameter=days>3</parameter></function></seed:tool_call>",
            PARIS_3,
        ),
    ],
)
def test_other_families_wrappers_are_read(text: str, expected: list[Any]) -> None:
    assert _calls(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS]get_weather{"city": "Paris"} and then some prose',
        '[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}',  # not declared
        "[TOOL_CALLS]get_weather[ARGS]{not json}",
        "functools.reduce(get_weather, cities)",  # Python, not Phi-4-mini's wrapper
        'Action: I will call get_weather{"city": "Paris"}',
    ],
)
def test_other_families_wrappers_hold_only_calls(text: str) -> None:
    assert _calls(text) is None


def test_a_leading_think_block_is_reasoning_and_the_calls_after_it_are_lifted() -> None:
    text = "<think>\nThe user wants Paris, 3 days.\n</think>\n\n" + GLM
    lifted = lift_text_tool_calls(Completion(text=text), _turn())
    assert [(c.name, json.loads(c.arguments)) for c in lifted.tool_calls] == PARIS_3
    assert lifted.text == "" and lifted.reasoning == "The user wants Paris, 3 days."
    assert GATE.evaluate(Completion(text=text), _turn()).passed
    # a reasoning summary the provider sent is kept
    kept = lift_text_tool_calls(Completion(text=text, reasoning="summary"), _turn())
    assert kept.reasoning == "summary"
    # an unclosed block, or thinking after the calls, is not only calls
    assert _calls("<think>still thinking " + GLM) is None
    assert _calls(GLM + "<think>done</think>") is None


def test_a_glm_call_inside_prose_is_a_call_written_as_text() -> None:
    verdict = GATE.evaluate(Completion(text="I will check. " + GLM), _turn())
    assert verdict.failed_checks == ("tool_call_in_text",)
