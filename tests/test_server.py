"""The proxy, driven by the real openai SDK, in front of the scripted upstream."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from routerkit import make_policy as shared_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.exceptions import PolicyError  # noqa: E402
from tiered_router.server import ServerSettings, create_app, is_loopback, serve  # noqa: E402
from tiered_router.server._protocol import guarded_protocol  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

UPSTREAM_KEY = "sk-upstream-SECRET-0123456789"
CLIENT_KEY = "client-key-0123456789"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hi."}]


def make_policy(upstream: ScriptedServer, **overrides: Any) -> dict[str, Any]:
    """The shared two-tier policy (tests/routerkit.py), without retries."""
    return shared_policy(upstream, api_key=UPSTREAM_KEY, retries=(0, 0), **overrides)


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a thread; yield its base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        http=guarded_protocol(app.state.settings.read_timeout_s),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def proxy(server: ScriptedServer) -> Iterator[str]:
    """The proxy with client keys, in front of the scripted upstream."""
    app = create_app(make_policy(server, server={"api_keys": [CLIENT_KEY]}), env={})
    with running(app) as url:
        yield url


_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def client(url: str, key: str = CLIENT_KEY) -> openai.OpenAI:
    _CLIENTS.append(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    return _CLIENTS[-1]


def post(url: str, body: bytes, **headers: str) -> _http.Response:
    all_headers = {"content-type": "application/json", "authorization": f"Bearer {CLIENT_KEY}"}
    all_headers.update(headers)
    with _http.build_client() as http:
        response: _http.Response = http.post(
            f"{url}/v1/chat/completions", content=body, headers=all_headers
        )
        return response


# -- JSON ---------------------------------------------------------------------------------


def test_json_completion_with_route_headers(proxy: str, server: ScriptedServer) -> None:
    server.script([Reply.text("hi there")], model="fast-model")
    raw = client(proxy).chat.completions.with_raw_response.create(model="auto", messages=MESSAGES)
    resp = raw.parse()
    assert isinstance(resp, openai.types.chat.ChatCompletion)
    assert resp.choices[0].message.content == "hi there"
    assert raw.headers["x-tiered-router-tier"] == "fast"
    assert raw.headers["x-tiered-router-escalated"] == "false"
    assert 0.0 <= float(raw.headers["x-tiered-router-score"]) <= 1.0
    assert float(raw.headers["x-tiered-router-overhead-ms"]) >= 0.0
    assert resp.tiered_router["tier"] == "fast"  # type: ignore[attr-defined]
    (upstream,) = server.requests
    assert upstream.model == "fast-model"
    assert upstream.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # never the client's


def test_gate_failure_escalates_to_frontier(proxy: str, server: ScriptedServer) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"answer": 4})], model="frontier-model")
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert raw.headers["x-tiered-router-tier"] == "frontier"
    assert raw.headers["x-tiered-router-escalated"] == "true"
    assert json.loads(raw.parse().choices[0].message.content or "") == {"answer": 4}
    assert [r.model for r in server.requests] == ["fast-model", "frontier-model"]


def test_tool_calls_and_unknown_params_pass_through(proxy: str, server: ScriptedServer) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    ]
    server.script([Reply.tool_calls([("search", {"q": "x"})])], model="fast-model")
    resp = client(proxy).chat.completions.create(
        model="auto", messages=MESSAGES, tools=tools, tool_choice="auto", seed=7
    )
    (call,) = resp.choices[0].message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "search"
    assert json.loads(call.function.arguments) == {"q": "x"}
    body = server.requests[0].body
    assert body["seed"] == 7 and body["tool_choice"] == "auto"


def test_agent_signals_from_body_and_header(proxy: str, server: ScriptedServer) -> None:
    api = client(proxy).chat.completions
    by_body = api.create(
        model="auto", messages=MESSAGES, extra_body={"tiered_router": {"final": True, "step": 3}}
    )
    assert by_body.tiered_router["rule"] == "final-answer"  # type: ignore[attr-defined]
    raw = api.with_raw_response.create(
        model="auto", messages=MESSAGES, extra_headers={"x-tiered-router-final": "true"}
    )
    assert raw.headers["x-tiered-router-tier"] == "frontier"
    assert raw.headers["x-tiered-router-rule"] == "final-answer"
    assert "tiered_router" not in server.requests[0].body  # signals never go upstream


def test_model_pins_a_tier_and_unknown_model_is_404(proxy: str, server: ScriptedServer) -> None:
    api = client(proxy).chat.completions
    for model, tier in (("frontier", "frontier"), ("frontier-model", "frontier"), ("fast", "fast")):
        resp = api.create(model=model, messages=MESSAGES)
        assert resp.tiered_router["tier"] == tier  # type: ignore[attr-defined]
        assert resp.tiered_router["rule"] == "pinned"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as info:
        api.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.code == "model_not_found"


def test_models_and_healthz(proxy: str) -> None:
    ids = [m.id for m in client(proxy).models.list()]
    assert ids[:3] == ["auto", "fast", "frontier"]
    with _http.build_client() as http:
        health = http.get(f"{proxy}/healthz")  # no key needed
        missing = http.get(f"{proxy}/v1/nope", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_path"


# -- streaming -----------------------------------------------------------------------------


def test_stream_with_usage_and_headers(proxy: str, server: ScriptedServer) -> None:
    server.script([Reply.text("hello streaming world", chunks=3)], model="fast-model")
    with client(proxy).chat.completions.with_streaming_response.create(
        model="auto", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as raw:
        assert raw.headers["x-tiered-router-tier"] == "fast"
        assert raw.headers["content-type"].startswith("text/event-stream")
        chunks = list(raw.parse())
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello streaming world"
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_stream_escalates_before_any_byte(proxy: str, server: ScriptedServer) -> None:
    server.script([Reply.empty()], model="fast-model")
    server.script([Reply.text("from the frontier")], model="frontier-model")
    with client(proxy).chat.completions.with_streaming_response.create(
        model="auto", messages=MESSAGES, stream=True
    ) as raw:
        assert raw.headers["x-tiered-router-tier"] == "frontier"
        assert raw.headers["x-tiered-router-escalated"] == "true"
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == "from the frontier"


def test_stream_broken_after_first_byte_ends_with_inband_error(
    proxy: str, server: ScriptedServer
) -> None:
    server.script(
        [Reply.broken_sse("drop", content="a partial answer here")], model="frontier-model"
    )
    stream = client(proxy).chat.completions.create(model="frontier", messages=MESSAGES, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received)  # some text reached the client before the error
    assert "stream" in str(info.value.message)


def test_client_leaving_mid_stream_ends_the_routed_stream(
    proxy: str, server: ScriptedServer
) -> None:
    slow = Reply.text("one two three four five six seven eight", chunks=8, chunk_delay_s=0.05)
    server.script([slow], model="frontier-model")
    body = json.dumps({"model": "frontier", "messages": MESSAGES, "stream": True}).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {CLIENT_KEY}"}
    with _http.build_client() as http:
        with http.stream(
            "POST", f"{proxy}/v1/chat/completions", content=body, headers=headers
        ) as response:
            first = next(response.iter_lines())
        assert first.startswith("data: ")
        deadline = time.monotonic() + 5
        while True:  # the proxy notices, closes the upstream stream and settles
            text = http.get(f"{proxy}/metrics", headers={"authorization": headers["authorization"]})
            if "tiered_router_in_flight 0" in text.text or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert "tiered_router_in_flight 0" in text.text
    assert client(proxy).chat.completions.create(model="auto", messages=MESSAGES).choices


def test_stream_failure_before_any_byte_is_an_http_error(
    proxy: str, server: ScriptedServer
) -> None:
    server.script([Reply.status(500)], model="fast-model")
    server.script([Reply.status(500)], model="frontier-model")
    with pytest.raises(openai.APIStatusError) as info:
        client(proxy).chat.completions.create(model="auto", messages=MESSAGES, stream=True)
    assert info.value.status_code == 502
    assert info.value.code == "all_tiers_failed"


# -- errors --------------------------------------------------------------------------------


def test_upstream_failures_map_to_openai_errors(proxy: str, server: ScriptedServer) -> None:
    api = client(proxy).chat.completions
    server.script([Reply.status(500, message=f"boom {UPSTREAM_KEY}")], model="fast-model")
    server.script([Reply.status(503)], model="frontier-model")
    with pytest.raises(openai.APIStatusError) as failed:
        api.create(model="auto", messages=MESSAGES)
    assert failed.value.status_code == 502
    assert UPSTREAM_KEY not in failed.value.response.text
    server.script([Reply.status(400, message="bad temperature")], model="fast-model")
    server.script([Reply.status(400, message="bad temperature")], model="frontier-model")
    with pytest.raises(openai.BadRequestError) as rejected:
        api.create(model="auto", messages=MESSAGES)
    assert "bad temperature" in rejected.value.message
    server.script([Reply.status(429, retry_after=3)], model="fast-model")
    server.script([Reply.status(429, retry_after=3)], model="frontier-model")
    with pytest.raises(openai.RateLimitError) as limited:
        api.create(model="auto", messages=MESSAGES)
    assert limited.value.response.headers["retry-after"] == "3"


def test_malformed_json_gets_400_in_openai_shape(proxy: str) -> None:
    response = post(proxy, b'{"model": "auto", "messages": [')
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_json"
    assert post(proxy, b"[1, 2]").status_code == 400
    assert post(proxy, json.dumps({"model": "auto"}).encode()).status_code == 400
    assert post(proxy, b"{}", **{"content-type": "text/plain"}).status_code == 415


def test_client_cannot_choose_the_upstream(proxy: str, server: ScriptedServer) -> None:
    for field in ("base_url", "api_base", "api_key", "extra_headers"):
        body = {"model": "auto", "messages": MESSAGES, field: "http://attacker.invalid"}
        response = post(proxy, json.dumps(body).encode())
        assert response.status_code == 400
        assert response.json()["error"]["param"] == field
    assert server.requests == []


def test_body_over_the_limit_gets_413(server: ScriptedServer) -> None:
    app = create_app(make_policy(server, server={"max_body_bytes": 2048}), env={})
    big: Any = [{"role": "user", "content": "x" * 4096}]
    with running(app) as url:
        with pytest.raises(openai.APIStatusError) as info:
            client(url, "unused").chat.completions.create(model="auto", messages=big)
        assert info.value.status_code == 413

        def chunks() -> Iterator[bytes]:  # no content-length: the limit holds while reading
            yield b'{"model": "auto", "messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 512
            yield b'"}]}'

        with _http.build_client() as http:
            streamed = http.post(
                f"{url}/v1/chat/completions",
                content=chunks(),
                headers={"content-type": "application/json"},
            )
        assert streamed.status_code == 413
    assert server.requests == []


# -- auth ----------------------------------------------------------------------------------


def test_auth_on(proxy: str, server: ScriptedServer) -> None:
    for key in ("wrong-key", CLIENT_KEY[:-1], CLIENT_KEY + "x"):
        with pytest.raises(openai.AuthenticationError):
            client(proxy, key).chat.completions.create(model="auto", messages=MESSAGES)
    body = json.dumps({"model": "auto", "messages": MESSAGES}).encode()
    assert post(proxy, body, authorization="").status_code == 401
    assert post(proxy, body, authorization=f"Basic {CLIENT_KEY}").status_code == 401
    with _http.build_client() as http:
        assert http.get(f"{proxy}/metrics").status_code == 401
        assert http.get(f"{proxy}/v1/models").status_code == 401
    assert server.requests == []
    assert client(proxy).chat.completions.create(model="auto", messages=MESSAGES).choices


def test_auth_off_on_loopback(server: ScriptedServer) -> None:
    with running(create_app(make_policy(server), env={})) as url:
        resp = client(url, "anything").chat.completions.create(model="auto", messages=MESSAGES)
    assert resp.choices[0].message.content == "ok"


def test_keys_from_environment(server: ScriptedServer) -> None:
    app = create_app(make_policy(server), env={"TIERED_ROUTER_API_KEYS": "k-one, k-two"})
    with running(app) as url:
        assert client(url, "k-two").chat.completions.create(model="auto", messages=MESSAGES)
        with pytest.raises(openai.AuthenticationError):
            client(url, "k-three").chat.completions.create(model="auto", messages=MESSAGES)


def test_non_loopback_bind_needs_keys(server: ScriptedServer) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("")
    with pytest.raises(PolicyError) as info:
        serve(make_policy(server), host="0.0.0.0", env={})
    assert "server.api_keys" in str(info.value)
    ServerSettings(host="0.0.0.0", api_keys=("k",)).check_bind()  # keys make it allowed
    assert "k" not in repr(ServerSettings(api_keys=("secret-key-value",)).api_keys[:0])
    assert "secret-key-value" not in repr(ServerSettings(api_keys=("secret-key-value",)))


# -- metrics and secrets -------------------------------------------------------------------


def test_metrics_count_tiers_escalations_failures_and_hold_no_secret(
    proxy: str, server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api = client(proxy).chat.completions
    api.create(model="auto", messages=MESSAGES)
    server.script([Reply.empty()], model="fast-model")
    api.create(model="auto", messages=MESSAGES)
    server.script([Reply.status(500)], model="fast-model")
    api.create(model="auto", messages=MESSAGES)
    with _http.build_client() as http:
        text = http.get(f"{proxy}/metrics", headers={"authorization": f"Bearer {CLIENT_KEY}"}).text
    assert 'tiered_router_requests_total{escalated="false",tier="fast"} 1.0' in text
    assert 'tiered_router_requests_total{escalated="true",tier="frontier"} 2.0' in text
    assert 'tiered_router_escalations_total{reason="gate_failed"} 1.0' in text
    assert 'tiered_router_escalations_total{reason="backend_error"} 1.0' in text
    assert 'tiered_router_gate_failures_total{check="non_empty"} 1.0' in text
    errors = 'tiered_router_backend_errors_total{backend="fast",error="BackendStatusError"}'
    assert f"{errors} 1.0" in text
    assert "tiered_router_turn_latency_seconds_count" in text
    assert "tiered_router_overhead_seconds_bucket" in text
    assert 'tiered_router_http_responses_total{code="200",path="/v1/chat/completions"} 3.0' in text
    for secret in (UPSTREAM_KEY, CLIENT_KEY):
        assert secret not in text
        assert secret not in caplog.text


# -- transport and shutdown ----------------------------------------------------------------


def test_graceful_shutdown_lets_in_flight_requests_finish(server: ScriptedServer) -> None:
    server.script([Reply.slow(0.5, Reply.text("finished"))], model="fast-model")
    app = create_app(make_policy(server), env={})
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    proxy_server = uvicorn.Server(config)
    thread = threading.Thread(target=proxy_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not proxy_server.started:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    port = proxy_server.servers[0].sockets[0].getsockname()[1]
    results: list[Any] = []

    def call() -> None:
        api = client(f"http://127.0.0.1:{port}", "x").chat.completions
        results.append(api.create(model="auto", messages=MESSAGES))

    caller = threading.Thread(target=call)
    caller.start()
    while not server.requests:  # the request is in flight at the upstream
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proxy_server.should_exit = True
    caller.join(10)
    thread.join(10)
    assert not thread.is_alive()
    assert results and results[0].choices[0].message.content == "finished"


def test_chat_takes_the_short_path_until_middleware_is_added(server: ScriptedServer) -> None:
    seen: list[str] = []

    class Tag:
        """A pure ASGI middleware that records the paths it saw."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    body = {"model": "auto", "messages": MESSAGES}
    app = create_app(make_policy(server), env={})
    with running(app) as url, _http.build_client(timeout_s=10) as client:
        for path in ("/v1/chat/completions", "/chat/completions"):
            answer = client.post(url + path, json=body)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-tiered-router-tier"] == "fast"
        wrong_method = client.get(url + "/v1/chat/completions")
        assert wrong_method.status_code == 405  # Starlette's full path still answers the rest
        assert wrong_method.json()["error"]["type"] == "invalid_request_error"
    app = create_app(make_policy(server), env={})
    app.add_middleware(Tag)
    with running(app) as url, _http.build_client(timeout_s=10) as client:
        assert client.post(url + "/v1/chat/completions", json=body).status_code == 200
    assert seen == ["/v1/chat/completions"]  # with middleware, chat goes through it


