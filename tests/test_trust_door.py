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
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from routerkit import make_policy

from tiered_router import InvalidRequest, Router, Turn, _http
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

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


# -- finding 3: every caller field checked once, before any attempt -----------------------------

BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("stop", b'"stop": 5', "stop"),
    ("stop", b'"stop": [1, 2]', "stop[0]"),
    ("stop", b'"stop": true', "stop"),
    ("stop", b'"stop": [["x"]]', "stop[0]"),
    (
        "stop",
        b'"stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]',
        "stop",
    ),
    ("nan", b'"temperature": NaN', "temperature"),
    ("infinity", b'"top_p": Infinity', "top_p"),
    ("huge", b'"logit_bias": {"50256": -1e400}', "logit_bias.50256"),
]


def _raw(extra: bytes, messages: bytes = b'[{"role": "user", "content": "Say hi."}]') -> bytes:
    return b'{"model": "auto", "messages": ' + messages + (b", " + extra if extra else b"") + b"}"


def _dlmserve_policy(server: ScriptedServer) -> dict[str, Any]:
    """A fast backend whose dialect applies ``stop`` to the reply itself (client-side)."""
    policy = make_policy(server)
    policy["backends"]["fast"]["options"] = {"dialect": "dlmserve"}
    return policy


def test_a_callers_bad_field_is_a_400_and_never_a_breaker_count(server: ScriptedServer) -> None:
    """32 concurrent bad requests through the proxy: each a 400 naming the field, none sent.

    On the old code a bad ``stop`` raised TypeError in the dlmserve dialect (retried as a
    backend failure, the fast breaker open after two requests), an unknown role ended in
    502 ``all_tiers_failed``, and NaN reached the upstream as ``null``.
    """
    server.script([Reply.text("fast and fine")] * 2, model="fast-model")
    app = create_app(_dlmserve_policy(server), env={})
    bodies = [_raw(extra) for _, extra, _ in BAD_BODIES]
    params = [param for _, _, param in BAD_BODIES]
    bodies.append(_raw(b"", b'[{"role": "hacker", "content": "x"}]'))
    params.append("messages[0].role")
    bodies.append(
        _raw(b"", b'[{"role": "user", "content": [{"type": "text", "text": "x"}], "w": NaN}]')
    )
    params.append("messages[0].w")
    tool = (
        b'[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
        b'"properties": {"n": {"type": "number", "maximum": Infinity}}}}}]'
    )
    bodies.append(_raw(b'"tools": ' + tool))
    params.append("tools[0].function.parameters.properties.n.maximum")
    headers = {"content-type": "application/json"}
    with serving(app, free_port()) as url, _http.build_client() as http:

        def send(i: int) -> Any:
            return http.post(
                f"{url}/v1/chat/completions", content=bodies[i % len(bodies)], headers=headers
            )

        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(send, range(32 * 2)))
        honest = [
            _post(http, url, {"model": "auto", "messages": USER, "stop": ["END"]}) for _ in range(2)
        ]
    for i, answer in enumerate(answers):
        assert answer.status_code == 400, (i, answer.text)
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == params[i % len(bodies)], error
    assert [r.body.get("model") for r in server.requests] == ["fast-model"] * 2  # honest only
    for answer in honest:  # the fast breaker never opened
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-tiered-router-tier"] == "fast"
        assert answer.headers["x-tiered-router-escalated"] == "false"
    assert "stop" not in server.requests[-1].body  # dlmserve: stop applied to the reply


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("stop", 5, "stop"),
        ("stop", [1, 2], "stop[0]"),
        ("stop", True, "stop"),
        ("stop", [["x"]], "stop[0]"),
        ("extra_body", 5, "extra_body"),
        ("temperature", math.nan, "temperature"),
        ("top_p", math.inf, "top_p"),
    ],
)
def test_in_process_and_drop_in_a_bad_field_is_a_typed_error_before_any_call(
    server: ScriptedServer, field: str, value: Any, param: str
) -> None:
    openai = pytest.importorskip("openai")
    from tiered_router.openai import TieredOpenAI

    router = Router(_dlmserve_policy(server))
    with pytest.raises(InvalidRequest) as raised:
        router.complete(Turn.from_openai(messages=USER, **{field: value}))
    assert raised.value.param == param
    with TieredOpenAI(_dlmserve_policy(server)) as client:
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model="auto", messages=USER, **{field: value})
    assert bad.value.status_code == 400
    assert param in str(bad.value)
    with pytest.raises(InvalidRequest) as role:
        router.complete(Turn([{"role": "hacker", "content": "x"}]))
    assert role.value.param == "messages[0].role"
    assert server.requests == []


# -- finding 4: what the router reads from model text is bounded --------------------------------

SET_VALUE = {
    "type": "function",
    "function": {
        "name": "set_value",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "n": {"type": "integer"}},
        },
    },
}
HUGE_NUMBER = "1" * 400
HUGE_INTEGER = "7" * 5000
UNREADABLE_DRAFTS = [
    # XML style (Qwen3-Coder): a 400-digit number
    "<tool_call>\n<function=set_value>\n<parameter=x>\n"
    + HUGE_NUMBER
    + "\n</parameter>\n</function>\n</tool_call>",
    # GLM style: a 5,000-digit integer
    f"<tool_call>set_value<arg_key>n</arg_key><arg_value>{HUGE_INTEGER}</arg_value></tool_call>",
    # invoke blocks: a number beyond the float range, and an array holding one
    '<function_calls><invoke name="set_value"><parameter name="x">1e400</parameter>'
    "</invoke></function_calls>",
]


