"""Shared task totals stay exact under load against a healthy Redis, and a bad URL is refused.

The sweep runs ``benchmarks/bench_task_redis.py`` (its own redis-server, scripted upstream
and ``tiered-router serve`` processes) at a size that takes about a minute: through the proxy
with 1 and 2 workers at concurrency 1, 8, 32 and 64, and cold in-process bursts of 5, 50 and
200 concurrent turns. Every run must hold exactly the turns sent, with no fallback.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("redis")
pytest.importorskip("uvicorn")

from redisfix import SKIP_MESSAGE, RedisServer  # noqa: E402
from test_cli import invoke, write_policy  # noqa: E402

from tiered_router import PolicyError, load_policy  # noqa: E402
from tiered_router.state.redis_store import RedisStateStore, StateStoreUnavailable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECRET_URL = "http://:hunter2-secret@127.0.0.1:6379/0"


def test_the_task_sweep_is_exact_through_the_proxy_and_in_cold_bursts() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip(SKIP_MESSAGE)
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_task_redis.py"), "--json"]
    command += ["--turns", "256", "--tasks", "4", "--workers", "1", "2"]
    command += ["--concurrency", "1", "8", "32", "64", "--bursts", "5", "50", "200"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TIERED_ROUTER_API_KEYS", None)
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    shapes = [(r["part"], r["workers"], r["concurrency"]) for r in rows]
    assert shapes == [("burst", 0, n) for n in (5, 50, 200)] + [
        ("proxy", w, c) for w in (1, 2) for c in (1, 8, 32, 64)
    ]
    wrong = [r for r in rows if not r["exact"]]
    assert wrong == [], wrong
    for row in rows:
        assert row["steps"] == row["turns"] == row["ok"]
        assert row["fallbacks"] == 0


def test_a_url_with_a_wrong_scheme_is_refused_at_load(tmp_path: Path) -> None:
    extra = f'state: {{type: redis, url: "{SECRET_URL}"}}\n'
    path = write_policy(tmp_path, "http://127.0.0.1:9/v1", extra)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert "state.url" in message
    assert "redis://, rediss:// or unix://" in message and "'http'" in message
    assert "hunter2" not in message
    code, out, err = invoke("validate", path)
    assert code == 1
    assert "state.url" in err and "hunter2" not in out + err
    assert "Traceback" not in out + err
    with pytest.raises(ValueError, match="redis://, rediss:// or unix://") as direct:
        RedisStateStore("127.0.0.1:6379")
    assert "hunter2" not in str(direct.value)


def test_one_slow_command_does_not_take_redis_down(redis_server: RedisServer) -> None:
    """A command that times out falls back for itself; the next one goes to Redis again."""

    async def main() -> tuple[int, int]:
        store = RedisStateStore(redis_server.url, prefix="one", timeout_s=0.1, retry_s=60)
        await store.atask_snapshot("t")
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StateStoreUnavailable, match="TimeoutError"):
                await store.atask_snapshot("t")
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        # retry_s is 60 s: a store that took one timeout for an outage would refuse here
        first = (await store.atask_snapshot("t")).steps
        from tiered_router.state import TaskDelta, TaskRules

        recorded = await store.atask_record("t", TaskDelta(cost=0.1), rules=TaskRules())
        await store.aclose()
        return first, recorded.steps

    assert asyncio.run(main()) == (0, 1)


def test_an_answer_that_came_while_the_loop_was_busy_is_not_a_timeout(
    redis_server: RedisServer,
) -> None:
    """Redis answered in time; the proxy's own loop was busy: that is no Redis failure."""
    import time

    import redis

    from tiered_router.state import TaskDelta, TaskRules

    async def main() -> tuple[int, float]:
        store = RedisStateStore(
            redis_server.url, prefix="busy", timeout_s=0.05, retry_s=60, confirm_writes=True
        )
        await store.atask_record("t", TaskDelta(cost=0.1), rules=TaskRules())
        await store.flush()  # the script is loaded and the pool's connections are open
        with redis.Redis.from_url(redis_server.url) as pauser:
            pauser.execute_command("CLIENT", "PAUSE", 20, "WRITE")  # Redis answers at ~20 ms
        # the record is written at once; from 5 ms to 305 ms the loop is busy elsewhere, so
        # the 50 ms bound runs out while Redis's (timely) answer waits in the socket
        asyncio.get_running_loop().call_later(0.005, time.sleep, 0.3)
        started = time.perf_counter()
        steps = (await store.atask_record("t", TaskDelta(cost=0.1), rules=TaskRules())).steps
        took = time.perf_counter() - started
        await store.aclose()
        return steps, took

    steps, took = asyncio.run(main())
    assert steps == 2
    assert took >= 0.3  # the loop really was busy past the bound


def test_a_redis_without_the_scripts_gets_them_while_the_loop_is_busy(
    redis_server: RedisServer,
) -> None:
    """A cold or restarted Redis (no scripts) under a loaded process: calls still go through.

    The loop is held 30 ms at a time, again and again, as a cold burst's first turns do.
    Loading a script is three round trips; under one 50 ms bound for all of them the load
    was cut short on every call, three failures took Redis down, and no step was recorded.
    """
    import time

    import redis

    from tiered_router.state import TaskDelta, TaskRules

    with redis.Redis.from_url(redis_server.url) as admin:
        admin.script_flush()

    async def main() -> tuple[list[int], int]:
        store = RedisStateStore(
            redis_server.url, prefix="cold", timeout_s=0.05, retry_s=60, confirm_writes=True
        )
        busy = True

        async def hog() -> None:
            while busy:
                await asyncio.sleep(0)
                time.sleep(0.03)

        hogging = asyncio.ensure_future(hog())
        steps = []
        try:
            for _ in range(5):
                record = await store.atask_record("t", TaskDelta(cost=0.1), rules=TaskRules())
                steps.append(record.steps)
        finally:
            busy = False
            await hogging
        failures = int(store.background_failures)
        await store.aclose()
        return steps, failures

    steps, failures = asyncio.run(main())
    assert steps == [1, 2, 3, 4, 5]
    assert failures == 0
