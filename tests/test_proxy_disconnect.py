"""A client that leaves cancels its upstream call, JSON or stream, and the turn leaves one trace.

The upstream is slow (it answers after 5 s); the client sends its request over a raw socket
and closes the socket once the upstream has the request. The proxy notices at once (it
watches the connection while the turn runs): the turn's trace arrives long before the
upstream would have answered, marked interrupted (its one attempt cut short), the access
line says 499 and nothing stays in flight.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from routerkit import make_policy  # noqa: E402
from test_server import running  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402
from tiered_router.trace import MemorySink  # noqa: E402


def _leave_after_upstream_has_it(url: str, server: ScriptedServer, body: dict[str, Any]) -> None:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode() + data)
        deadline = time.monotonic() + 5
        while not server.requests:
            assert time.monotonic() < deadline, "the upstream never got the request"
            time.sleep(0.01)
    # the socket is closed here, with the upstream call still running


def _in_flight(url: str) -> float:
    with _http.build_client() as http:
        text = http.get(f"{url}/metrics").text
    (line,) = [x for x in text.splitlines() if x.startswith("tiered_router_in_flight ")]
    return float(line.split()[1])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_client_that_leaves_cancels_the_upstream_call_and_leaves_one_trace(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    server.default = Reply.slow(5, Reply.text("too late"))
    sink = MemorySink()
    policy = make_policy(server, retries=(0, 0), gate={"checks": ["non_empty"]})
    app = create_app(policy, env={}, sinks=[sink])
    body = {"model": "fast", "messages": [{"role": "user", "content": "Say hi."}]}
    if stream:
        body["stream"] = True
    with caplog.at_level(logging.INFO, logger="tiered_router.server"), running(app) as url:
        left = time.monotonic()
        _leave_after_upstream_has_it(url, server, body)
        while not sink.traces:
            assert time.monotonic() - left < 3, "the turn kept waiting for the upstream"
            time.sleep(0.01)
        time.sleep(0.2)  # a second trace, if there were one, would be here by now
        assert _in_flight(url) == 0
    (trace,) = sink.traces
    assert trace.interrupted == "CancelledError"
    (attempt,) = trace.attempts
    assert attempt.error is not None and attempt.latency_s < 3
    assert len(server.requests) == 1  # not retried, not escalated
    access = [r.getMessage() for r in caplog.records if r.name == "tiered_router.server"]
    chat = [line for line in access if line.startswith("POST /v1/chat/completions")]
    assert len(chat) == 1 and chat[0].startswith("POST /v1/chat/completions 499"), access
    assert not any(r.exc_info for r in caplog.records)
