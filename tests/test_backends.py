from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tiered_router import _http
from tiered_router.backends import (
    PRESETS,
    BackendRegistry,
    CompletionRequest,
    OpenAICompatBackend,
    StreamingBackend,
    backend_types,
    build_backend,
    local_diffusion,
    mercury2,
    openai_backend,
    register_backend_type,
    resolve_config,
)
from tiered_router.backends._errors import scrub, translate
from tiered_router.backends._openai_convert import reasoning_text, server_message
from tiered_router.backends.presets import backend_kwargs
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendError,
    BackendRateLimited,
    BackendResponseError,
    BackendStatusError,
    BackendTimeout,
    CapabilityError,
    PolicyError,
)
from tiered_router.policy import BackendConfig, Price
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import CompletionChunk, Turn, assemble

KEY = "sk-test-secret-0123456789"
USER = [{"role": "user", "content": "hi"}]
TOOL = {
    "type": "function",
    "function": {"name": "get", "parameters": {"type": "object", "properties": {}}},
}


def req(**fields: Any) -> CompletionRequest:
    fields.setdefault("messages", USER)
    fields.setdefault("timeout_s", 5.0)
    return CompletionRequest(**fields)


_open: list[OpenAICompatBackend] = []


def backend(server: ScriptedServer, **options: Any) -> OpenAICompatBackend:
    options.setdefault("model", "m")
    options.setdefault("api_key", KEY)
    be = OpenAICompatBackend("be", base_url=server.base_url, **options)
    _open.append(be)
    return be


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def sse(*events: Any) -> Reply:
    body = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
    return Reply.raw(200, body + "data: [DONE]\n\n", {"content-type": "text/event-stream"})


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> Any:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": choices,
        **top,
    }


def body(message: dict[str, Any], **top: Any) -> Reply:
    data = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
        ],
        **top,
    }
    return Reply.raw(200, json.dumps(data))


@pytest.fixture
def mock() -> Iterator[Callable[..., tuple[OpenAICompatBackend, list[_http.Request]]]]:
    """A backend over httpx2.MockTransport; returns (backend, captured requests)."""
    made: list[OpenAICompatBackend] = []

    def make(
        reply: Callable[[_http.Request], _http.Response] | None = None, **options: Any
    ) -> tuple[OpenAICompatBackend, list[_http.Request]]:
        seen: list[_http.Request] = []

        def handler(request: _http.Request) -> _http.Response:
            seen.append(request)
            if reply is not None:
                return reply(request)
            return _http.Response(
                200,
                json={
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "ok"},
                        }
                    ],
                },
            )

        client = _http.build_client(transport=_http.MockTransport(handler))
        options.setdefault("model", "m")
        options.setdefault("api_key", KEY)
        be = OpenAICompatBackend(
            "mock", base_url="http://mock.test/v1", http_client=client, **options
        )
        made.append(be)
        return be, seen

    yield make
    for be in made:
        be.close()


# -- _http ------------------------------------------------------------------------------------


def test_parse_retry_after_prefers_ms_then_seconds() -> None:
    assert _http.parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert _http.parse_retry_after({"retry-after": "2"}) == 2.0
    assert _http.parse_retry_after({"retry-after": "0.25"}) == 0.25
    assert _http.parse_retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0


def test_parse_retry_after_http_date_uses_the_clock() -> None:
    headers = {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}
    epoch = 1792567680.0  # 2026-10-21 07:28:00 UTC
    assert _http.parse_retry_after(headers, now=lambda: epoch - 7) == pytest.approx(7.0)
    assert _http.parse_retry_after(headers, now=lambda: epoch + 60) == 0.0


@pytest.mark.parametrize(
    "headers", [None, {}, {"retry-after": "later"}, {"retry-after": "-3"}, {"x": "1"}]
)
def test_parse_retry_after_missing_or_malformed_is_none(headers: dict[str, str] | None) -> None:
    assert _http.parse_retry_after(headers) is None


def test_parse_retry_after_reads_httpx_headers_case_insensitively() -> None:
    assert _http.parse_retry_after(_http.Headers({"Retry-After-Ms": "250"})) == 0.25


