"""Requests still running when the proxy's graceful shutdown runs out end in OpenAI's shape.

Before its headers, a request gets 503 ``server_shutting_down`` (and an access line); a
stream whose headers are sent ends with the in-band error event. Nothing is a bare
``500 Internal Server Error`` and no traceback is logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("uvicorn")

import uvicorn  # noqa: E402
from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

BODY = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}], "stream": True}


@contextmanager
def proxy_shutting_down_in(server: ScriptedServer, grace_s: float) -> Iterator[Any]:
    """A proxy whose graceful shutdown gives in-flight requests ``grace_s`` seconds."""
    # cheap checks only: a draft streams straight through once it has content
    policy = make_policy(server, retries=(0, 0), gate={"checks": ["non_empty"]})
    app = create_app(policy, env={})
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=grace_s
    )
    proxy = uvicorn.Server(config)
    thread = threading.Thread(target=proxy.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not proxy.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    try:
        yield proxy
    finally:
        proxy.should_exit = True
        thread.join(15)
        assert not thread.is_alive()


def _stream_in_thread(url: str, out: dict[str, Any]) -> threading.Thread:
    def call() -> None:
        with _http.build_client(timeout_s=30) as http:
            with http.stream("POST", f"{url}/v1/chat/completions", json=BODY) as response:
                out["status"] = response.status_code
                out["type"] = response.headers.get("content-type", "")
                out["body"] = b"".join(response.iter_bytes())

    caller = threading.Thread(target=call)
    caller.start()
    return caller


def _wait_for(what: Any) -> None:
    deadline = time.monotonic() + 10
    while not what():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_stream_cut_before_its_headers_gets_503_in_openais_shape(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.default = Reply.slow(20, Reply.text("too late"))
    out: dict[str, Any] = {}
    with caplog.at_level(logging.INFO, logger="tiered_router.server"):
        with proxy_shutting_down_in(server, 0.3) as proxy:
            port = proxy.servers[0].sockets[0].getsockname()[1]
            caller = _stream_in_thread(f"http://127.0.0.1:{port}", out)
            _wait_for(lambda: server.requests)  # the turn waits on the upstream
            proxy.should_exit = True
            caller.join(15)
    assert out["status"] == 503
    assert out["type"].startswith("application/json")
    error = json.loads(out["body"])["error"]
    assert error["code"] == "server_shutting_down"
    assert error["type"] == "server_error"
    assert "shutting down" in error["message"]
    access = [r.getMessage() for r in caplog.records if r.name == "tiered_router.server"]
    assert any(line.startswith("POST /v1/chat/completions 503") for line in access), access
    assert not any(r.exc_info for r in caplog.records)


def test_a_stream_cut_after_its_headers_ends_with_the_in_band_error(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    words = " ".join(f"word{i}" for i in range(40))
    server.default = Reply.text(words).streamed(chunks=40, chunk_delay_s=0.5)
    out: dict[str, Any] = {}
    with caplog.at_level(logging.INFO, logger="tiered_router.server"):
        with proxy_shutting_down_in(server, 0.3) as proxy:
            port = proxy.servers[0].sockets[0].getsockname()[1]
            caller = _stream_in_thread(f"http://127.0.0.1:{port}", out)
            _wait_for(lambda: server.requests)
            time.sleep(1.2)  # a few chunks are out: the headers went with the first
            proxy.should_exit = True
            caller.join(15)
    assert out["status"] == 200
    events = [e for e in out["body"].decode().split("\n\n") if e.startswith("data: ")]
    assert events[0] != 'data: {"error"'
    last = json.loads(events[-1][len("data: ") :])
    assert last["error"]["code"] == "server_shutting_down"
    assert "data: [DONE]" not in events
    access = [r.getMessage() for r in caplog.records if r.name == "tiered_router.server"]
    assert any(line.startswith("POST /v1/chat/completions 200 stream") for line in access)
    assert not any(r.exc_info for r in caplog.records)
