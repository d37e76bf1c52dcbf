"""Two proxy processes sharing one real Redis: breakers, task budgets, exact counts, and no
lost turn when Redis dies mid-run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import ProxyProcess  # noqa: E402
from redisfix import RedisServer  # noqa: E402
from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.policy import BreakerConfig  # noqa: E402
from tiered_router.state.redis_store import RedisStateStore  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

FALLBACKS = "tiered_router_state_fallbacks_total"


def shared_policy(
    upstream: ScriptedServer, redis_server: RedisServer, **overrides: Any
) -> dict[str, Any]:
    state = {"type": "redis", "url": redis_server.url, "prefix": "pair"}
    return make_policy(upstream, retries=(0, 0), state=state, **overrides)


class Pair:
    def __init__(self, policy: dict[str, Any], directory: Path) -> None:
        self.a = ProxyProcess(policy, directory, name="a")
        self.b = ProxyProcess(policy, directory, name="b")

    def __enter__(self) -> Pair:
        self.a.start()
        self.b.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.a.stop()
        self.b.stop()


@pytest.fixture
def http() -> Iterator[_http.Client]:
    with _http.build_client() as client:
        yield client


def test_a_breaker_opened_by_one_process_is_seen_by_the_other(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.text("from the frontier")
    server.script([Reply.status(500), Reply.status(500)], model="fast-model")
    resilience = {"breaker": {"consecutive_failures": 2, "cooldown_s": 300}}
    with Pair(shared_policy(server, redis_server, resilience=resilience), tmp_path) as pair:
        for _ in range(2):  # two failures in a row on A open the fast breaker
            response = pair.a.chat(http)
            assert response.status_code == 200
            assert response.headers["x-tiered-router-escalated"] == "true"
        response = pair.b.chat(http)
        b_metrics = pair.b.metrics(http)
    assert response.status_code == 200
    assert response.headers["x-tiered-router-tier"] == "frontier"
    # B never called the fast upstream: the breaker A opened routed it around
    assert len(server.requests_for("fast-model")) == 2
    assert b_metrics['tiered_router_escalations_total{reason="circuit_open"}'] == 1
    assert b_metrics.get(FALLBACKS, 0) == 0


def test_a_task_budget_holds_across_both_processes(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.json({"ok": True})
    server.script([Reply.bad_json()], model="fast-model")  # the first draft fails the gate
    json_body = {"response_format": {"type": "json_object"}}
    policy = shared_policy(server, redis_server, task={"max_escalations": 1})
    with Pair(policy, tmp_path) as pair:
        first = pair.a.chat(http, tiered_router={"task_id": "ticket-7"}, **json_body)
        assert first.headers["x-tiered-router-escalated"] == "true"  # spends the budget
        second = pair.b.chat(http, tiered_router={"task_id": "ticket-7"}, **json_body)
        other = pair.b.chat(http, tiered_router={"task_id": "ticket-8"}, **json_body)
    assert second.status_code == 200
    assert second.headers["x-tiered-router-tier"] == "frontier"
    assert second.headers["x-tiered-router-rule"] == "task.budget.escalations"
    assert other.headers["x-tiered-router-tier"] == "fast"  # another task is not affected
    store = RedisStateStore(redis_server.url, prefix="pair")
    snap = store.task_snapshot("ticket-7")
    store.close()
    assert snap.steps == 2 and snap.escalations == 1
    assert snap.rules == {"task.budget.escalations": 1}


def test_a_task_budget_holds_across_both_processes_with_the_task_cache_on(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    """b uses its copy of the task's totals; a's escalation reaches it as a note."""
    server.default = Reply.json({"ok": True})
    json_body = {"response_format": {"type": "json_object"}}
    policy = shared_policy(server, redis_server, task={"max_escalations": 1})
    policy["state"]["task_cache_s"] = 60
    saved_metric = "tiered_router_state_task_reads_saved_total"
    with Pair(policy, tmp_path) as pair:
        task = {"task_id": "ticket-9"}
        b_turns = 0
        while pair.b.metrics(http).get(saved_metric, 0) == 0:  # until b uses its copy
            assert b_turns < 20, "b never used its copy of the task"
            assert pair.b.chat(http, tiered_router=task, **json_body).status_code == 200
            b_turns += 1
        server.script([Reply.bad_json()], model="fast-model")  # a's draft fails the gate
        first = pair.a.chat(http, tiered_router=task, **json_body)
        assert first.headers["x-tiered-router-escalated"] == "true"  # spends the budget
        time.sleep(1.0)  # the note of a's record reaches b (well under a millisecond here)
        saved = pair.b.metrics(http)[saved_metric]
        second = pair.b.chat(http, tiered_router=task, **json_body)
        saved_after = pair.b.metrics(http)[saved_metric]
    assert second.status_code == 200
    assert second.headers["x-tiered-router-tier"] == "frontier"
    assert second.headers["x-tiered-router-rule"] == "task.budget.escalations"
    assert saved_after == saved  # the note dropped b's copy: that turn read Redis
    store = RedisStateStore(redis_server.url, prefix="pair")
    snap = store.task_snapshot("ticket-9")
    store.close()
    assert snap.steps == b_turns + 2 and snap.escalations == 1


def test_concurrent_turns_from_both_processes_add_up_exactly(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.text("hello there")
    resilience = {"breaker": {"window_s": 3600}}  # every call of the run stays counted
    policy = shared_policy(server, redis_server, resilience=resilience)
    # a patient timeout: this test is about atomicity, not about a loaded machine's stalls
    policy["state"]["timeout_s"] = 2.0
    turns = 120
    with Pair(policy, tmp_path) as pair:

        def one(i: int) -> int:
            proxy = pair.a if i % 2 else pair.b
            with _http.build_client() as own:
                return int(proxy.chat(own, tiered_router={"task_id": "shared"}).status_code)

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(one, range(turns)))
        fallbacks = pair.a.metrics(http).get(FALLBACKS, 0) + pair.b.metrics(http).get(FALLBACKS, 0)
    # stopping the proxies flushed their write-behind breaker records
    assert statuses == [200] * turns
    store = RedisStateStore(redis_server.url, prefix="pair")
    snap = store.task_snapshot("shared")
    breaker = store.breaker_snapshot("fast", now=0.0, config=BreakerConfig(window_s=3600))
    store.close()
    assert fallbacks == 0  # every operation went to Redis
    assert snap.steps == turns
    assert snap.fast_served == turns
    assert breaker.calls == turns and breaker.failures == 0
    per_turn = snap.cost / turns
    assert per_turn > 0 and snap.cost == pytest.approx(per_turn * turns)


def test_killing_redis_mid_run_loses_no_turn(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.text("hello")
    policy = shared_policy(server, redis_server)
    policy["state"].update(timeout_s=0.05, retry_s=0.2)
    turns = 90
    with Pair(policy, tmp_path) as pair:

        def one(i: int) -> int:
            if i == turns // 3:
                redis_server.stop()  # SIGKILL: connections reset mid-run
            if i == 2 * turns // 3:
                redis_server.start()  # back, empty
            proxy = pair.a if i % 2 else pair.b
            with _http.build_client() as own:
                return int(proxy.chat(own, tiered_router={"task_id": f"t{i % 5}"}).status_code)

        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(one, range(turns)))
        time.sleep(0.3)  # past retry_s: the next turns use Redis again
        after = [int(pair.a.chat(http).status_code), int(pair.b.chat(http).status_code)]
        fallbacks = pair.a.metrics(http).get(FALLBACKS, 0) + pair.b.metrics(http).get(FALLBACKS, 0)
        readyz = http.get(f"{pair.a.url}/readyz").json()
    assert statuses == [200] * turns
    assert after == [200, 200]
    assert fallbacks > 0  # the outage was counted
    assert readyz == {"status": "ready", "state": "ok"}


def test_per_key_limits_hold_across_both_processes(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.text("hello")
    limits = {"requests_per_minute": 3}
    policy = shared_policy(server, redis_server, server={"limits": limits})
    if time.time() % 60 > 50:  # keep the four requests inside one calendar minute
        time.sleep(61 - time.time() % 60)
    with Pair(policy, tmp_path) as pair:
        statuses = [pair.a.chat(http).status_code, pair.b.chat(http).status_code]
        statuses += [pair.a.chat(http).status_code]
        over = pair.b.chat(http)
    assert statuses == [200, 200, 200]
    assert over.status_code == 429
    assert over.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(over.headers["retry-after"]) <= 60
    assert len(server.requests) == 3  # the refused request never went upstream


def test_a_spend_limit_holds_across_both_processes(
    server: ScriptedServer, redis_server: RedisServer, tmp_path: Path, http: _http.Client
) -> None:
    server.default = Reply.text("hello")
    limits = {"spend_usd_per_day": 1e-9}  # the first turn spends it
    policy = shared_policy(server, redis_server, server={"limits": limits})
    with Pair(policy, tmp_path) as pair:
        first = pair.a.chat(http)
        deadline = time.monotonic() + 10
        while True:  # the spend is written in the background, right after the turn
            later = pair.b.chat(http)
            if later.status_code == 429 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert first.status_code == 200
    assert later.status_code == 429
    assert later.json()["error"]["code"] == "spend_limit_reached"