def test_build_client_pools_and_uses_the_transport() -> None:
    got: list[_http.Request] = []

    def handler(request: _http.Request) -> _http.Response:
        got.append(request)
        return _http.Response(204)

    with _http.build_client(headers={"x-a": "1"}, transport=_http.MockTransport(handler)) as c:
        assert c.get("http://h.test/").status_code == 204
    assert got[0].headers["x-a"] == "1"
    assert got[0].extensions["timeout"]["connect"] == _http.DEFAULT_CONNECT_TIMEOUT_S


@pytest.mark.anyio
async def test_build_async_client_uses_the_transport() -> None:
    transport = _http.MockTransport(lambda request: _http.Response(200, text="pong"))
    async with _http.build_async_client(timeout_s=None, transport=transport) as client:
        response = await client.get("http://h.test/")
    assert response.text == "pong"


# -- request mapping (MockTransport) ----------------------------------------------------------


def test_params_merge_request_wins_and_unknown_fields_ride_in_the_body(mock: Any) -> None:
    be, seen = mock(
        params={"temperature": 0.2, "max_tokens": 50, "top_k": 5},
        extra_body={"a": 1, "b": 1},
        headers={"x-team": "agents"},
    )
    be.complete(
        req(
            params={
                "temperature": 0.7,
                "seed": 3,
                "extra_body": {"b": 2},
                "extra_headers": {"x-call": "1"},
                "stream": True,
                "model": "other",
                "timeout": 99,
            },
            timeout_s=3.5,
        )
    )
    sent = json.loads(seen[0].content)
    assert sent["model"] == "m"
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 50 and sent["seed"] == 3
    assert sent["top_k"] == 5 and sent["a"] == 1 and sent["b"] == 2
    assert "stream" not in sent and "timeout" not in sent
    assert seen[0].headers["x-team"] == "agents" and seen[0].headers["x-call"] == "1"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert seen[0].extensions["timeout"]["read"] == 3.5


def test_a_call_without_extra_headers_sends_the_backends_own_every_time(mock: Any) -> None:
    # the headers of such a call are built once and reused: a call with its own
    # extra_headers in between must not leak into the next one, nor change it
    be, seen = mock(headers={"x-team": "agents"})
    for params in ({}, {"extra_headers": {"X-Team": "ops", "x-call": "1"}}, {}):
        be.complete(req(params=params))
    first, own, last = (dict(r.headers) for r in seen)
    assert first["x-team"] == last["x-team"] == "agents" and "x-call" not in last
    assert own["x-team"] == "ops" and own["x-call"] == "1"
    assert first == last and first["authorization"] == f"Bearer {KEY}"
    assert first["accept"] == "application/json"


def test_backend_timeout_applies_when_the_request_has_none(mock: Any) -> None:
    be, seen = mock(timeout_s=7.0)
    be.complete(req(timeout_s=None))
    assert seen[0].extensions["timeout"]["read"] == 7.0


def test_one_call_is_one_try(mock: Any) -> None:
    be, seen = mock(lambda r: _http.Response(503, json={"error": {"message": "busy"}}))
    with pytest.raises(BackendStatusError) as info:
        be.complete(req())
    assert len(seen) == 1
    assert info.value.status_code == 503 and info.value.retryable


def test_turn_from_openai_round_trips_extra_body(mock: Any) -> None:
    be, seen = mock()
    turn = Turn.from_openai(
        model="auto",
        messages=USER,
        tools=[TOOL],
        response_format={"type": "json_object"},
        temperature=0.3,
        extra_body={"custom": True, "tiered_router": {"final": True}},
    )
    be.complete(CompletionRequest.from_turn(turn, timeout_s=2))
    sent = json.loads(seen[0].content)
    assert sent["custom"] is True and "tiered_router" not in sent
    assert sent["tools"][0]["function"]["name"] == "get"
    assert sent["response_format"] == {"type": "json_object"}


def test_no_key_for_another_host_never_falls_back_to_openai_key(
    mock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-leak")
    be, seen = mock(api_key=None)
    be.complete(req())
    assert seen[0].headers["authorization"] == "Bearer none"


def test_shared_http_clients_are_used_and_left_open() -> None:
    def handler(request: _http.Request) -> _http.Response:
        return _http.Response(
            200,
            json={
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "shared"}}]
            },
        )

    client = _http.build_client(transport=_http.MockTransport(handler))
    be = OpenAICompatBackend(
        "s", model="m", base_url="http://mock.test/v1", api_key=KEY, http_client=client
    )
    assert be.complete(req()).text == "shared"
    be.close()
    assert not client.is_closed
    client.close()


