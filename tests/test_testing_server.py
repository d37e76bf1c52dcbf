from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import anyio
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam

from tiered_router.testing import RecordedRequest, Reply, ScriptedServer

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def client(server: ScriptedServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        yield c


def _wait_until(predicate: Callable[[], bool]) -> None:
    for _ in range(5000):
        if predicate():
            return
        time.sleep(0.001)
    raise AssertionError("condition not reached")


def _ask(client: openai.OpenAI, model: str = "m", **kwargs: Any) -> Any:
    return client.chat.completions.create(model=model, messages=MESSAGES, **kwargs)


def _collect(stream: Any) -> dict[str, Any]:
    """Fold chat.completion.chunk objects into the parts of one message."""
    content: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    out: dict[str, Any] = {"finish_reason": None, "usage": None, "role": None, "pieces": 0}
    for chunk in stream:
        if chunk.usage is not None:
            out["usage"] = chunk.usage.model_dump()
        for choice in chunk.choices:
            delta = choice.delta
            out["role"] = out["role"] or delta.role
            if delta.content:
                content.append(delta.content)
                out["pieces"] += 1
            if delta.refusal:
                refusal.append(delta.refusal)
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += tc.id or ""
                entry["name"] += (tc.function.name or "") if tc.function else ""
                entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
            if choice.finish_reason:
                out["finish_reason"] = choice.finish_reason
    out["content"] = "".join(content) if content else None
    out["refusal"] = "".join(refusal) if refusal else None
    out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def _from_completion(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message
    return {
        "content": message.content,
        "refusal": message.refusal,
        "tool_calls": [
            {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            for tc in message.tool_calls or []
        ],
        "finish_reason": completion.choices[0].finish_reason,
        "usage": completion.usage.model_dump(),
    }


# -- completions -------------------------------------------------------------------------


def test_text_reply_is_a_full_chat_completion(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script([Reply.text("4")])
    completion = _ask(client, model="fast-model")
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "fast-model"
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content) == ("assistant", "4")
    assert choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    usage = completion.usage
    assert usage.prompt_tokens == len("userWhat is 2 + 2?") // 4
    assert usage.completion_tokens == 1
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_text_reply_with_explicit_usage_and_model(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(
        Reply.text("x", usage={"prompt_tokens": 7, "completion_tokens": 3}, model="served-as")
    )
    completion = _ask(client)
    assert completion.model == "served-as"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 3)
    assert completion.usage.total_tokens == 10


def test_json_and_bad_json(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script([Reply.json({"answer": 4}), Reply.bad_json()])
    assert json.loads(_ask(client).choices[0].message.content) == {"answer": 4}
    bad = _ask(client).choices[0].message.content
    assert bad == '{"answer": 4'
    with pytest.raises(json.JSONDecodeError):
        json.loads(bad)


def test_tool_calls_with_mapping_and_raw_arguments(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(Reply.tool_calls([("search", {"q": "tides"}), ("calc", '{"x": ', "call_fixed")]))
    completion = _ask(client)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    first, second = choice.message.tool_calls
    assert first.type == "function"
    assert first.function.name == "search"
    assert json.loads(first.function.arguments) == {"q": "tides"}
    assert first.id.startswith("call_") and first.id != second.id
    assert (second.id, second.function.name, second.function.arguments) == (
        "call_fixed",
        "calc",
        '{"x": ',
    )


def test_truncated_refusal_empty_repetition(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(
        [
            Reply.truncated("The answer is"),
            Reply.refusal(),
            Reply.empty(),
            Reply.repetition("ab ", 5),
        ]
    )
    truncated = _ask(client).choices[0]
    assert (truncated.message.content, truncated.finish_reason) == ("The answer is", "length")
    refusal = _ask(client).choices[0].message
    assert refusal.refusal == "I'm sorry, but I can't help with that."
    assert refusal.content == refusal.refusal
    empty = _ask(client).choices[0]
    assert (empty.message.content, empty.finish_reason) == ("", "stop")
    assert _ask(client).choices[0].message.content == "ab ab ab ab ab "


# -- errors --------------------------------------------------------------------------------


def test_status_429_carries_retry_after_headers_and_error_body(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(Reply.status(429, retry_after=1.5, retry_after_ms=1500, message="slow down"))
    with pytest.raises(openai.RateLimitError) as info:
        _ask(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "1.5"
    assert info.value.response.headers["retry-after-ms"] == "1500"
    assert info.value.body == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_status_integer_retry_after_and_extra_headers(server: ScriptedServer) -> None:
    server.script(Reply.status(503, retry_after=2, headers={"x-extra": "1"}))
    response = httpx2.post(f"{server.base_url}/chat/completions", json={"model": "m"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.headers["x-extra"] == "1"
    assert response.json()["error"]["type"] == "server_error"


def test_status_500(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(Reply.status(500))
    with pytest.raises(openai.InternalServerError) as info:
        _ask(client)
    assert info.value.status_code == 500
    assert "scripted 500 error" in str(info.value)


def test_slow_reply_times_out_the_client(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(Reply.slow(2.0, then=Reply.text("late")))
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.05).chat.completions.create(model="m", messages=MESSAGES)
    # the server keeps serving other requests meanwhile
    server.script(Reply.text("next"))
    assert _ask(client).choices[0].message.content == "next"


def test_slow_then_defaults_to_server_default(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.default = Reply.text("fallback")
    server.script(Reply.slow(0.01))
    assert _ask(client).choices[0].message.content == "fallback"


@pytest.mark.anyio
async def test_slow_reply_does_not_block_other_requests(server: ScriptedServer) -> None:
    server.script(Reply.slow(60), model="slow")
    server.script(Reply.text("quick"), model="fast")
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="test", max_retries=0, timeout=20
    ) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.chat.completions.create(model="slow", messages=MESSAGES))
            for _ in range(5000):  # wait until the server is sleeping on the slow request
                if server.requests_for("slow"):
                    break
                await anyio.sleep(0.001)
            # a serialising server would time this out after 20 s
            quick = await client.chat.completions.create(model="fast", messages=MESSAGES)
            assert quick.choices[0].message.content == "quick"
            tg.cancel_scope.cancel()
    assert len(server.requests_for("slow")) == 1


def test_drop_is_a_connection_error(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script([Reply.drop(), Reply.drop()])
    with pytest.raises(openai.APIConnectionError) as info:
        _ask(client)
    assert not isinstance(info.value, openai.APITimeoutError)
    with pytest.raises(openai.APIConnectionError):
        _ask(client, stream=True)
    assert _ask(client).choices[0].message.content == "ok"  # the next connection works


def test_raw_reply(server: ScriptedServer) -> None:
    server.script(Reply.raw(200, "not json at all", {"content-type": "text/plain"}))
    response = httpx2.post(f"{server.base_url}/chat/completions", json={"model": "m"})
    assert response.status_code == 200
    assert response.text == "not json at all"
    assert response.headers["content-type"] == "text/plain"


def test_broken_non_stream_is_truncated_json(server: ScriptedServer) -> None:
    server.script(Reply.broken_sse())
    response = httpx2.post(f"{server.base_url}/chat/completions", json={"model": "m"})
    assert response.status_code == 200
    assert response.text.startswith('{"id"')
    with pytest.raises(json.JSONDecodeError):
        response.json()


# -- streaming ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_streamed_text_reassembles_to_the_non_stream_reply(server: ScriptedServer) -> None:
    reply = Reply.text("The answer to 2 + 2 is 4, of course.")
    server.script([reply, reply])
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        whole = await c.chat.completions.create(model="m", messages=MESSAGES)
        stream = await c.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    folded = _collect(chunks)
    assert folded["role"] == "assistant"
    assert folded["pieces"] == 4
    assert {k: folded[k] for k in _from_completion(whole)} == _from_completion(whole)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[-1].choices == []  # the usage chunk comes last


def test_streamed_tool_calls_reassemble_to_the_non_stream_reply(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    reply = Reply.tool_calls(
        [("search", {"query": "weather in Paris"}, "call_a"), ("clock", {}, "call_b")]
    )
    server.script([reply, reply])
    whole = _ask(client)
    stream = _ask(client, stream=True, stream_options={"include_usage": True})
    folded = _collect(stream)
    assert {k: folded[k] for k in _from_completion(whole)} == _from_completion(whole)
    assert [c["name"] for c in folded["tool_calls"]] == ["search", "clock"]


def test_stream_without_usage_option_has_no_usage_chunk(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script([Reply.refusal("no"), Reply.text("one piece", chunks=1)])
    folded = _collect(_ask(client, stream=True))
    assert folded["usage"] is None
    assert (folded["refusal"], folded["content"]) == ("no", "no")
    one = _collect(_ask(client, stream=True))
    assert (one["content"], one["pieces"]) == ("one piece", 1)


def test_stream_with_chunk_delay(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(Reply.text("abcdef", chunks=3).streamed(chunk_delay_s=0.001))
    folded = _collect(_ask(client, stream=True))
    assert (folded["content"], folded["pieces"], folded["finish_reason"]) == ("abcdef", 3, "stop")


def test_raw_sse_framing(server: ScriptedServer) -> None:
    server.script(Reply.text("hi", chunks=1))
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx2.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    assert [json.loads(line[6:])["choices"][0]["delta"] for line in lines[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "hi"},
        {},
    ]


def test_broken_sse_drop_is_a_connection_error(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(Reply.broken_sse("drop", content="partial text before the break"))
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in _ask(client, stream=True):
            received.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(received)  # some content arrived before the break
    assert "partial text before the break".startswith("".join(received))


def test_broken_sse_invalid_data_line(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(Reply.broken_sse("invalid"))
    with pytest.raises(json.JSONDecodeError):
        for _ in _ask(client, stream=True):
            pass


@pytest.mark.anyio
async def test_broken_sse_error_event(server: ScriptedServer) -> None:
    server.script(Reply.broken_sse("error"))
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        stream = await c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIError, match="scripted stream error"):
            async for _ in stream:
                pass


# -- queues and callables -------------------------------------------------------------------


def test_per_model_queues_fall_back_to_any_model_queue_then_default(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script([Reply.text("fast-1"), Reply.text("fast-2")], model="fast-model")
    server.script([Reply.text("any-1")])
    server.default = Reply.text("default")
    answers = [
        _ask(client, model=m).choices[0].message.content
        for m in ("frontier", "fast-model", "fast-model", "fast-model", "frontier")
    ]
    assert answers == ["any-1", "fast-1", "fast-2", "default", "default"]
    assert server.pending() == {}


def test_pending_counts_unused_replies(server: ScriptedServer) -> None:
    server.script([Reply.text("a"), Reply.text("b")], model="x")
    server.script(Reply.text("c"))
    assert server.pending() == {"x": 2, None: 1}


def test_no_default_answers_500_and_records_the_problem(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.default = None
    with pytest.raises(openai.InternalServerError, match="no reply scripted for model 'lost'"):
        _ask(client, model="lost")
    assert [type(e) for e in server.errors] == [LookupError]


def test_callable_reply_sees_the_request_body(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(lambda body: Reply.text(body["messages"][-1]["content"].upper()))
    assert _ask(client).choices[0].message.content == "WHAT IS 2 + 2?"


def test_callable_that_raises_or_returns_junk_gives_500(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    def boom(body: dict[str, Any]) -> Reply:
        raise ValueError("scripted failure")

    def junk(body: dict[str, Any]) -> Any:
        return "not a reply"

    server.script([boom, junk])
    with pytest.raises(openai.InternalServerError, match="scripted failure"):
        _ask(client)
    with pytest.raises(openai.InternalServerError, match="not Reply"):
        _ask(client)
    assert [type(e) for e in server.errors] == [ValueError, TypeError]


def test_agent_reply_calls_the_tool_then_answers(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.default = Reply.agent("get_weather", {"city": "Paris"}, "It is sunny in Paris.")
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model="m", messages=messages).choices[0].message
    assert first.tool_calls is not None
    (call,) = first.tool_calls
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )
    messages.append(cast("ChatCompletionMessageParam", first.model_dump(exclude_none=True)))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    final = client.chat.completions.create(model="m", messages=messages).choices[0].message
    assert (final.content, final.tool_calls) == ("It is sunny in Paris.", None)


# -- recording, models, errors of the HTTP layer -----------------------------------------


def test_requests_are_recorded(server: ScriptedServer, client: openai.OpenAI) -> None:
    _ask(client, model="fast-model", temperature=0.5)
    _ask(client, model="other")
    first, second = server.requests
    assert isinstance(first, RecordedRequest)
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer test"
    assert first.body["temperature"] == 0.5
    assert (first.model, first.messages) == ("fast-model", MESSAGES)
    assert json.loads(first.raw_body) == first.body
    assert server.requests_for("other") == [second]


def test_reset_forgets_everything(server: ScriptedServer, client: openai.OpenAI) -> None:
    server.script(Reply.text("queued"), model="m")
    server.script(Reply.text("left over"), model="y")
    server.default = None
    assert _ask(client, model="m").choices[0].message.content == "queued"
    with pytest.raises(openai.InternalServerError):
        _ask(client, model="m")
    server.reset()
    assert (server.requests, server.pending(), server.errors) == ([], {}, [])
    assert _ask(client, model="zzz").choices[0].message.content == "ok"


def test_models_endpoint_lists_scripted_models(
    server: ScriptedServer, client: openai.OpenAI
) -> None:
    server.script(Reply.text("x"), model="fast-model")
    server.script(Reply.text("y"), model="frontier-model")
    ids = [m.id for m in client.models.list()]
    assert ids == ["fast-model", "frontier-model", "scripted"]
    assert server.requests[-1].method == "GET"


def test_extra_models_are_listed() -> None:
    with ScriptedServer(models=["mercury-2"]) as srv:
        data = httpx2.get(f"{srv.base_url}/models").json()
    assert [m["id"] for m in data["data"]] == ["mercury-2", "scripted"]


def test_unknown_path_is_404_in_openai_shape(server: ScriptedServer) -> None:
    response = httpx2.post(f"{server.base_url}/images/generations", json={"model": "m"})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "unknown path /v1/images/generations"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_embeddings_are_deterministic_vectors(server: ScriptedServer) -> None:
    body = {"model": "e", "input": ["a", "b", "a"]}
    data = httpx2.post(f"{server.base_url}/embeddings", json=body).json()
    vectors = [d["embedding"] for d in data["data"]]
    assert len(vectors) == 3 and len(vectors[0]) == 8
    assert vectors[0] == vectors[2] != vectors[1]
    assert data["usage"]["prompt_tokens"] == 3


def test_wrong_method_is_405(server: ScriptedServer) -> None:
    response = httpx2.get(f"{server.base_url}/chat/completions")
    assert response.status_code == 405
    assert "GET" in response.json()["error"]["message"]


@pytest.mark.parametrize("payload", [b"{not json", b"[1, 2]", b""])
def test_bad_request_bodies_are_400(server: ScriptedServer, payload: bytes) -> None:
    response = httpx2.post(
        f"{server.base_url}/chat/completions",
        content=payload,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert server.requests[-1].raw_body == payload


def test_chunked_request_body(server: ScriptedServer) -> None:
    def parts() -> Iterator[bytes]:
        yield b'{"model": "chunked", '
        yield b'"messages": []}'

    server.script(Reply.text("got it"), model="chunked")
    response = httpx2.post(f"{server.base_url}/chat/completions", content=parts())
    assert response.json()["choices"][0]["message"]["content"] == "got it"
    assert server.requests[-1].body == {"model": "chunked", "messages": []}


def test_keep_alive_reuses_one_connection(server: ScriptedServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        sockets = []
        for _ in range(3):
            conn.request("POST", "/v1/chat/completions", json.dumps({"model": "m"}))
            response = conn.getresponse()
            assert json.loads(response.read())["choices"][0]["message"]["content"] == "ok"
            assert response.getheader("connection") == "keep-alive"
            sockets.append(conn.sock)
        assert sockets[0] is not None and sockets.count(sockets[0]) == 3
    finally:
        conn.close()


def test_connection_close_is_honoured(server: ScriptedServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head
    assert json.loads(body)["object"] == "list"


def _exchange(server: ScriptedServer, raw: bytes) -> bytes:
    """Send raw bytes, half-close, and read until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET /v1/models HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: x\r\n\r\n", b"400"),
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 999999999999\r\n\r\n", b"413"),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"400",
        ),
        (b"GET /v1/models HTTP/1.1\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
    ],
    ids=["request-line", "header-line", "content-length", "too-large", "chunk-size", "head"],
)
def test_malformed_requests_get_an_error_status(
    server: ScriptedServer, raw: bytes, status: bytes
) -> None:
    data = _exchange(server, raw)
    assert data.startswith(b"HTTP/1.1 " + status + b" ")
    assert b"connection: close" in data.partition(b"\r\n\r\n")[0]


def test_http10_and_chunked_trailers(server: ScriptedServer) -> None:
    data = _exchange(server, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in data
    body = b'{"model": "t", "messages": []}'
    chunked = b"%x;ext=1\r\n%s\r\n0\r\nx-trailer: 1\r\n\r\n" % (len(body), body)
    head = b"POST /v1/chat/completions?q=1 HTTP/1.1\r\ntransfer-encoding: chunked\r\n"
    data = _exchange(server, head + b"connection: close\r\n\r\n" + chunked)
    assert data.startswith(b"HTTP/1.1 200 ")
    assert server.requests[-1].body == {"model": "t", "messages": []}
    assert server.requests[-1].path == "/v1/chat/completions"


def test_half_sent_request_is_ignored(server: ScriptedServer) -> None:
    assert _exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\ncontent-le") == b""
    assert server.requests == []


@pytest.mark.anyio
async def test_concurrent_requests_get_their_own_replies(server: ScriptedServer) -> None:
    server.default = lambda body: Reply.text(f"echo {body['model']}")
    results: dict[str, str | None] = {}
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:

        async def one(i: int) -> None:
            completion = await c.chat.completions.create(model=f"m{i}", messages=MESSAGES)
            results[f"m{i}"] = completion.choices[0].message.content

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(one, i)
    assert results == {f"m{i}": f"echo m{i}" for i in range(40)}


# -- lifecycle -------------------------------------------------------------------------------


def test_start_stop_lifecycle() -> None:
    srv = ScriptedServer()
    assert not srv.running
    with pytest.raises(RuntimeError, match="not running"):
        _ = srv.base_url
    srv.start()
    try:
        assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
        assert "127.0.0.1" in repr(srv)
        with pytest.raises(RuntimeError, match="already running"):
            srv.start()
    finally:
        srv.stop()
    srv.stop()  # idempotent
    assert repr(srv) == "ScriptedServer(stopped)"
    srv.start()  # restartable
    try:
        assert httpx2.get(f"{srv.base_url}/models").status_code == 200
    finally:
        srv.stop()


def test_stop_ends_in_flight_slow_requests_and_idle_connections() -> None:
    srv = ScriptedServer().start()
    srv.script(Reply.slow(60))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    idle = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps({"model": "m"}))
        _wait_until(lambda: bool(srv.requests))  # the slow request is being served
        srv.stop()
        assert not srv.running
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.getresponse()
        assert idle.recv(1) == b""  # the idle keep-alive connection was closed too
    finally:
        conn.close()
        idle.close()


def test_port_in_use_raises() -> None:
    with ScriptedServer() as first:
        with pytest.raises(OSError):
            ScriptedServer(port=first.port).start()


@pytest.mark.anyio
async def test_async_context_manager() -> None:
    async with ScriptedServer() as srv:
        srv.script(Reply.text("async hi"))
        async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="t", max_retries=0) as c:
            completion = await c.chat.completions.create(model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "async hi"
    assert not srv.running


def test_stop_leaves_no_connection_open() -> None:
    """Connections in every state at stop(): idle, mid-reply (a slow reply), and blocked on
    a client that stopped reading a large reply. None outlives the server: no
    ResourceWarning when the collector finds them (an error anywhere in the suite)."""
    import gc
    import warnings

    clients: list[socket.socket] = []
    server = ScriptedServer().start()
    server.script([Reply.slow(30.0, then=Reply.text("late"))] * 4, model="slow")
    server.script([Reply.text("x" * 24_000_000)] * 4, model="big")
    try:
        for model in ["idle"] * 4 + ["slow"] * 4 + ["big"] * 4:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            clients.append(sock)
            if model == "idle":
                continue
            payload = json.dumps({"model": model, "messages": []}).encode()
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
        _wait_until(lambda: len(server.requests) == 8)
        time.sleep(0.2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            server.stop()
            gc.collect()
        assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
    finally:
        server.stop()
        for sock in clients:
            sock.close()


def test_stop_while_clients_keep_connecting_leaves_no_socket_open() -> None:
    """32 clients connect in a loop while the server stops: a socket accepted at that moment
    (not yet a connection) is closed too, so none is collected later as a ResourceWarning."""
    import gc
    import threading
    import warnings

    def hammer(port: int, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                continue
            try:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
                sock.recv(10)
            except OSError:
                pass
            finally:
                sock.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(8):
            server = ScriptedServer().start()
            stop = threading.Event()
            clients = [threading.Thread(target=hammer, args=(server.port, stop)) for _ in range(32)]
            for thread in clients:
                thread.start()
            time.sleep(0.02)
            try:
                server.stop()
            finally:
                stop.set()
                for thread in clients:
                    thread.join()
        gc.collect()
    leaked = [str(w.message) for w in caught if w.category is ResourceWarning]
    assert leaked == []
