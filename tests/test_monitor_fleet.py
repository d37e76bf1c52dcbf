"""The quality monitor across a fleet: two proxy processes sharing one real Redis.

What one worker measures, the other acts on; each change of state is logged by one of them;
the proxy says which turns were shadowed and exports the monitor's series on /metrics; a
Redis that dies never fails a turn. The Redis script is checked against the in-process
reference on the same records.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import ProxyProcess  # noqa: E402
from redisfix import RedisServer  # noqa: E402
from routerkit import make_policy, tracked  # noqa: E402

from tiered_router import Router, Turn, _http  # noqa: E402
from tiered_router.state import MemoryStateStore, MonitorRules  # noqa: E402
from tiered_router.state.redis_store import RedisStateStore  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MONITOR = {
    "shadow_rate": 1.0,
    "target": 0.8,
    "enforce": True,
    "window": 20,
    "min_compared": 5,
    "explore": 0.0,
    "refresh_s": 0,
}
RULES = MonitorRules(window=20, min_compared=11, target=0.8, enforce=True)
ASK = "I am in Lyon, flying from Paris. Weather here?"


def call(city: str) -> Reply:
    return Reply.tool_calls([("get_weather", {"city": city})])


@pytest.fixture
def http() -> Iterator[_http.Client]:
    with _http.build_client() as client:
        yield client


def test_the_redis_script_keeps_the_reference_window(redis_server: RedisServer) -> None:
    rng = random.Random(3)
    store = RedisStateStore(redis_server.url, prefix="ref", timeout_s=1.0)
    memory = MemoryStateStore()
    try:
        for _ in range(120):
            matched = rng.random() < 0.85
            got = store.monitor_record("json", matched, rules=RULES)
            want = memory.monitor_record("json", matched, rules=RULES)
            assert got == want
        assert store.monitor_snapshot("json", rules=RULES) == memory.monitor_snapshot(
            "json", rules=RULES
        )
    finally:
        store.close()


def _wait_compared(store: RedisStateStore, n: int) -> None:
    deadline = time.monotonic() + 10
    while store.monitor_snapshot("tools", rules=RULES).total < n:
        assert time.monotonic() < deadline, "the shadow calls did not land"
        time.sleep(0.02)


def test_one_worker_measures_the_other_acts(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    state = {"type": "redis", "url": redis_server.url, "prefix": "fleet"}
    policy = make_policy(server, retries=(0, 0), state=state, monitor=MONITOR)
    body = {"tools": TOOLS}
    store = RedisStateStore(redis_server.url, prefix="fleet", timeout_s=1.0)
    a = ProxyProcess(policy, tmp_path, name="a").start()
    b = ProxyProcess(policy, tmp_path, name="b").start()
    try:
        server.default = call("Lyon")
        for i in range(15):  # right answers, compared on both workers
            worker = a if i % 2 else b
            response = worker.chat(http, ASK, **body)
            assert response.status_code == 200
            assert response.headers["x-tiered-router-tier"] == "fast"
            assert response.headers["x-tiered-router-shadowed"] == "true"
        _wait_compared(store, 15)
        server.script([call("Paris")], model="fast-model")  # one wrong answer, on A
        wrong = a.chat(http, ASK, **body)
        assert wrong.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == (
            '{"city": "Paris"}'
        )
        _wait_compared(store, 16)
        tightened = b.chat(http, ASK, **body)  # B acts on what A measured
        metrics = a.metrics(http)
    finally:
        a.stop()
        b.stop()
        snapshot = store.monitor_snapshot("tools", rules=RULES)
        store.close()
    assert tightened.headers["x-tiered-router-tier"] == "frontier"
    assert tightened.headers["x-tiered-router-rule"] == "monitor"
    assert "x-tiered-router-shadowed" not in tightened.headers
    assert (snapshot.compared, snapshot.matched, snapshot.state) == (16, 15, "enforcing")
    changes = [line for line in (a.log() + b.log()).splitlines() if "ok -> enforcing" in line]
    assert len(changes) == 1  # logged once, by the worker whose record changed the state
    assert metrics['tiered_router_monitor_enforcing{kind="tools"}'] == 1.0
    assert metrics['tiered_router_monitor_compared_total{kind="tools"}'] == 8  # A's own
    assert metrics['tiered_router_monitor_matched_total{kind="tools"}'] == 7
    assert metrics['tiered_router_monitor_target{kind="tools"}'] == 0.8
    assert metrics['tiered_router_monitor_matched_share{kind="tools"}'] == 15 / 16
    assert 0 < metrics['tiered_router_monitor_lower_bound{kind="tools"}'] < 0.8
    assert metrics['tiered_router_monitor_shadow_calls_total{kind="tools",outcome="matched"}'] == 7
    assert metrics['tiered_router_monitor_compared_total{kind="json"}'] == 0


def test_a_dead_redis_never_fails_a_turn(server: ScriptedServer, redis_server: RedisServer) -> None:
    policy = make_policy(server, retries=(0, 0), monitor=MONITOR)
    store = RedisStateStore(redis_server.url, prefix="dead", timeout_s=0.2, retry_s=30)
    router = tracked(Router(policy, state=store))
    server.default = call("Lyon")
    redis_server.stop()
    turn = Turn([{"role": "user", "content": ASK}], tools=TOOLS)
    result = router.complete(turn)
    router.drain_shadows()
    assert result.tier == "fast" and result.shadowed
    q = router.quality()["tools"]
    assert (q.compared, q.matched) == (1, 1)  # kept in this process meanwhile
    store.close()