@pytest.mark.anyio
async def test_shared_async_http_client_is_left_open() -> None:
    def handler(request: _http.Request) -> _http.Response:
        return _http.Response(
            200,
            json={
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "shared"}}]
            },
        )

    client = _http.build_async_client(transport=_http.MockTransport(handler))
    be = OpenAICompatBackend(
        "s", model="m", base_url="http://mock.test/v1", api_key=KEY, async_http_client=client
    )
    assert (await be.acomplete(req())).text == "shared"
    await be.aclose()
    assert not client.is_closed
    await client.aclose()


# -- complete / stream against the scripted server ---------------------------------------------


def test_complete_text_and_usage(server: ScriptedServer) -> None:
    server.script([Reply.text("hello", usage={"prompt_tokens": 12, "completion_tokens": 3})])
    done = backend(server).complete(req())
    assert done.text == "hello" and done.finish_reason == "stop"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (12, 3)
    assert done.model == "m" and done.backend == "be"
    assert server.requests[-1].body["messages"] == USER


@pytest.mark.anyio
async def test_acomplete_tool_calls(server: ScriptedServer) -> None:
    server.script([Reply.tool_calls([("get", {"q": 1}, "call_a"), ("put", '{"x": ')])])
    be = backend(server)
    done = await be.acomplete(req(tools=[TOOL]))
    await be.aclose()
    assert done.finish_reason == "tool_calls"
    assert [c.name for c in done.tool_calls] == ["get", "put"]
    assert done.tool_calls[0].id == "call_a" and done.tool_calls[1].id
    assert done.tool_calls[0].parsed_arguments() == {"q": 1}
    assert done.tool_calls[1].arguments == '{"x": '  # invalid JSON is kept for the gate
    assert server.requests[-1].body["tools"] == [TOOL]


def test_stream_asks_for_usage_and_assembles(server: ScriptedServer) -> None:
    server.script(
        [Reply.text("streamed answer", usage={"prompt_tokens": 4, "completion_tokens": 2})]
    )
    chunks = list(backend(server).stream(req()))
    assert server.requests[-1].body["stream_options"] == {"include_usage": True}
    assert all(isinstance(c, CompletionChunk) for c in chunks)
    done = assemble(chunks, backend="be")
    assert done.text == "streamed answer" and done.finish_reason == "stop"
    assert done.usage.output_tokens == 2


def test_stream_keeps_the_callers_stream_options(server: ScriptedServer) -> None:
    server.script([Reply.text("x")])
    list(backend(server).stream(req(params={"stream_options": {"include_usage": False}})))
    assert server.requests[-1].body["stream_options"] == {"include_usage": False}


@pytest.mark.anyio
async def test_astream_tool_call_deltas(server: ScriptedServer) -> None:
    server.script([Reply.tool_calls([("get", {"q": "long value"})], chunks=3)])
    be = backend(server)
    chunks = [c async for c in be.astream(req(tools=[TOOL]))]
    await be.aclose()
    assert sum(len(c.tool_calls) for c in chunks) > 1
    done = assemble(chunks)
    assert done.tool_calls[0].name == "get"
    assert done.tool_calls[0].parsed_arguments() == {"q": "long value"}


def test_close_then_reuse(server: ScriptedServer) -> None:
    server.script([Reply.text("one"), Reply.text("two")])
    be = backend(server)
    assert be.complete(req()).text == "one"
    be.close()
    assert be.complete(req()).text == "two"


def test_async_backend_survives_a_new_event_loop(server: ScriptedServer) -> None:
    server.script([Reply.text("first"), Reply.text("second")])
    be = backend(server)

    async def call(close: bool) -> str:
        text = (await be.acomplete(req())).text
        if close:
            await be.aclose()
        return text

    assert asyncio.run(call(close=False)) == "first"
    assert asyncio.run(call(close=True)) == "second"  # was: RuntimeError: Event loop is closed
    gc.collect()  # an unclosed pool of the first loop would warn here (warnings are errors)