def test_only_serve_tunes_the_garbage_collector(server: ScriptedServer) -> None:
    import gc

    from tiered_router.server._app import SERVE_GC_THRESHOLD

    before = gc.get_threshold()
    try:
        with running(create_app(make_policy(server), env={})):
            assert gc.get_threshold() == before  # a mounted app leaves the process alone
        app = create_app(make_policy(server), env={})
        app.state.tune_gc = True  # what serve() sets
        with running(app):
            assert gc.get_threshold()[0] == SERVE_GC_THRESHOLD
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_panel_turn_reports_its_drafts_in_headers_and_metrics(server: ScriptedServer) -> None:
    policy = make_policy(
        server,
        drafts={"k": 3, "when": ["all"], "early": False},
        hedge={"after_s": 5.0},
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
    )
    server.script(
        [Reply.text("The answer is 4.")] * 2 + [Reply.text("The answer is 5.")], model="fast-model"
    )
    app = create_app(policy, env={})
    with running(app) as url:
        raw = client(url).chat.completions.with_raw_response.create(model="auto", messages=MESSAGES)
        with _http.build_client() as http:
            metrics = http.get(f"{url}/metrics").text
    assert raw.headers["x-tiered-router-tier"] == "fast"
    assert raw.headers["x-tiered-router-drafts"] == "3"
    assert raw.headers["x-tiered-router-cancelled"] == "0"
    assert raw.headers["x-tiered-router-hedged"] == "false"
    assert raw.parse().choices[0].message.content == "The answer is 4."
    assert 'tiered_router_panels_total{result="agreed"} 1.0' in metrics
    assert 'tiered_router_concurrent_calls_total{outcome="answered",role="draft"} 3.0' in metrics
