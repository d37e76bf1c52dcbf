"""The proxy's limits: bad client input, slow clients, deadlines, 500s, secrets, traces."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.backends._base import CompletionRequest  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.server._protocol import guarded_protocol  # noqa: E402
from tiered_router.testing import FunctionBackend, Reply, ScriptedServer  # noqa: E402
from tiered_router.trace import JSONLSink, MemorySink  # noqa: E402

UPSTREAM_KEY = "abc12"  # short keys are scrubbed too
SHAPE = {"message", "type", "param", "code"}


@contextmanager
def running(app: Any) -> Iterator[tuple[str, int]]:
    """Serve ``app`` with the proxy's own uvicorn protocol; yield (base URL, port)."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        http=guarded_protocol(app.state.settings.read_timeout_s),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", port
    finally:
        server.should_exit = True
        thread.join(10)


def policy(upstream: ScriptedServer, /, **overrides: Any) -> dict[str, Any]:
    return make_policy(upstream, api_key=UPSTREAM_KEY, retries=(0, 0), **overrides)


@pytest.fixture
def proxy(server: ScriptedServer) -> Iterator[str]:
    app = create_app(policy(server, server={"read_timeout_s": 0.5, "max_tools": 8}), env={})
    with running(app) as (url, _port):
        yield url


def post(url: str, body: bytes | dict[str, Any], **headers: str) -> _http.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with _http.build_client(timeout_s=30) as client:
        response: _http.Response = client.post(
            f"{url}/v1/chat/completions",
            content=content,
            headers={"content-type": "application/json", **headers},
        )
        return response


def metrics(url: str) -> str:
    with _http.build_client() as client:
        return str(client.get(f"{url}/metrics").text)


USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
BIG_SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "s", "schema": {"enum": ["x" * 100] * 22_000}},
}

BAD_BODIES: dict[str, bytes | dict[str, Any]] = {
    "messages_number": {"model": "auto", "messages": 5},
    "messages_empty": {"model": "auto", "messages": []},
    "messages_item_string": {"model": "auto", "messages": ["hi"]},
    "tools_string": {"model": "auto", "messages": USER, "tools": "f"},
    "tools_number": {"model": "auto", "messages": USER, "tools": 3},
    "tools_object": {"model": "auto", "messages": USER, "tools": {"f": 1}},
    "tool_parameters_string": {
        "model": "auto",
        "messages": USER,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}],
    },
    "tool_parameters_list": {
        "model": "auto",
        "messages": USER,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}],
    },
    "too_many_tools": {"model": "auto", "messages": USER, "tools": [TOOL] * 9},
    "response_format_string": {"model": "auto", "messages": USER, "response_format": "json"},
    "response_format_list": {"model": "auto", "messages": USER, "response_format": []},
    "response_format_2mb": {"model": "auto", "messages": USER, "response_format": BIG_SCHEMA},
    "lone_surrogate": b'{"model": "auto", "messages": [{"role": "user", "content": "x\\ud800y"}]}',
    "nested_1000": (
        b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": '
        + b"[" * 1000
        + b"]" * 1000
        + b"}"
    ),
    "turn_id_non_latin1": {"model": "auto", "messages": USER, "tiered_router": {"turn_id": "é✓"}},
    "turn_id_crlf": {"model": "auto", "messages": USER, "tiered_router": {"turn_id": "a\r\nx: 1"}},
    "timeout_string": {"model": "auto", "messages": USER, "timeout": "soon"},
    "timeout_negative": {"model": "auto", "messages": USER, "timeout": -1},
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_bad_input_is_400_in_openais_shape_before_any_upstream_call(
    name: str, proxy: str, server: ScriptedServer
) -> None:
    response = post(proxy, BAD_BODIES[name])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == SHAPE and error["type"] == "invalid_request_error"
    assert error["message"]
    assert server.requests == []  # rejected before anything was paid for
    assert 'code="400"' in metrics(proxy)