def test_cached_tokens_refusal_and_reasoning_from_a_body(server: ScriptedServer) -> None:
    server.script(
        [
            body(
                {"content": None, "refusal": "I can't", "reasoning_content": "thought"},
                usage={
                    "prompt_tokens": 100,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 80},
                },
            )
        ]
    )
    done = backend(server).complete(req())
    assert done.usage.cached_input_tokens == 80 and done.usage.input_tokens == 100
    assert done.refusal == "I can't" and done.text == ""
    assert done.reasoning == "thought"


def test_mercury_reasoning_summary_at_top_level_of_chunks(server: ScriptedServer) -> None:
    server.script(
        [
            sse(
                chunk({"role": "assistant", "content": ""}),
                chunk({}, reasoning_summary={"content": "Plan: add. ", "status": "complete"}),
                chunk({"content": "4"}, "stop"),
                chunk(
                    None,
                    usage={
                        "prompt_tokens": 9,
                        "completion_tokens": 1,
                        "prompt_tokens_details": {"cached_tokens": 4},
                    },
                ),
            )
        ]
    )
    chunks = list(backend(server).stream(req()))
    done = assemble(chunks)
    assert done.reasoning == "Plan: add. " and done.text == "4"
    assert done.usage.cached_input_tokens == 4


@pytest.mark.anyio
async def test_mercury_reasoning_summary_on_a_completion(server: ScriptedServer) -> None:
    server.script([body({"content": "4"}, reasoning_summary={"content": "added"})])
    be = backend(server)
    done = await be.acomplete(req())
    await be.aclose()
    assert done.reasoning == "added"


def test_whole_answer_as_message_in_one_chunk_is_read(server: ScriptedServer) -> None:
    whole = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "all at once"}}],
    }
    server.script([sse(whole)])
    be = backend(server, dialect={"profile": "openai", "unfinished_streams": True})
    assert assemble(be.stream(req())).text == "all at once"
    strict = backend(server)  # a stream with no finish_reason reads as a cut connection
    server.script([sse(whole)])
    with pytest.raises(BackendConnectionError, match="no finish_reason"):
        assemble(strict.stream(req()))


def test_reasoning_text_shapes() -> None:
    assert reasoning_text({"content": [{"text": "a"}, {"text": "b"}]}) == "a\nb"
    assert reasoning_text({"summary": "s"}) == "s"
    assert reasoning_text(True) is None and reasoning_text("") is None


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.status(429, retry_after=2), 2.0),
        (Reply.status(429, retry_after_ms=1500), 1.5),
        (Reply.status(429), None),
    ],
)
def test_429_is_rate_limited_with_retry_after(
    server: ScriptedServer, reply: Reply, expected: float | None
) -> None:
    server.script([reply])
    with pytest.raises(BackendRateLimited) as info:
        backend(server).complete(req())
    assert info.value.retry_after_s == expected
    assert info.value.backend == "be" and "429" in str(info.value)
    assert "scripted 429 error" in str(info.value)


@pytest.mark.anyio
async def test_500_is_a_status_error_in_streams_too(server: ScriptedServer) -> None:
    server.script([Reply.status(500, message="boom", retry_after=1)])
    be = backend(server)
    with pytest.raises(BackendStatusError) as info:
        async for _ in be.astream(req()):
            pass
    await be.aclose()
    assert info.value.status_code == 500 and info.value.retry_after_s == 1.0
    assert "HTTP 500: boom" in str(info.value)
    assert info.value.__cause__ is not None


def test_400_with_mercury_list_message_is_readable(server: ScriptedServer) -> None:
    error = {
        "error": {
            "type": "invalid_request_error",
            "message": [
                {"loc": ["body", "temperature"], "msg": "Input should be >= 0.5", "type": "ge"},
                {"loc": ["body", "stop"], "msg": "at most 4 items"},
            ],
        }
    }
    server.script([Reply.raw(400, json.dumps(error))])
    with pytest.raises(BackendStatusError) as info:
        backend(server).complete(req())
    assert info.value.status_code == 400 and not info.value.retryable
    assert "body.temperature: Input should be >= 0.5; body.stop: at most 4 items" in str(info.value)


def test_server_message_shapes() -> None:
    assert server_message({"detail": [{"loc": ["body", "x"], "msg": "bad"}]}) == "body.x: bad"
    assert server_message("plain text") == "plain text"
    assert server_message(None) == ""
    assert len(server_message("x" * 5000)) == 500


