"""Degenerate drafts and nested JSON: every reader returns, nothing raises from deep inside.

A fast model can loop on one fragment for its whole output, and a client can send any
arguments. Nested JSON used to end a routed turn in a ``RecursionError``, and unclosed tags
made the text-call readers rescan the rest of the text from every tag (11.5 s for 120 KB).
These tests run drafts of 200,000 characters through the readers; how their time grows
with size is printed by ``benchmarks/bench_hostile_drafts.py`` (no timing is asserted here).
"""

from __future__ import annotations

import random

import pytest
from routerkit import doubles_policy, make_policy, tracked

from tiered_router import Completion, Router, Turn
from tiered_router._limits import JSONTooDeep
from tiered_router.agent_signals import is_tool_error, tool_call_signature
from tiered_router.calls._prompted import split_tool_calls
from tiered_router.calls._protocol import render_tool_call
from tiered_router.calls._text import parse_text_tool_calls
from tiered_router.gate import QualityGate, lift_text_tool_calls
from tiered_router.gate._schema import parse_json
from tiered_router.policy import GateConfig
from tiered_router.testing import Reply, ScriptedBackend, ScriptedServer
from tiered_router.turn import ToolCall

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SIZE = 200_000
FRAGMENTS = [
    "<tool_call>",
    '<tool_call>{"name": "get_weather", "arguments": ',
    "```json\n<tool_call>",
    "<function=get_weather>",
    "<function=get_weather><parameter=city>",
    '<invoke name="get_weather">',
    "<arg_key>city</arg_key>",
    '{"a": [',
    "[",
    "get_weather(city=",
    '"arguments": {',
]
DEEP = '{"a": ' * 5_000 + "1" + "}" * 5_000


def _turn() -> Turn:
    return Turn([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])


def _draft(fragment: str) -> str:
    return (fragment * (SIZE // len(fragment) + 1))[:SIZE]


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_looping_draft_is_judged_as_text_and_never_read_as_calls(fragment: str) -> None:
    draft = Completion(text=_draft(fragment))
    assert parse_text_tool_calls(draft.text, [WEATHER]) is None
    assert lift_text_tool_calls(draft, _turn()) is draft
    verdict = QualityGate(GateConfig().checks).evaluate(draft, _turn())
    # one fragment over and over: a loop (repetition) or a call written as text
    assert set(verdict.failed_checks) & {"repetition", "tool_call_in_text"}


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_the_prompted_tools_reader_returns_on_a_looping_reply(fragment: str) -> None:
    text = _draft(fragment)
    rest, calls = split_tool_calls(text, [WEATHER])
    # an unreadable reply is left whole to the gate; a tagged one whose arguments do not
    # parse keeps them verbatim, so the gate says why they fail
    assert (rest, calls) == (text, []) or all(c.name == "get_weather" for c in calls)


def test_a_routed_turn_whose_draft_is_nested_json_escalates_instead_of_raising() -> None:
    fast = ScriptedBackend("fast", [Completion(text='{"a": [' * 8_000, finish_reason="stop")])
    frontier = ScriptedBackend("frontier", [Completion(text="It is sunny in Paris.")])
    policy = doubles_policy(
        scoring={"type": "heuristic", "threshold": 1.0},
        gate={"checks": ["non_empty", "json_schema", "tool_arguments", "repetition"]},
    )
    router = Router(policy, backends={"fast": fast, "frontier": frontier})
    result = router.complete(_turn())
    assert result.completion.text == "It is sunny in Paris."
    assert result.tier == "frontier" and result.escalated


def test_deeply_nested_arguments_are_a_value_error_with_a_reason() -> None:
    with pytest.raises(JSONTooDeep, match="nested deeper than 128"):
        ToolCall(id="c", name="get_weather", arguments=DEEP).parsed_arguments()
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json(DEEP)
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json("[" * 100_000)  # deeper than the fast parser reads: the standard one tries
    draft = Completion(
        tool_calls=(ToolCall(id="c", name="get_weather", arguments=DEEP),),
        finish_reason="tool_calls",
    )
    verdict = QualityGate(GateConfig().checks).evaluate(draft, _turn())
    assert verdict.failed_checks[0] == "tool_arguments"
    assert "nested deeper than 128" in verdict.reasons[0]


def test_agent_signals_and_the_prompted_history_read_nested_json_as_text() -> None:
    call = {"function": {"name": "get_weather", "arguments": DEEP}}
    assert tool_call_signature(call) == f"get_weather({DEEP})"
    assert is_tool_error({"role": "tool", "content": "[" * 9_000}) is False
    assert render_tool_call("get_weather", DEEP).count('{\\"a\\": ') == 5_000


def test_a_schema_nested_too_deeply_is_the_callers_fault_refused_with_the_turn() -> None:
    # deeper than any schema engine here walks: refused while the turn is built (a 400 for
    # the caller), so no gate, backend or breaker ever sees it
    from tiered_router import InvalidRequest

    schema: dict[str, object] = {"type": "object"}
    for _ in range(100):
        schema = {"type": "object", "properties": {"a": schema}}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    with pytest.raises(InvalidRequest, match="nested deeper than 128") as info:
        Turn([{"role": "user", "content": "x"}], tools=[tool])
    assert (info.value.param, info.value.code) == (
        "tools[0].function.parameters",
        "schema_too_deep",
    )
    rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}
    with pytest.raises(InvalidRequest, match="nested deeper than 128") as info:
        Turn([{"role": "user", "content": "x"}], response_format=rf)
    assert (info.value.param, info.value.code) == ("response_format", "schema_too_deep")


# -- seeded fuzz: random drafts through the router, nothing untyped escapes -----------------

_FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<function=get_weather>", "</function>", "<parameter=city>",
    "</parameter>", '{"name": "get_weather", "arguments": {"city": "Paris"}}', "[", "]", "{",
    "}", "(", ")", "get_weather(", "city=", '"Paris"', "\ud800", "\x00", "```", "```json\n",
    "<think>", "</think>", "[TOOL_CALLS]", "[ARGS]", "functools", "Action:",
    '<invoke name="get_weather">', "</invoke>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "\n", " ", "é", "NaN", "1e999", "'", '"', "\\",
]  # fmt: skip


