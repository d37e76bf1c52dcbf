"""What ``serve``'s protocol tells a request, and what still holds without it.

The protocol keeps one header timer per connection (a request's first byte notes the time),
says whether a request's body is already in (then it is read with no timer) and calls the
request back when its client leaves. These tests drive a connection through more than one
request, a body that comes after its headers, pipelined requests, and a client that leaves
under plain uvicorn (no such protocol: a watcher task notices instead).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

uvicorn = pytest.importorskip("uvicorn")

from routerkit import make_policy  # noqa: E402
from test_proxy_disconnect import _leave_after_upstream_has_it  # noqa: E402
from test_server import running  # noqa: E402

from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402
from tiered_router.trace import MemorySink  # noqa: E402

BODY = json.dumps({"model": "fast", "messages": [{"role": "user", "content": "Say hi."}]}).encode()
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n"
)


def _answer(sock: socket.socket, buffered: bytes = b"") -> tuple[bytes, bytes]:
    """Read one whole answer (content-length framed); return it and what came after it."""
    data = buffered
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


@pytest.fixture
def proxy(server: ScriptedServer) -> Iterator[int]:
    policy = make_policy(server, retries=(0, 0), server={"read_timeout_s": 0.5})
    with running(create_app(policy, env={})) as url:
        yield int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize("gap_s", [0.3, 0.7], ids=["within-the-limit", "past-the-limit"])
def test_a_later_requests_half_sent_headers_are_dropped(proxy: int, gap_s: float) -> None:
    with socket.create_connection(("127.0.0.1", proxy), timeout=5) as sock:
        for _ in range(2):  # the connection's timer has seen whole requests
            sock.sendall(HEAD + BODY)
            answer, _ = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 200")
        time.sleep(gap_s)  # the connection is idle for part of the limit, or longer
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")  # and no more
        assert sock.recv(1024) == b""  # closed, within the socket's 5 s


def test_a_body_that_comes_after_its_headers_is_read(proxy: int) -> None:
    with socket.create_connection(("127.0.0.1", proxy), timeout=5) as sock:
        sock.sendall(HEAD + BODY[:10])
        time.sleep(0.1)  # the request is being served before its body is in
        sock.sendall(BODY[10:])
        answer, _ = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 200")
    assert b'"content":"ok"' in answer or b'"content": "ok"' in answer


def test_pipelined_requests_are_each_answered(proxy: int) -> None:
    with socket.create_connection(("127.0.0.1", proxy), timeout=5) as sock:
        sock.sendall((HEAD + BODY) * 3)
        rest = b""
        for _ in range(3):
            answer, rest = _answer(sock, rest)
            assert answer.startswith(b"HTTP/1.1 200")


@contextmanager
def _plain_uvicorn(app: Any) -> Iterator[str]:
    """``app`` on uvicorn's own protocol (not ``serve``'s): nothing in the scope says much."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
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


def test_a_client_that_leaves_is_noticed_under_another_server(server: ScriptedServer) -> None:
    server.default = Reply.slow(5, Reply.text("too late"))
    sink = MemorySink()
    app = create_app(make_policy(server, retries=(0, 0)), env={}, sinks=[sink])
    body = {"model": "fast", "messages": [{"role": "user", "content": "Say hi."}]}
    with _plain_uvicorn(app) as url:
        left = time.monotonic()
        _leave_after_upstream_has_it(url, server, body)
        while not sink.traces:
            assert time.monotonic() - left < 3, "the turn kept waiting for the upstream"
            time.sleep(0.01)
    (trace,) = sink.traces
    assert trace.interrupted == "CancelledError"
