"""The drop-in clients (TieredOpenAI, AsyncTieredOpenAI, wrap_openai) on the scripted upstream."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from routerkit import make_policy as shared_policy

from tiered_router import AllTiersFailed, MemorySink, RoutedResult
from tiered_router.exceptions import StreamInterrupted
from tiered_router.openai import AsyncTieredOpenAI, TieredOpenAI, UnknownModel, wrap_openai
from tiered_router.testing import Reply, ScriptedServer

SECRET = "sk-test-SECRET-0123456789"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hi."}]


def make_policy(upstream: ScriptedServer, **overrides: Any) -> dict[str, Any]:
    """The shared two-tier policy (tests/routerkit.py), without retries."""
    return shared_policy(upstream, api_key=SECRET, retries=(0, 0), **overrides)


@pytest.fixture
def tiered(server: ScriptedServer) -> Iterator[Callable[[], TieredOpenAI]]:
    """Build sync clients on the scripted server; close them after the test."""
    made: list[TieredOpenAI] = []

    def make() -> TieredOpenAI:
        made.append(TieredOpenAI(make_policy(server)))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_sync_create_returns_a_real_chat_completion(server: ScriptedServer) -> None:
    server.script([Reply.text("hi there")], model="fast-model")
    sink = MemorySink()
    with TieredOpenAI(make_policy(server), sinks=[sink]) as client:
        resp = client.chat.completions.create(model="auto", messages=MESSAGES)
    assert isinstance(resp, ChatCompletion)
    assert resp.choices[0].message.content == "hi there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.total_tokens > 0
    route = resp.tiered_router  # type: ignore[attr-defined]
    assert route["tier"] == "fast" and route["escalated"] is False
    assert route["trace"]["attempts"][0]["backend"] == "fast"
    assert isinstance(client.last_result, RoutedResult)
    assert client.last_result.trace is sink.traces[-1]
    assert resp.model_dump()["tiered_router"]["tier"] == "fast"


def test_escalation_is_visible_on_the_response(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"answer": 4})], model="frontier-model")
    client = tiered()
    resp = client.chat.completions.create(
        model="auto", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content or "") == {"answer": 4}
    route = resp.tiered_router
    assert route["tier"] == "frontier" and route["escalated"] is True
    assert route["escalations"] == ["gate_failed"] and route["decided_tier"] == "fast"


def test_unknown_kwargs_pass_through_and_sentinels_are_dropped(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    client = tiered()
    client.chat.completions.create(
        model="auto",
        messages=MESSAGES,
        seed=7,
        top_p=0.5,
        temperature=openai.NOT_GIVEN,
        extra_body={"tiered_router": {"step": 2}, "custom_knob": 3},
    )
    body = server.requests[0].body
    assert body["seed"] == 7 and body["top_p"] == 0.5 and body["custom_knob"] == 3
    assert "temperature" not in body and "tiered_router" not in body
    assert client.last_result is not None and client.last_result.trace.turn_id


def test_tool_calls_come_back_as_sdk_objects(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    ]
    server.script([Reply.tool_calls([("search", {"q": "x"})])], model="fast-model")
    resp = tiered().chat.completions.create(model="auto", messages=MESSAGES, tools=tools)
    (call,) = resp.choices[0].message.tool_calls or []
    assert call.function.name == "search"
    assert json.loads(call.function.arguments) == {"q": "x"}
    assert resp.choices[0].finish_reason == "tool_calls"


def test_model_pins_a_tier_and_signals_apply(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    client = tiered()
    pinned = client.chat.completions.create(model="frontier", messages=MESSAGES)
    assert pinned.tiered_router["tier"] == "frontier"
    assert pinned.tiered_router["rule"] == "pinned"
    by_backend = client.chat.completions.create(model="frontier-model", messages=MESSAGES)
    assert by_backend.tiered_router["tier"] == "frontier"
    final = client.chat.completions.create(
        model="auto", messages=MESSAGES, extra_body={"tiered_router": {"final": True}}
    )
    assert final.tiered_router["rule"] == "final-answer"
    with pytest.raises(UnknownModel, match="auto, fast, frontier"):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(ValueError, match="n=1"):
        client.chat.completions.create(model="auto", messages=MESSAGES, n=2)


def test_pinned_fast_still_escalates_on_gate_failure(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    server.script([Reply.empty()], model="fast-model")
    resp = tiered().chat.completions.create(model="fast", messages=MESSAGES)
    route = resp.tiered_router
    assert route["decided_tier"] == "fast" and route["tier"] == "frontier"
    assert route["escalated"] is True


def test_sync_stream(server: ScriptedServer, tiered: Callable[[], TieredOpenAI]) -> None:
    server.script([Reply.text("hello streaming world", chunks=3)], model="fast-model")
    client = tiered()
    with client.chat.completions.create(
        model="auto", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as stream:
        assert stream.tiered_router["tier"] == "fast"
        chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello streaming world"
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish[-1].tiered_router["trace"]["tier"] == "fast"
    assert client.last_result is not None and client.last_result.completion.text == text


def test_closing_a_stream_early_closes_the_upstream(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    slow = Reply.text("one two three four five six", chunks=6, chunk_delay_s=0.05)
    server.script([slow], model="frontier-model")
    client = tiered()
    with client.chat.completions.create(model="frontier", messages=MESSAGES, stream=True) as s:
        first = next(iter(s))
    assert first.choices[0].delta.role == "assistant"
    again = client.chat.completions.create(model="auto", messages=MESSAGES)
    assert again.choices[0].message.content == "ok"


def test_stream_failure_before_first_chunk_raises_from_create(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    server.script([Reply.status(500)], model="fast-model")
    server.script([Reply.status(500)], model="frontier-model")
    with pytest.raises(AllTiersFailed):
        tiered().chat.completions.create(model="auto", messages=MESSAGES, stream=True)


def test_stream_failure_after_first_chunk_raises_from_iterator(
    server: ScriptedServer, tiered: Callable[[], TieredOpenAI]
) -> None:
    server.script([Reply.broken_sse("drop", content="a partial answer")], model="frontier-model")
    stream = tiered().chat.completions.create(model="frontier", messages=MESSAGES, stream=True)
    seen: list[str] = []
    with pytest.raises(StreamInterrupted):
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen)


@pytest.mark.anyio
async def test_async_create_and_stream(server: ScriptedServer) -> None:
    server.script([Reply.text("async hi")], model="fast-model")
    server.script([Reply.text("async stream", chunks=2)], model="fast-model")
    async with AsyncTieredOpenAI(make_policy(server)) as client:
        resp = await client.chat.completions.create(model="auto", messages=MESSAGES)
        assert isinstance(resp, ChatCompletion)
        assert resp.choices[0].message.content == "async hi"
        stream = await client.chat.completions.create(model="auto", messages=MESSAGES, stream=True)
        chunks = [c async for c in stream]
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "async stream"
    assert client.last_result is not None and client.last_result.tier == "fast"


@pytest.mark.anyio
async def test_async_stream_escalates_before_first_chunk(server: ScriptedServer) -> None:
    server.script([Reply.empty()], model="fast-model")
    server.script([Reply.text("frontier answer")], model="frontier-model")
    client = AsyncTieredOpenAI(make_policy(server))
    stream = await client.chat.completions.create(model="auto", messages=MESSAGES, stream=True)
    assert stream.tiered_router["tier"] == "frontier"
    assert stream.tiered_router["escalated"] is True
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert text == "frontier answer"
    await client.close()


def test_wrap_openai_routes_auto_and_passes_the_rest_through(server: ScriptedServer) -> None:
    inner = openai.OpenAI(base_url=server.base_url, api_key="inner-key", max_retries=0)
    client = wrap_openai(inner, make_policy(server))
    routed = client.chat.completions.create(model="auto", messages=MESSAGES)
    assert routed.tiered_router["tier"] == "fast"
    direct = client.chat.completions.create(model="other-model", messages=MESSAGES, seed=1)
    assert direct.model == "other-model" and "tiered_router" not in direct.model_dump()
    assert server.requests[-1].headers["authorization"] == "Bearer inner-key"
    assert [m.id for m in client.models.list()][-1] == "scripted"  # other attributes delegate
    assert client.last_result is not None and client.last_result.tier == "fast"
    client.router.close()
    inner.close()


@pytest.mark.anyio
async def test_wrap_async_openai(server: ScriptedServer) -> None:
    inner = openai.AsyncOpenAI(base_url=server.base_url, api_key="inner-key", max_retries=0)
    client = wrap_openai(inner, make_policy(server))
    routed = await client.chat.completions.create(model="frontier", messages=MESSAGES)
    assert routed.tiered_router["tier"] == "frontier"
    direct = await client.chat.completions.create(model="elsewhere", messages=MESSAGES)
    assert direct.model == "elsewhere"
    await client.router.aclose()
    await inner.close()