@pytest.mark.anyio
@pytest.mark.parametrize("draft", UNREADABLE_DRAFTS, ids=["xml-400-digits", "glm-5000", "1e400"])
async def test_a_draft_with_a_number_the_router_cannot_read_fails_the_gate(
    server: ScriptedServer, draft: str
) -> None:
    """The draft escalates; on the old code ``acomplete`` raised OverflowError/ValueError."""
    server.script([Reply.text(draft)], model="fast-model")
    server.script([Reply.tool_calls([("set_value", {"x": 1.5})])], model="frontier-model")
    sink = MemorySink()
    policy = make_policy(server, rules=[{"name": "all-fast", "when": {}, "tier": "fast"}])
    async with Router(policy, sinks=[sink]) as router:
        result = await router.acomplete(Turn(USER, tools=[SET_VALUE]))
    assert result.tier == "frontier" and result.escalated
    assert result.completion.tool_calls[0].arguments == '{"x": 1.5}'
    fast = sink.traces[-1].attempts[0]
    assert fast.verdict is not None and not fast.verdict.passed


def test_through_the_proxy_an_unreadable_draft_is_a_200_from_the_frontier(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text(d) for d in UNREADABLE_DRAFTS], model="fast-model")
    server.script(
        [Reply.tool_calls([("set_value", {"x": 2})])] * len(UNREADABLE_DRAFTS),
        model="frontier-model",
    )
    policy = make_policy(server, rules=[{"name": "all-fast", "when": {}, "tier": "fast"}])
    app = create_app(policy, env={})
    body = {"model": "auto", "messages": USER, "tools": [SET_VALUE]}
    with serving(app, free_port()) as url, _http.build_client() as http:
        answers = [_post(http, url, body) for _ in UNREADABLE_DRAFTS]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-tiered-router-tier"] == "frontier"
        assert answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
            "set_value"
        )


@pytest.mark.anyio
async def test_a_panel_of_huge_boxed_fractions_is_not_comparable_and_never_raises(
    server: ScriptedServer,
) -> None:
    """Three drafts box a 401-digit fraction: no answer can be read, so none is "the same"."""
    huge = "\\boxed{\\frac{1" + "0" * 400 + "}{1}}"
    other = "\\boxed{\\frac{2" + "0" * 400 + "}{1}}"  # a different number, as big
    server.script(
        [Reply.text(f"So {huge}"), Reply.text(f"So {huge}"), Reply.text(f"So {other}")],
        model="fast-model",
    )
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        drafts={"k": 3, "when": ["all"], "early": False, "n": False},
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
    )
    async with Router(policy, sinks=[sink]) as router:
        result = await router.acomplete(Turn([{"role": "user", "content": "What is it?"}]))
    panel = sink.traces[-1].panel
    assert panel is not None and panel["comparable"] is False and panel["agreed"] is False
    assert "3 of 3 drafts have no checkable answer" in panel["reason"]
    assert result.tier == "frontier" and result.escalated  # the frontier's "ok"


# -- finding 9: a killed server's metrics directory is cleaned up ------------------------------


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the workers")
def test_a_killed_multi_worker_server_leaves_no_metrics_directory_behind(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """SIGKILL of ``serve --workers 2`` (and its workers): the next start removes its files.

    On the old code the directory had a random name and stayed in the temporary directory
    for good, one more per killed server.
    """
    pytest.importorskip("prometheus_client")
    from proxyproc import ProxyProcess

    temp = tmp_path / "tmp"
    temp.mkdir()
    server.default = Reply.text("hi")
    policy = make_policy(server, retries=(0, 0))
    first = ProxyProcess(policy, tmp_path, workers=2, env={"TMPDIR": str(temp)}, name="first")
    first.start()
    try:
        with _http.build_client() as http:
            assert first.chat(http).status_code == 200
        left = sorted(p.name for p in temp.iterdir() if p.name.startswith("tiered-router-metrics"))
        assert len(left) == 1 and any(temp.joinpath(left[0]).iterdir())  # the workers' files
        assert first.process is not None
        pids = [first.process.pid, *_descendants(first.process.pid)]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        first.process.wait(timeout=10)
    finally:
        first.stop()
    assert temp.joinpath(left[0]).is_dir()  # a killed server cannot clean up after itself
    second = ProxyProcess(policy, tmp_path, workers=2, env={"TMPDIR": str(temp)}, name="second")
    second.start()
    try:
        now = sorted(p.name for p in temp.iterdir() if p.name.startswith("tiered-router-metrics"))
        assert left[0] not in now and len(now) == 1
        with _http.build_client() as http:
            assert second.chat(http).status_code == 200
            metrics = second.metrics(http)
        # a restart counts from zero: nothing of the killed server's numbers is added in
        key = 'tiered_router_http_responses_total{code="200",path="/v1/chat/completions"}'
        assert metrics.get(key) == 1.0, {k: v for k, v in metrics.items() if "http" in k}
    finally:
        second.stop()
    assert not any(p.name.startswith("tiered-router-metrics") for p in temp.iterdir())