def _random_draft(rng: random.Random) -> Completion:
    def text() -> str:
        return "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 60)))

    if rng.random() < 0.5:
        reason = rng.choice(["stop", "length", "tool_calls", "content_filter"])
        return Completion(text=text(), finish_reason=reason)
    arguments = [
        text,
        lambda: '{"city": ' * rng.randint(1, 3000),
        lambda: "[" * rng.randint(1, 5000),
        lambda: '{"city": "Paris"}',
        lambda: "",
    ]
    calls = tuple(
        ToolCall(
            id=f"c{i}",
            name=rng.choice(["get_weather", "other", "", "get.weather", "x" * 300]),
            arguments=rng.choice(arguments)(),
        )
        for i in range(rng.randint(1, 4))
    )
    return Completion(text=text() if rng.random() < 0.3 else "", tool_calls=calls)


def _fuzz_router(draft: Completion) -> Router:
    fast = ScriptedBackend("fast", [draft])
    frontier = ScriptedBackend("frontier", [Completion(text="It is sunny.")])
    policy = doubles_policy(
        scoring={"type": "heuristic", "threshold": 1.0},
        gate={"checks": list(GateConfig().checks)},
    )
    return Router(policy, backends={"fast": fast, "frontier": frontier})


def test_random_drafts_return_a_completion_with_its_trace() -> None:
    rng = random.Random(7)
    for _ in range(1000):
        result = _fuzz_router(_random_draft(rng)).complete(_turn())
        # the fast draft passed (returned as drafted, or its text calls lifted) or escalated
        assert result.tier in ("fast", "frontier")
        assert result.trace.attempts and result.trace.attempts[0].backend == "fast"
        if result.escalated:
            assert result.completion.text == "It is sunny."


@pytest.mark.anyio
async def test_random_drafts_stream_to_the_end() -> None:
    rng = random.Random(11)
    for _ in range(300):
        chunks = [chunk async for chunk in _fuzz_router(_random_draft(rng)).astream(_turn())]
        assert chunks


# -- over real HTTP: the scripted OpenAI-compatible server, the real backend ------------------


@pytest.mark.parametrize("draft", ['{"a": [' * 8_000, "<function=get_weather>" * 10_000])
def test_over_http_a_looping_draft_escalates_and_the_turn_completes(
    server: ScriptedServer, draft: str
) -> None:
    server.script([Reply.text(draft)], model="fast-model")
    server.script([Reply.text("It is sunny in Paris.")], model="frontier-model")
    router = tracked(Router(make_policy(server, scoring={"threshold": 1.0})))
    result = router.complete(_turn())
    assert result.tier == "frontier" and result.escalated
    assert result.completion.text == "It is sunny in Paris."
    fast = result.trace.attempts[0]
    assert fast.verdict is not None and not fast.verdict.passed


@pytest.mark.anyio
async def test_over_http_a_looping_draft_streams_the_frontier_answer(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text('{"a": [' * 8_000)], model="fast-model")
    server.script([Reply.text("It is sunny in Paris.")], model="frontier-model")
    router = tracked(Router(make_policy(server, scoring={"threshold": 1.0})))
    text = "".join([chunk.text async for chunk in router.astream(_turn())])
    assert text == "It is sunny in Paris."