def test_timeout(server: ScriptedServer) -> None:
    server.script([Reply.slow(2.0, then=Reply.text("late"))])
    with pytest.raises(BackendTimeout) as info:
        backend(server).complete(req(timeout_s=0.2))
    assert info.value.retryable


def test_dropped_connection(server: ScriptedServer) -> None:
    server.script([Reply.drop()])
    with pytest.raises(BackendConnectionError):
        backend(server).complete(req())


@pytest.mark.anyio
async def test_connection_dropped_mid_stream(server: ScriptedServer) -> None:
    server.script([Reply.broken_sse("drop")])
    be = backend(server)
    got: list[CompletionChunk] = []
    with pytest.raises(BackendConnectionError):
        async for c in be.astream(req()):
            got.append(c)
    await be.aclose()
    assert got  # bytes arrived before the drop: the caller must know it was cut


def test_invalid_sse_chunk_is_a_response_error(server: ScriptedServer) -> None:
    server.script([Reply.broken_sse("invalid")])
    with pytest.raises(BackendResponseError, match="unreadable"):
        list(backend(server).stream(req()))


def test_in_band_error_event(server: ScriptedServer) -> None:
    server.script([Reply.broken_sse("error")])
    with pytest.raises(BackendResponseError, match="scripted stream error"):
        list(backend(server).stream(req()))


def test_cut_json_body(server: ScriptedServer) -> None:
    server.script([Reply.broken_sse()])  # stream=false: a 200 whose JSON is cut in half
    with pytest.raises(BackendResponseError, match="unreadable response body"):
        backend(server).complete(req())


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (Reply.raw(200, "<html>gateway</html>", {"content-type": "text/html"}), "got text"),
        (Reply.raw(200, "{}"), "without choices"),
        (body({"content": "x", "tool_calls": [{"id": "c", "function": {}}]}), "no function name"),
    ],
)
def test_unusable_2xx_body(server: ScriptedServer, reply: Reply, match: str) -> None:
    server.script([reply])
    with pytest.raises(BackendResponseError, match=match):
        backend(server).complete(req())


def test_stream_without_events_or_finish(server: ScriptedServer) -> None:
    server.script([sse(), sse(chunk({"content": "cut"}))])
    be = backend(server)
    with pytest.raises(BackendResponseError, match="no chat.completion.chunk"):
        list(be.stream(req()))
    with pytest.raises(BackendConnectionError, match="finish_reason"):
        list(be.stream(req()))


def test_api_key_never_in_repr_or_errors(server: ScriptedServer) -> None:
    server.script([Reply.status(401, message=f"Incorrect API key provided: {KEY}")])
    be = backend(server)
    assert KEY not in repr(be) and "127.0.0.1" in repr(be) and "'m'" in repr(be)
    with pytest.raises(BackendStatusError) as info:
        be.complete(req())
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert KEY not in str(info.value.__cause__)


def test_connection_refused(server: ScriptedServer) -> None:
    url = server.base_url
    server.stop()
    be = OpenAICompatBackend("gone", model="m", base_url=url, api_key=KEY)
    with pytest.raises(BackendConnectionError) as info:
        be.complete(req())
    assert "connection failed" in str(info.value)


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (_http.TimeoutException("pool timed out"), BackendTimeout, "timed out"),
        (_http.TransportError(f"reset by {KEY}"), BackendConnectionError, "reset by ***"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), BackendResponseError, "unreadable"),
        (KeyError("odd"), BackendError, "KeyError"),
    ],
)
def test_translate_other_failures(exc: BaseException, kind: type, text: str) -> None:
    err = translate(exc, backend="b")
    scrub(err, KEY)
    assert type(err) is kind and text in str(err) and KEY not in str(err)


def test_missing_openai_credentials_is_a_backend_error() -> None:
    be = OpenAICompatBackend("o", model="m")  # OpenAI's default host, no key anywhere
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        be.complete(req())