def test_a_2mb_schema_is_refused_without_blocking_the_loop(proxy: str) -> None:
    results: list[float] = []

    def health() -> None:
        with _http.build_client() as client:
            started = time.monotonic()
            client.get(f"{proxy}/healthz")
            results.append(time.monotonic() - started)

    big = post(proxy, BAD_BODIES["response_format_2mb"])
    assert big.json()["error"]["code"] == "schema_too_large"
    checker = threading.Thread(target=health)
    checker.start()
    post(proxy, BAD_BODIES["response_format_2mb"])
    checker.join(10)
    assert results and results[0] < 2.0


def test_unexpected_errors_are_500_in_openais_shape_and_counted(server: ScriptedServer) -> None:
    def broken(request: CompletionRequest) -> str:
        # the router turns a backend's exceptions into BackendErrors, except a failed
        # assertion: a bug, which must reach the client as a 500
        raise AssertionError(f"bug holding {UPSTREAM_KEY}")

    app = create_app(
        policy(server),
        env={},
        backends={"fast": FunctionBackend("fast", broken, kind="diffusion")},
    )
    with running(app) as (url, _port):
        response = post(url, {"model": "auto", "messages": USER})
        assert response.status_code == 500
        assert set(response.json()["error"]) == SHAPE
        assert UPSTREAM_KEY not in response.text
        assert 'code="500"' in metrics(url)


def test_client_timeout_cannot_lengthen_the_policy_deadline(server: ScriptedServer) -> None:
    server.default = Reply.slow(5)
    app = create_app(policy(server, resilience={"deadline_s": 0.5}), env={})
    with running(app) as (url, _port):
        started = time.monotonic()
        response = post(url, {"model": "auto", "messages": USER, "timeout": 1e308})
        elapsed = time.monotonic() - started
    assert response.status_code == 504
    assert set(response.json()["error"]) == SHAPE
    assert elapsed < 0.5 + 1.0  # the policy's deadline, not the client's


def test_half_sent_headers_are_dropped(proxy: str) -> None:
    port = int(proxy.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")  # and no more
        started = time.monotonic()
        assert sock.recv(1024) == b""  # the proxy closed it
        assert time.monotonic() - started < 4


def test_an_idle_connection_is_dropped(proxy: str) -> None:
    port = int(proxy.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        assert sock.recv(1024) == b""


def test_a_half_sent_body_gets_408(proxy: str) -> None:
    port = int(proxy.rsplit(":", 1)[1])
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/json\r\ncontent-length: 100\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + b'{"model": ')
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b'"request_timeout"' in answer


def test_in_band_error_echoing_the_key_is_scrubbed_from_502_and_traces(
    server: ScriptedServer, tmp_path: Path
) -> None:
    event = json.dumps({"error": {"message": f"invalid key {UPSTREAM_KEY}"}})
    server.default = Reply.raw(200, f"data: {event}\n\n", {"content-type": "text/event-stream"})
    sink = JSONLSink(tmp_path / "traces.jsonl")
    memory = MemorySink()
    app = create_app(policy(server), env={}, sinks=[sink, memory])
    with running(app) as (url, _port):
        plain = post(url, {"model": "auto", "messages": USER})
        streamed = post(url, {"model": "auto", "messages": USER, "stream": True})
    sink.close()
    assert plain.status_code == 502 and streamed.status_code == 502
    for text in (plain.text, streamed.text, (tmp_path / "traces.jsonl").read_text()):
        assert UPSTREAM_KEY not in text
    assert "***" in (tmp_path / "traces.jsonl").read_text()
    assert len(memory.traces) == 2


def test_jsonl_records_are_whole_lines_after_a_partial_one(
    server: ScriptedServer, tmp_path: Path
) -> None:
    from tiered_router import Router, Turn
    from tiered_router.testing import ScriptedBackend

    path = tmp_path / "traces.jsonl"
    path.write_text('{"a partial record from a killed process": ')
    sink = JSONLSink(path)
    router = Router(
        make_policy(server),
        backends={"fast": ScriptedBackend("fast", ["ok"]), "frontier": ScriptedBackend("frontier")},
        sinks=[sink],
    )
    router.complete(Turn([{"role": "user", "content": "hi"}]))
    sink.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[1])["attempts"]
