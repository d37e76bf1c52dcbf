"""The proxy never calls itself, and never shares a port with a local model server.

A backend whose ``base_url`` is the proxy's own address is refused as a loop (508 in
OpenAI's shape) at the first hop, so the other tier answers at once; ``validate`` and
``serve`` warn about such a backend; ``serve`` on a taken port stops with one line, exit 1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")

import uvicorn  # noqa: E402
from redisfix import free_port  # noqa: E402
from routerkit import make_policy  # noqa: E402
from test_cli import invoke  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.backends.presets import PRESETS  # noqa: E402
from tiered_router.policy import Policy  # noqa: E402
from tiered_router.server import ServerSettings, create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

HOP = "x-tiered-router-hop"
USER = [{"role": "user", "content": "Say hi."}]


@contextmanager
def serving(app: Any, port: int) -> Iterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def chat(url: str, **headers: str) -> _http.Response:
    with _http.build_client() as http:
        response: _http.Response = http.post(
            f"{url}/v1/chat/completions",
            json={"model": "auto", "messages": USER},
            headers=headers,
        )
        return response


def test_a_backend_pointing_at_the_proxy_is_one_refused_hop_not_a_fan_out(
    server: ScriptedServer,
) -> None:
    port = free_port()
    policy = make_policy(server, retries=(1, 0), resilience={"deadline_s": 8})
    policy["backends"]["fast"]["base_url"] = f"http://127.0.0.1:{port}/v1"  # itself
    server.script([Reply.text("from the frontier")], model="frontier-model")
    app = create_app(policy, env={})
    own = app.state.settings.hop_id
    with serving(app, port) as url:
        started = time.monotonic()
        response = chat(url)
        took = time.monotonic() - started
        first = list(server.requests)
        looped = chat(url, **{HOP: own})
        foreign = chat(url, **{HOP: "another-proxy"})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "from the frontier"
    assert response.headers["x-tiered-router-escalated"] == "true"
    assert took < 5  # one refused hop (a 508 is not retried), then the frontier
    # only the frontier call reached the upstream, and it named this proxy
    assert [r.body.get("model") for r in first] == ["frontier-model"]
    frontier_calls = first
    assert frontier_calls[0].headers[HOP] == own
    assert looped.status_code == 508
    error = looped.json()["error"]
    assert error["code"] == "loop_detected"
    assert "proxy's own address" in error["message"]
    assert foreign.status_code != 508  # another proxy's hop id is not a loop


def test_every_upstream_request_carries_the_hop_header(server: ScriptedServer) -> None:
    server.script([Reply.text("hello")], model="fast-model")
    settings = ServerSettings(port=0)
    app = create_app(make_policy(server), settings=settings, env={})
    with serving(app, free_port()) as url:
        assert chat(url).status_code == 200
    assert [r.headers.get(HOP) for r in server.requests] == [settings.hop_id]


def test_the_proxy_and_the_local_server_presets_do_not_share_a_port() -> None:
    from urllib.parse import urlsplit

    proxy_port = ServerSettings().port
    assert (
        proxy_port
        == Policy.model_validate(
            {
                "version": 1,
                "backends": {"a": {"model": "m"}},
                "tiers": {"fast": "a", "frontier": "a"},
            }
        ).server.port
    )
    local = [p for p in PRESETS.values() if p.base_url and "127.0.0.1" in p.base_url]
    assert {p.name for p in local} >= {"dlmserve", "vllm", "sglang", "local-diffusion"}
    for preset in local:
        assert urlsplit(preset.base_url).port != proxy_port, preset.name


def test_validate_warns_when_a_backend_is_the_proxys_own_address(tmp_path: Path) -> None:
    path = tmp_path / "self.yaml"
    path.write_text(
        "version: 1\n"
        "backends:\n"
        "  local: {preset: dlmserve}\n"
        "  frontier: {type: openai, base_url: 'http://10.1.2.3:9/v1', api_key: k, model: m}\n"
        "tiers: {fast: local, frontier: frontier}\n"
        "server: {port: 8000}\n",
        encoding="utf-8",
    )
    code, out, _ = invoke("validate", path)
    assert code == 0
    assert "warning" in out and "backend local" in out and "proxy's own address" in out
    code, out, _ = invoke("validate", path, "--json")
    assert code == 0 and "backend local" in out
    path.write_text(path.read_text(encoding="utf-8").replace("8000", "8100"), encoding="utf-8")
    code, out, _ = invoke("validate", path)
    assert code == 0 and "proxy's own address" not in out


def test_serve_on_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "policy.yaml"
        path.write_text(
            "version: 1\n"
            "backends:\n"
            f"  fast: {{type: openai, base_url: 'http://127.0.0.1:{port}/v1', model: f}}\n"
            "  frontier: {type: openai, base_url: 'http://10.1.2.3:9/v1', api_key: k, model: m}\n"
            "tiers: {fast: fast, frontier: frontier}\n",
            encoding="utf-8",
        )
        done = subprocess.run(
            [sys.executable, "-m", "tiered_router.cli", "serve", str(path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (
        f"error: cannot serve on 127.0.0.1:{port}: the port is in use (another server, or a "
        "model server such as vLLM or dlmserve); stop it or pass --port"
    )
    assert "Traceback" not in done.stderr
    # the backend pointing at the proxy's own address was warned about first
    assert any("backend 'fast'" in line and "own address" in line for line in lines[:-1])


def test_a_loop_through_two_proxies_is_refused_where_it_comes_back(
    server: ScriptedServer,
) -> None:
    """A's fast backend is proxy B, and B's is proxy A: the loop ends at A's second hop.

    A request through A goes to B (header: A), B sends it back to A (header: A, B), and A
    refuses it with 508: B's fast call fails, B's frontier answers, A returns that answer.
    With the last proxy's id alone in the header, neither proxy ever saw its own id, and
    one request fanned out between the two until the deadline.
    """
    port_a, port_b = free_port(), free_port()
    server.script([Reply.text("from B's frontier")] * 4, model="frontier-model")
    policies = []
    for other in (port_b, port_a):
        policy = make_policy(server, retries=(0, 0), resilience={"deadline_s": 8})
        policy["backends"]["fast"]["base_url"] = f"http://127.0.0.1:{other}/v1"
        policy["backends"]["fast"]["model"] = "auto"
        policies.append(policy)
    app_a, app_b = (create_app(p, env={}) for p in policies)
    id_a, id_b = app_a.state.settings.hop_id, app_b.state.settings.hop_id
    with serving(app_a, port_a) as url_a, serving(app_b, port_b):
        started = time.monotonic()
        response = chat(url_a)
        took = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "from B's frontier"
    assert took < 5
    # one frontier call reached the upstream: B's, naming A then B
    assert [r.headers.get(HOP) for r in server.requests] == [f"{id_a}, {id_b}"]


def test_a_request_names_every_proxy_it_came_through_and_too_many_is_a_loop(
    server: ScriptedServer,
) -> None:
    from tiered_router.server._hops import MAX_HOPS

    server.script([Reply.text("hello")] * 3, model="fast-model")
    settings = ServerSettings(port=0)
    app = create_app(make_policy(server), settings=settings, env={})
    with serving(app, free_port()) as url:
        with _http.build_client() as http:
            streamed = http.post(
                f"{url}/v1/chat/completions",
                json={"model": "auto", "messages": USER, "stream": True},
                headers={HOP: "p0"},
            )
        assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
        assert server.requests[-1].headers.get(HOP) == f"p0, {settings.hop_id}"
        junk = chat(url, **{HOP: f"p9, send this upstream, {'x' * 65},,"})
        forwarded = chat(url, **{HOP: "p1, p2"})
        longest = chat(url, **{HOP: ", ".join(f"p{i}" for i in range(MAX_HOPS - 1))})
        too_many = chat(url, **{HOP: ", ".join(f"p{i}" for i in range(MAX_HOPS))})
        returned = chat(url, **{HOP: f"{settings.hop_id}, p2"})
    # a header that is no chain of proxy ids was not written by a proxy: refused, never sent
    assert junk.status_code == 400, junk.text
    assert junk.json()["error"]["code"] == "invalid_hop_header"
    assert forwarded.status_code == 200, forwarded.text
    assert server.requests[1].headers.get(HOP) == f"p1, p2, {settings.hop_id}"
    assert longest.status_code == 200, longest.text
    assert server.requests[2].headers.get(HOP).count(",") == MAX_HOPS - 1  # MAX_HOPS ids
    assert len(server.requests) == 3  # the refused ones made no upstream call
    # a chain that this proxy would make longer than MAX_HOPS is refused here, not upstream
    assert too_many.status_code == 508
    assert too_many.json()["error"]["code"] == "loop_detected"
    assert f"more than {MAX_HOPS}" in too_many.json()["error"]["message"]
    assert returned.status_code == 508
    assert "came back through 1 other" in returned.json()["error"]["message"]