def test_content_parts_and_delta_reasoning(server: ScriptedServer) -> None:
    server.script(
        [
            body({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            sse(chunk({"reasoning_content": "hmm", "content": "x"}, "stop")),
        ]
    )
    be = backend(server)
    assert be.complete(req()).text == "ab"
    assert assemble(be.stream(req())).reasoning == "hmm"


# -- the mercury-2 dialect ---------------------------------------------------------------------


def test_mercury_dialect_shapes_what_is_sent_and_records_it(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script([Reply.text("a"), Reply.text("b")])
    be = backend(server, dialect="mercury-2", extra_body={"diffusing": True})
    params = {
        "temperature": 0.0,
        "stop": ["1", "2", "3", "4", "5", "6"],
        "max_completion_tokens": 90_000,
        "reasoning_effort": "instant",
        "realtime": True,
        "diffusing": True,
        "reasoning_summary_wait": True,
    }
    messages = [{"role": "developer", "content": "be brief"}, *USER]
    with caplog.at_level(logging.DEBUG, logger="tiered_router.backends.openai_compat"):
        be.complete(req(messages=messages, params=params))
        done = be.complete(req(messages=messages, params=params))
    sent = server.requests[-1].body
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["temperature"] == 0.5
    assert sent["stop"] == ["1", "2", "3", "4"]
    assert sent["max_tokens"] == 50_000 and "max_completion_tokens" not in sent
    assert sent["reasoning_effort"] == "instant" and sent["realtime"] is True
    assert sent["reasoning_summary_wait"] is True
    assert "diffusing" not in sent
    # every change is a recorded conversion, each time, not a warning logged once
    assert set(done.conversions) >= {
        "messages[0]: developer -> system",
        "temperature: 0.0 -> 0.5 (the server accepts 0.5..1.0)",
        "stop: sent the first 4 of 6, the rest applied to the reply",
        "max_tokens: 90000 -> 50000 (the server accepts 1..50000)",
    }
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert messages[0]["role"] == "developer"  # the caller's messages are not mutated


def test_mercury_dialect_leaves_valid_values_alone(server: ScriptedServer) -> None:
    server.script([Reply.text("a")])
    done = backend(server, dialect="mercury-2").complete(
        req(params={"temperature": 0.75, "max_tokens": 10, "stop": ["x"]})
    )
    sent = server.requests[-1].body
    assert (sent["temperature"], sent["max_tokens"], sent["stop"]) == (0.75, 10, ["x"])
    assert done.conversions == ()


@pytest.mark.parametrize(
    ("params", "sent_value", "conversion"),
    [
        ({"temperature": 0}, ("temperature", 0.5), "temperature: 0 -> 0.5"),
        ({"stop": list("abcde")}, ("stop", list("abcd")), "stop: sent the first 4 of 5"),
        ({"max_tokens": 0}, ("max_tokens", 1), "max_tokens: 0 -> 1"),
    ],
)
def test_out_of_range_values_are_converted_and_recorded_never_refused(
    server: ScriptedServer, params: dict[str, Any], sent_value: tuple[str, Any], conversion: str
) -> None:
    # what strict quirks refused is a recorded conversion: the trace shows what was sent
    server.script([Reply.text("a")])
    done = backend(server, dialect="mercury-2").complete(req(params=params))
    key, value = sent_value
    assert server.requests[-1].body[key] == value
    assert any(c.startswith(conversion) for c in done.conversions), done.conversions


def test_mercury_tool_choice_is_sent_as_auto_or_required(server: ScriptedServer) -> None:
    other = {"type": "function", "function": {"name": "put", "parameters": {}}}
    server.script([Reply.text("a"), Reply.text("b"), Reply.text("c")])
    be = backend(server, dialect="mercury-2")
    named = {"type": "function", "function": {"name": "put"}}
    be.complete(req(tools=[TOOL, other], params={"tool_choice": named}))
    be.complete(req(tools=[TOOL, other], params={"tool_choice": "none"}))
    be.complete(req(tools=[TOOL], params={"tool_choice": "required"}))
    first, second, third = (r.body for r in server.requests)
    assert first["tool_choice"] == "required" and first["tools"] == [other]
    assert "tools" not in second and "tool_choice" not in second
    assert third["tool_choice"] == "required" and third["tools"] == [TOOL]


def test_tool_choice_without_tools_is_not_sent(mock: Any) -> None:
    be, seen = mock()
    be.complete(req(params={"tool_choice": "auto", "parallel_tool_calls": False}))
    sent = json.loads(seen[0].content)
    assert "tool_choice" not in sent and "parallel_tool_calls" not in sent


def test_local_diffusion_is_a_fallback_that_sends_only_what_every_server_takes(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text("x", chunks=1)])
    be = local_diffusion(model="llada", base_url=server.base_url, extra_body={"block_length": 32})
    chunks = list(
        be.stream(req(params={"num_denoising_steps": 8, "max_tokens": 64, "temperature": 0.2}))
    )
    sent = server.requests[-1].body
    assert set(sent) == {"model", "messages", "stream", "max_tokens", "temperature"}
    assert server.requests[-1].headers["authorization"] == "Bearer none"
    done = assemble(chunks)
    assert done.text == "x"
    assert "dropped (not accepted): block_length, num_denoising_steps" in done.conversions


def test_tools_false_raises_capability_error(server: ScriptedServer) -> None:
    be = local_diffusion(model="llada", base_url=server.base_url)
    assert be.supports_tools is False and be.kind == "diffusion"
    with pytest.raises(CapabilityError, match="tools"):
        be.complete(req(tools=[TOOL]))
    with pytest.raises(CapabilityError):
        list(be.stream(req(tools=[TOOL])))
    assert server.requests == []


# -- presets ----------------------------------------------------------------------------------


def test_preset_fills_only_unset_fields() -> None:
    config = BackendConfig(preset="mercury-2", timeout_s=9, price=Price(input_per_mtok=1))
    resolved = resolve_config(config)
    assert resolved.base_url == "https://api.inceptionlabs.ai/v1"
    assert resolved.model == "mercury-2" and resolved.kind == "diffusion"
    assert resolved.price.input_per_mtok == 1 and resolved.price.output_per_mtok == 0
    assert resolved.timeout_s == 9
    assert resolved.latency is not None and resolved.latency.tokens_per_s == 1000
    plain = resolve_config(BackendConfig(preset="mercury-2"))
    assert plain.price == PRESETS["mercury-2"].price
    assert plain.price.cached_input_per_mtok == 0.025


def test_preset_is_inferred_from_the_host() -> None:
    config = BackendConfig(base_url="https://api.inceptionlabs.ai/v1", model="mercury-2")
    kwargs = backend_kwargs("m", config, env={"INCEPTION_API_KEY": KEY})
    assert kwargs["dialect"].name == "mercury-2" and kwargs["kind"] == "diffusion"
    other = backend_kwargs(
        "v", BackendConfig(base_url="http://10.0.0.2:8000/v1", model="q"), env={}
    )
    assert other["dialect"].name == "openai" and other["api_key"] is None


def test_key_from_config_or_env_inside_the_factory() -> None:
    be = build_backend("fast", BackendConfig(preset="mercury-2"), env={"INCEPTION_API_KEY": KEY})
    assert isinstance(be, OpenAICompatBackend) and be.model == "mercury-2"
    assert be.dialect.name == "mercury-2" and be.kind == "diffusion"
    assert be.config is not None and be.config.price.output_per_mtok == 0.75
    explicit = build_backend(
        "fast", BackendConfig(preset="mercury-2", api_key=SecretStr(KEY)), env={}
    )
    assert explicit.model == "mercury-2"


def test_missing_key_names_the_variable_and_the_backend() -> None:
    with pytest.raises(PolicyError) as info:
        build_backend("fast", BackendConfig(preset="mercury-2"), env={})
    assert "INCEPTION_API_KEY" in str(info.value) and "'fast'" in str(info.value)
    assert info.value.field == "backends.fast.api_key"
    with pytest.raises(PolicyError, match="OPENAI_API_KEY"):
        build_backend("big", BackendConfig(model="gpt-5.2", api_key=SecretStr("")), env={})


def test_missing_model_unknown_preset_and_options() -> None:
    # the policy schema rejects these at load time; the factory checks again for configs
    # built without validation
    no_model = BackendConfig.model_construct(type="openai")
    with pytest.raises(PolicyError, match="needs `model`"):
        build_backend("big", no_model, env={"OPENAI_API_KEY": KEY})
    bad_preset = BackendConfig.model_construct(type="openai", preset="mercury-3")
    with pytest.raises(PolicyError, match="known: .*local-diffusion, mercury-2, ollada, openai"):
        build_backend("x", bad_preset, env={})
    with pytest.raises(PolicyError, match="unknown option 'speed'"):
        build_backend(
            "x", BackendConfig(model="m", options={"speed": 1}), env={"OPENAI_API_KEY": KEY}
        )
    with pytest.raises(PolicyError, match="unknown dialect 'odd'"):
        build_backend(
            "x", BackendConfig(model="m", options={"dialect": "odd"}), env={"OPENAI_API_KEY": KEY}
        )


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ({"quirks": "mercury"}, "dialect: mercury-2"),
        ({"strict_quirks": True}, "conversion recorded"),
    ],
)
def test_retired_options_say_what_to_write_instead(option: dict[str, Any], says: str) -> None:
    config = BackendConfig(base_url="http://127.0.0.1:9/v1", model="m", options=option)
    with pytest.raises(PolicyError, match=says) as info:
        build_backend("x", config, env={})
    assert info.value.field == f"backends.x.options.{next(iter(option))}"
    assert "retired" in str(info.value)


