from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import RoutePath
from routerkit import ADD, Slept, make_policy, tracked

from tiered_router import MemorySink, Router, Turn
from tiered_router.exceptions import AllTiersFailed, GateFailed, StreamInterrupted
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import CompletionChunk

CHEAP_GATE = {"checks": ["non_empty", "not_truncated", "no_refusal"]}


def turn(**kw: Any) -> Turn:
    return Turn([{"role": "user", "content": "Say hi."}], **kw)


def router(server: ScriptedServer, **kw: Any) -> Router:
    slept = Slept()
    sinks = kw.pop("sinks", ())
    return tracked(Router(make_policy(server, **kw), sleep=slept, asleep=slept.asleep, sinks=sinks))


def test_cheap_gate_streams_fast_draft_straight_through(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.text("hello there, friend")], model="fast-model")
    stream = path.start(router(server, gate=CHEAP_GATE), turn())
    assert stream.decision.tier == "fast"
    assert stream.tier == "fast" and stream.escalated is False
    chunks = path.read(stream)
    assert "".join(c.text for c in chunks) == "hello there, friend"
    assert len([c for c in chunks if c.text]) > 1  # really streamed, not one blob
    result = stream.result
    assert result.tier == "fast" and result.completion.text == "hello there, friend"
    assert result.trace.attempts[0].verdict is not None
    assert result.trace.attempts[0].verdict.passed
    assert server.requests[0].body["stream"] is True


def test_whole_draft_gate_buffers_and_escalates(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"answer": 42})], model="frontier-model")
    stream = path.start(router(server), turn(response_format={"type": "json_object"}))
    assert stream.tier == "frontier" and stream.escalated is True
    text = "".join(c.text for c in path.read(stream))
    assert json.loads(text) == {"answer": 42}  # the failed fast draft never reached the caller
    assert stream.result.trace.escalations == ("gate_failed",)
    assert stream.result.escalated


def test_empty_live_draft_is_still_escalated(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.empty()], model="fast-model")
    server.script([Reply.text("frontier text")], model="frontier-model")
    chunks, stream = path.stream(router(server, gate=CHEAP_GATE), turn())
    assert "".join(c.text for c in chunks) == "frontier text"
    assert stream.result.tier == "frontier"
    assert stream.result.trace.escalations == ("gate_failed",)


def test_error_before_first_chunk_is_retried(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.status(429, retry_after=1), Reply.text("ok then")], model="fast-model")
    chunks, stream = path.stream(router(server, gate=CHEAP_GATE), turn())
    assert "".join(c.text for c in chunks) == "ok then"
    assert [a.error is None for a in stream.result.trace.attempts] == [False, True]


def test_break_after_first_chunk_raises_in_band(server: ScriptedServer, path: RoutePath) -> None:
    sink = MemorySink()
    server.script([Reply.broken_sse()], model="fast-model")
    stream = path.start(router(server, gate=CHEAP_GATE, sinks=[sink]), turn())
    seen: list[CompletionChunk] = []
    with pytest.raises(StreamInterrupted) as info:
        path.read(stream, into=seen)
    assert "".join(c.text for c in seen)  # some text had reached the caller
    assert info.value.trace is not None
    assert info.value.attempts[-1].error is not None
    assert len(sink.traces) == 1 and sink.traces[-1].attempts[-1].error is not None


def test_all_tiers_failing_raises_before_any_chunk(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.status(400)], model="fast-model")
    server.script([Reply.status(400)], model="frontier-model")
    with pytest.raises(AllTiersFailed) as info:
        path.start(router(server), turn())
    assert len(info.value.attempts) == 2


def test_gate_failure_raises_before_any_chunk_when_policy_says_raise(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.bad_json()], model="frontier-model")
    r = router(server, escalation={"when_frontier_fails_gate": "raise"})
    with pytest.raises(GateFailed):
        path.start(r, turn(response_format={"type": "json_object"}))


def test_streamed_tool_calls_are_gated(server: ScriptedServer, path: RoutePath) -> None:
    tools = [ADD]
    server.script([Reply.tool_calls([("add", {"a": "one"})])], model="fast-model")
    server.script([Reply.tool_calls([("add", {"a": 1, "b": 2})])], model="frontier-model")
    _chunks, stream = path.stream(router(server), turn(tools=tools))
    result = stream.result
    assert result.tier == "frontier"
    assert json.loads(result.completion.tool_calls[0].arguments) == {"a": 1, "b": 2}
    assert "tool_arguments" in result.trace.attempts[0].verdict.failed_checks  # type: ignore[union-attr]


def test_turn_deadline_bounds_a_live_stream(path: RoutePath) -> None:
    clock = [0.0]
    with ScriptedServer() as srv:
        srv.script([Reply.text("one two three four five six")], model="fast-model")
        r = tracked(Router(make_policy(srv, gate=CHEAP_GATE), clock=lambda: clock[0]))
        stream = path.start(r, turn(), deadline_s=10.0)
        clock[0] = 11.0  # the caller was slow: the turn's deadline passes mid-stream
        with pytest.raises(StreamInterrupted) as info:
            path.read(stream)
        assert info.value.attempts[-1].error is not None
        assert info.value.attempts[-1].error["type"] == "BackendTimeout"


@pytest.mark.anyio
async def test_closing_a_stream_early_closes_the_upstream(server: ScriptedServer) -> None:
    server.script([Reply.text("a b c d e f g h", chunks=8)], model="fast-model")
    stream = router(server, gate=CHEAP_GATE).astream(turn())
    seen = ""
    async with stream:
        async for chunk in stream:
            seen += chunk.text
            if seen:
                break
    assert seen == "a "
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.result
    # the server is free for the next request on a fresh connection
    server.script([Reply.text("next")], model="fast-model")
    follow = router(server, gate=CHEAP_GATE).stream(turn())
    with follow:
        assert "".join(c.text for c in follow) == "next"
    assert follow.result.tier == "fast"
