"""The async transports: ours (direct calls) and aiohttp's (calls through a proxy).

Every backend's async calls go over :class:`DirectTransport`, which hands a call through a
proxy from the environment to :class:`AiohttpTransport`; the tests of what a transport does
run over both. The fault matrix (tests/test_fault_matrix.py) runs every upstream fault
through the backends' transport; proxies are tested in tests/test_http_transport.py, our
client's parser and pool in tests/test_direct_transport.py. These tests pin the transports
themselves, over real HTTP to the scripted server.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tiered_router import _http
from tiered_router._http import _aiohttp, _direct
from tiered_router._http._aiohttp import AiohttpTransport
from tiered_router._http._direct import DirectTransport
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends.openai_compat import OpenAICompatBackend
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendRateLimited,
    BackendStatusError,
    BackendTimeout,
)
from tiered_router.testing import Reply, ScriptedServer

HEADERS = (("authorization", "Bearer k"), ("content-type", "application/json"))
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _url(server: ScriptedServer) -> str:
    return f"{server.base_url}/chat/completions"


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Transport = type[AiohttpTransport] | type[DirectTransport]


@pytest.fixture(params=[DirectTransport, AiohttpTransport], ids=["direct", "aiohttp"])
def transport_class(request: pytest.FixtureRequest) -> Transport:
    return request.param  # type: ignore[no-any-return]


async def _read(answer: _aiohttp.Exchange | _direct.Exchange) -> bytes:
    try:
        return b"".join([part async for part in answer.aiter_bytes()])
    finally:
        await answer.aclose()


@pytest.mark.anyio
async def test_every_backend_pool_is_ours_and_proxied_calls_go_over_aiohttp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    direct = _http.build_async_transport()
    assert isinstance(direct, DirectTransport)
    assert direct._target("https://api.example.com/v1") is not None  # no proxy: ours
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    proxied = _http.build_async_transport()
    assert isinstance(proxied, DirectTransport)
    assert proxied._target("https://api.example.com/v1") is None  # through the proxy: aiohttp
    assert proxied._target("http://api.example.com/v1") is not None  # HTTPS_PROXY only
    assert proxied._target("https://m.internal.example/v1") is not None  # NO_PROXY
    assert proxied._target("https://user:pw@api.example.com/v1") is None  # credentials
    backend = OpenAICompatBackend("b", model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    try:
        assert isinstance(await backend._get_async_client(), DirectTransport)
    finally:
        await backend.aclose()


def test_sending_needs_an_asyncio_loop(transport_class: Transport) -> None:
    transport = transport_class()
    sending = transport.exchange("http://127.0.0.1:9/v1", HEADERS, BODY, 1.0)
    with pytest.raises(RuntimeError, match=r"run on asyncio; .*async_http_client="):
        sending.send(None)  # as under trio: no asyncio loop is running


@pytest.mark.anyio
async def test_answer_is_read_like_an_httpx2_response(
    server: ScriptedServer, transport_class: Transport
) -> None:
    server.script([Reply.text("hello"), Reply.text("again")])
    transport = transport_class()
    try:
        answer = await transport.exchange(_url(server), HEADERS, BODY, 5.0)
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith("application/json")
        assert answer.headers["content-type"] == answer.headers["CONTENT-TYPE"]
        data = json.loads(await _read(answer))
        assert data["choices"][0]["message"]["content"] == "hello"
        sent = server.requests[-1]
        assert sent.headers["authorization"] == "Bearer k"
        assert sent.headers["accept-encoding"] == "identity"  # no compressed answers
        assert sent.headers["user-agent"] == "tiered-router"
        custom = await transport.exchange(
            _url(server), (*HEADERS, ("User-Agent", "mine/1")), BODY, 5.0
        )
        await _read(custom)
        assert server.requests[-1].headers["user-agent"] == "mine/1"
    finally:
        await transport.aclose()
        await transport.aclose()  # closing twice is harmless


@pytest.mark.anyio
async def test_stream_arrives_in_pieces_and_the_next_call_follows(
    server: ScriptedServer, transport_class: Transport
) -> None:
    server.script(Reply.text("one two three four").streamed(chunks=4, chunk_delay_s=0.02))
    server.script(Reply.text("again"))
    transport = transport_class()
    try:
        streaming = json.dumps({**json.loads(BODY), "stream": True}).encode()
        answer = await transport.exchange(_url(server), HEADERS, streaming, 5.0)
        pieces = [part async for part in answer.aiter_bytes()]
        await answer.aclose()
        assert len(pieces) >= 2  # handed over as they came, not buffered to the end
        assert b"data: [DONE]" in b"".join(pieces)
        second = await transport.exchange(_url(server), HEADERS, BODY, 5.0)
        assert b"again" in await _read(second)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_failures_are_httpx2_exceptions(transport_class: Transport) -> None:
    transport = transport_class()
    try:
        with pytest.raises(_http.ConnectError, match="cannot connect"):
            await transport.exchange(f"http://127.0.0.1:{_dead_port()}/v1", HEADERS, BODY, 2.0)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_read_timeout_and_pool_wait_are_bounded(
    server: ScriptedServer, transport_class: Transport
) -> None:
    server.script([Reply.slow(2.0), Reply.slow(2.0)])
    transport = transport_class(limits=_http.Limits(max_connections=1))
    try:
        with pytest.raises(_http.ReadTimeout):
            await transport.exchange(_url(server), HEADERS, BODY, 0.2)
        # one connection, held by a hung call: the next call's wait for it times out
        held = asyncio.ensure_future(transport.exchange(_url(server), HEADERS, BODY, 5.0))
        await asyncio.sleep(0.1)
        with pytest.raises(_http.ConnectTimeout, match="timed out connecting"):
            await transport.exchange(_url(server), HEADERS, BODY, 0.2)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_backend_errors_over_the_backends_transport(server: ScriptedServer) -> None:
    backend = OpenAICompatBackend("b", model="m", base_url=server.base_url, api_key="sk-abc")
    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=5)
    try:
        server.script(Reply.status(429, retry_after=3))
        with pytest.raises(BackendRateLimited) as limited:
            await backend.acomplete(request)
        assert limited.value.retry_after_s == 3
        assert isinstance(limited.value.__cause__, _http.HTTPStatusError)
        server.script(Reply.status(500, message="boom sk-abc"))
        with pytest.raises(BackendStatusError, match="boom") as failed:
            await backend.acomplete(request)
        assert "sk-abc" not in str(failed.value)
        server.script(Reply.slow(3))
        with pytest.raises(BackendTimeout):
            await backend.acomplete(
                CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=0.2)
            )
        assert isinstance(await backend._get_async_client(), DirectTransport)
    finally:
        await backend.aclose()


def test_a_backend_used_from_two_event_loops(server: ScriptedServer) -> None:
    backend = OpenAICompatBackend("b", model="m", base_url=server.base_url, api_key="k")
    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=5)
    server.script([Reply.text("first"), Reply.text("second")])
    assert asyncio.run(backend.acomplete(request)).text == "first"
    assert asyncio.run(backend.acomplete(request)).text == "second"


@pytest.mark.anyio
async def test_a_dead_upstream_is_a_connection_error_through_the_backend() -> None:
    backend = OpenAICompatBackend(
        "b", model="m", base_url=f"http://127.0.0.1:{_dead_port()}/v1", api_key="k"
    )
    try:
        with pytest.raises(BackendConnectionError, match="connection failed"):
            await backend.acomplete(
                CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=2)
            )
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "bypassed"),
    [
        ("api.example.com", 443, "*", True),
        ("api.example.com", 443, "example.com", True),
        ("api.example.com", 443, ".example.com", True),
        ("notexample.com", 443, "example.com", False),
        ("api.example.com", 443, "other.org, api.example.com:443", True),
        ("api.example.com", 8443, "api.example.com:443", False),
        ("127.0.0.1", 8000, "localhost,127.0.0.1", True),
        ("::1", 8000, "[::1]:8000", True),
        ("::1", 8000, "::1", True),
        ("api.example.com", 443, "", False),
    ],
)
def test_no_proxy_entries(host: str, port: int, no_proxy: str, bypassed: bool) -> None:
    assert _aiohttp._bypassed(host, port, no_proxy) is bypassed


def test_proxy_is_picked_once_per_url_by_scheme() -> None:
    transport = AiohttpTransport(
        proxies={"https": "http://p1:3128", "all": "p2:8080", "no": "internal.example"}
    )
    assert str(transport._route_of("https://api.example.com/v1").proxy) == "http://p1:3128"
    assert str(transport._route_of("http://api.example.com/v1").proxy) == "http://p2:8080"
    assert transport._route_of("https://m.internal.example/v1").proxy is None
    assert (
        transport._route_of("https://api.example.com/v1")
        is transport._routes["https://api.example.com/v1"]
    )