def test_options_pick_the_dialect() -> None:
    config = BackendConfig(
        base_url="http://127.0.0.1:9/v1", model="m", options={"dialect": "mercury-2"}
    )
    be = build_backend("x", config, env={})
    assert isinstance(be, OpenAICompatBackend) and be.dialect.max_stop == 4


def test_python_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = mercury2(api_key=KEY, timeout_s=5)
    assert (fast.name, fast.model, fast.kind, fast.timeout_s) == (
        "mercury",
        "mercury-2",
        "diffusion",
        5,
    )
    assert KEY not in repr(fast) and "api.inceptionlabs.ai" in repr(fast)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    big = openai_backend(model="gpt-5.2")
    assert big.base_url is None and big.kind == "autoregressive" and big.supports_tools
    assert "api.openai.com" in repr(big)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(PolicyError, match="OPENAI_API_KEY"):
        openai_backend(model="gpt-5.2")
    local = local_diffusion(model="llada")
    assert local.base_url == "http://127.0.0.1:30000/v1" and not local.supports_tools
    assert isinstance(local, StreamingBackend)


# -- registry ---------------------------------------------------------------------------------


def test_registry_lists_known_types_on_unknown() -> None:
    registry = BackendRegistry()
    with pytest.raises(PolicyError) as info:
        registry.build("x", BackendConfig(type="carrier-pigeon"))
    message = str(info.value)
    assert "unknown backend type 'carrier-pigeon'" in message
    assert "known: openai, replay" in message
    assert info.value.field == "backends.x.type"


