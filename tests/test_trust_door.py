"""The front door holds: a caller's mistake or forged header never counts against a backend.

Issue 29, findings 2, 3, 4 and 9, each through the public API over real HTTP:

- a hop chain a client forged (or one too long) is refused at the first proxy, and a 508
  ``loop_detected`` from an upstream proxy is neither retried nor a breaker count;
- every caller field is checked once, when the turn is built (``stop``, ``extra_body``,
  message roles, NaN and Infinity): 400 ``InvalidRequest``, before any attempt;
- numbers the router reads from model text are bounded: a draft it cannot read fails the
  gate and escalates, and no untyped exception leaves the turn;
- ``serve --workers N`` cleans up the metrics directory of a server that was killed.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from routerkit import make_policy

from tiered_router import InvalidRequest, Router, Turn
from tiered_router import _http
from tiered_router.testing import Reply, ScriptedServer

pytest.importorskip("uvicorn")

from redisfix import free_port  # noqa: E402
from test_proxy_loops import HOP, serving  # noqa: E402

from tiered_router.server import create_app  # noqa: E402
from tiered_router.server._hops import MAX_HOPS  # noqa: E402

USER = [{"role": "user", "content": "Say hi."}]


def _post(http: Any, url: str, body: dict[str, Any], **headers: str) -> Any:
    return http.post(
        f"{url}/v1/chat/completions",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
    )


# -- finding 2: a forged hop chain --------------------------------------------------------------


def test_a_forged_hop_chain_never_opens_the_next_proxys_breaker(server: ScriptedServer) -> None:
    """A's fast backend is proxy B. Clients forge hop chains at concurrency 32.

    A chain of ``MAX_HOPS`` made-up ids is refused by A itself (A would forward one more id
    than any proxy takes), before any upstream call. One id fewer reaches B, which refuses
    it with 508: A neither retries that nor counts it against B, and answers from its
    frontier. Afterwards an honest request still gets B's fast answer through A: B's
    breaker in A never opened (on the old code it opened after a few such requests).
    """
    port_a, port_b = free_port(), free_port()
    policy_a = make_policy(server, resilience={"deadline_s": 10})
    policy_a["backends"]["fast"]["base_url"] = f"http://127.0.0.1:{port_b}/v1"
    policy_a["backends"]["fast"]["model"] = "auto"
    policy_b = make_policy(server)
    requests = 32
    server.script([Reply.text("from A's frontier")] * requests, model="frontier-model")
    server.script([Reply.text("from B's fast")] * 2, model="fast-model")
    app_a, app_b = create_app(policy_a, env={}), create_app(policy_b, env={})
    forged = [
        ", ".join(f"made-up-{j}" for j in range(MAX_HOPS if i % 2 else MAX_HOPS - 1))
        for i in range(requests)
    ]
    with serving(app_a, port_a) as url_a, serving(app_b, port_b), _http.build_client() as http:
        body = {"model": "auto", "messages": USER}
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda chain: _post(http, url_a, body, **{HOP: chain}), forged))
        honest = [_post(http, url_a, body) for _ in range(2)]
    too_long = [a for i, a in enumerate(answers) if i % 2]
    reached_b = [a for i, a in enumerate(answers) if not i % 2]
    for answer in too_long:  # refused by A itself, in OpenAI's error shape
        assert answer.status_code == 508, answer.text
        error = answer.json()["error"]
        assert error["code"] == "loop_detected" and error["type"] == "invalid_request_error"
    for answer in reached_b:  # B refused it; A's frontier answered
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "from A's frontier"
        assert answer.headers["x-tiered-router-escalated"] == "true"
    for answer in honest:
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-tiered-router-tier"] == "fast"
        assert answer.headers["x-tiered-router-escalated"] == "false"
        assert answer.json()["choices"][0]["message"]["content"] == "from B's fast"
    # no upstream request carried a chain longer than MAX_HOPS; A's frontier answered each
    # refused request once (the 508 was not retried into a second frontier call either)
    chains = [r.headers.get(HOP, "") for r in server.requests]
    assert all(c.count(",") + 1 <= MAX_HOPS for c in chains)
    models = [r.body.get("model") for r in server.requests]
    assert models.count("frontier-model") == len(reached_b)
    assert models.count("fast-model") == 2


def test_a_hop_header_that_no_proxy_wrote_is_a_400_before_any_call(
    server: ScriptedServer,
) -> None:
    app = create_app(make_policy(server), env={})
    with serving(app, free_port()) as url, _http.build_client() as http:
        body = {"model": "auto", "messages": USER}
        spaced = _post(http, url, body, **{HOP: "p1, send this upstream"})
        empty_part = _post(http, url, body, **{HOP: "p1,,p2"})
    for answer in (spaced, empty_part):
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_hop_header" and error["param"] == HOP
    assert server.requests == []