def test_registry_register_and_replace() -> None:
    registry = BackendRegistry(defaults=False)
    assert registry.types == ()
    made: list[tuple[str, Any]] = []

    def factory(name: str, config: BackendConfig, /, *, env: Any = None) -> Any:
        made.append((name, env))
        return local_diffusion(name=name, model="x")

    registry.register("fake", factory)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("fake", factory)
    registry.register("fake", factory, replace=True)
    built = registry.build("n", BackendConfig(type="fake"), env={"A": "1"})
    assert built.name == "n" and made == [("n", {"A": "1"})]
    assert "fake" in repr(registry)


def test_default_registry_has_openai_and_refuses_silent_overrides() -> None:
    assert "openai" in backend_types()
    with pytest.raises(ValueError, match="replace=True"):
        register_backend_type("openai", OpenAICompatBackend.from_config)
    with pytest.raises(ValueError, match="non-empty"):
        BackendRegistry().register("", OpenAICompatBackend.from_config)


def test_importing_backends_loads_neither_openai_nor_httpx2() -> None:
    code = (
        "import sys, tiered_router, tiered_router.backends, tiered_router.backends.registry;"
        "print(sorted(m for m in ('openai', 'httpx2') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root)},
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_the_written_out_sdk_parameters_are_the_sdks() -> None:
    import inspect

    from openai.resources.chat.completions import Completions

    from tiered_router.backends._openai_convert import sdk_param_names

    installed = frozenset(inspect.signature(Completions.create).parameters) - {"self"}
    # every name sent top-level is one the SDK sends top-level; a newer SDK may add names
    assert sdk_param_names() <= installed, sorted(sdk_param_names() - installed)
    assert {"model", "messages", "temperature", "tools", "response_format"} <= sdk_param_names()
