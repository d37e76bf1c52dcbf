"""The Redis state store against a real redis-server: same answers as the in-process store,
atomic under concurrency, TTLs on every key, and a fast, typed failure when Redis is gone."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("redis")

import redis  # noqa: E402
from redisfix import RedisServer  # noqa: E402
from statekit import RULES, TASK_DELTAS  # noqa: E402

from tiered_router.policy import BreakerConfig  # noqa: E402
from tiered_router.state import MemoryStateStore, TaskDelta  # noqa: E402
from tiered_router.state._redis_link import _DOWN_AFTER, _WARM  # noqa: E402
from tiered_router.state.redis_store import RedisStateStore, StateStoreUnavailable  # noqa: E402

CONFIG = BreakerConfig(
    consecutive_failures=3, min_calls=4, failure_ratio=0.5, window_s=10, cooldown_s=5
)
HOUR = BreakerConfig(window_s=3600)  # every call of a slow run stays in the window


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_server.url, prefix="t", clock="caller", timeout_s=1.0, cache_s=0)
    yield s
    s.close()


def client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


# a script of breaker operations, with the clock value of each
BREAKER_SCRIPT: list[tuple[str, float, Any]] = [
    ("allow", 0.0, None),
    ("record", 0.1, "success"),
    ("record", 0.2, "failure"),
    ("record", 0.3, "neutral"),
    ("record", 0.4, "failure"),
    ("snapshot", 0.5, None),
    ("record", 0.6, "failure"),  # third in a row: opens
    ("allow", 1.0, None),  # open: refused
    ("record", 1.1, "failure"),  # admitted before it opened: changes nothing
    ("snapshot", 1.2, None),
    ("allow", 6.0, None),  # cooldown over: the trial
    ("allow", 6.1, None),  # a second caller is refused
    ("record-trial", 6.2, "neutral"),  # the trial ends without a verdict: released
    ("allow", 6.3, None),  # a new trial
    ("record-trial", 6.4, "failure"),  # fails: open again
    ("allow", 6.5, None),
    ("allow", 11.5, None),  # half-open again
    ("allow", 50.0, None),  # the trial's lease (30 s) ran out: a new one
    ("record-trial", 50.1, "success"),  # closes
    ("snapshot", 50.2, None),
    ("record", 60.0, "failure"),
    ("record", 60.1, "failure"),
    ("record", 60.2, "success"),
    ("record", 60.3, "failure"),
    ("snapshot", 60.4, None),
]


def run_breaker_script(s: Any) -> list[Any]:
    out: list[Any] = []
    token: str | None = None
    for op, now, arg in BREAKER_SCRIPT:
        if op == "allow":
            admission = s.breaker_allow("fast", now=now, config=CONFIG)
            token = admission.token or token
            out.append((op, admission.allowed, admission.state, admission.token is not None))
        elif op == "record":
            out.append((op, s.breaker_record("fast", arg, now=now, config=CONFIG)))
        elif op == "record-trial":
            out.append((op, s.breaker_record("fast", arg, now=now, config=CONFIG, token=token)))
            token = None
        else:
            snap = s.breaker_snapshot("fast", now=now, config=CONFIG)
            out.append((op, snap.state, snap.consecutive_failures, snap.trial_in_flight))
    return out


def test_breaker_answers_like_the_memory_store(store: RedisStateStore) -> None:
    expected = run_breaker_script(MemoryStateStore())
    assert run_breaker_script(store) == expected
    # the script went through every state
    assert {row[2] for row in expected if row[0] == "allow"} == {"closed", "open", "half_open"}


def test_task_totals_and_lock_like_the_memory_store(store: RedisStateStore) -> None:
    memory = MemoryStateStore()
    for delta in TASK_DELTAS:
        want = memory.task_record("t1", delta, rules=RULES)
        got = store.task_record("t1", delta, rules=RULES)
        assert got.cost == pytest.approx(want.cost)
        assert got.latency_s == pytest.approx(want.latency_s)
        assert got.recent.keys() == want.recent.keys()
        for backend, pairs in want.recent.items():
            assert [(pytest.approx(a), b) for a, b in pairs] == list(got.recent[backend])
        exact = ("cost", "latency_s", "recent")
        assert {k: v for k, v in vars_of(got).items() if k not in exact} == {
            k: v for k, v in vars_of(want).items() if k not in exact
        }
    final = store.task_snapshot("t1")
    assert final.steps == len(TASK_DELTAS)
    assert final.locked_by is None  # locked by the stall, unlocked by two clean turns
    assert final.rules == {"task.budget.cost": 1, "task.stall": 1, "task.locked": 1}
    assert len(final.recent["fast"]) == 3  # latency_window
    assert store.task_snapshot("unknown") == memory.task_snapshot("unknown")


def vars_of(snapshot: Any) -> dict[str, Any]:
    return {name: getattr(snapshot, name) for name in snapshot.__dataclass_fields__}


def test_every_key_has_a_ttl(store: RedisStateStore, redis_server: RedisServer) -> None:
    store.breaker_record("fast", "failure", now=1.0, config=CONFIG)
    store.task_record("t1", TASK_DELTAS[0], rules=RULES)
    with client(redis_server) as r:
        keys = sorted(r.keys("t:*"))
        assert keys == ["t:breaker:fast", "t:task:t1"]
        for key in keys:
            assert 0 < r.pttl(key) <= 86_400_000


def test_server_clock_is_shared_and_async_twins_agree(redis_server: RedisServer) -> None:
    import asyncio

    config = BreakerConfig(consecutive_failures=2, cooldown_s=60)
    one = RedisStateStore(redis_server.url, prefix="s")
    two = RedisStateStore(redis_server.url, prefix="s")

    async def main() -> None:
        # each process passes its own (wildly different) clock: the server's TIME decides
        await one.abreaker_record("fast", "failure", now=5.0, config=config)
        await one.abreaker_record("fast", "failure", now=1e9, config=config)
        assert (await two.abreaker_allow("fast", now=-3.0, config=config)).allowed is False
        snap = await two.abreaker_snapshot("fast", now=0.0, config=config)
        assert snap.state == "open" and snap.opened_at is not None
        assert abs(snap.opened_at - time.time()) < 60
        task = await two.atask_record("t", TASK_DELTAS[0], rules=RULES)
        assert (await one.atask_snapshot("t")) == task
        await one.aclose()
        await two.aclose()

    asyncio.run(main())
    assert two.breaker_snapshot("fast", now=0.0, config=config).state == "open"
    two.close()


def test_concurrent_trials_admit_exactly_one(store: RedisStateStore) -> None:
    for now in (0.0, 0.1, 0.2):
        store.breaker_record("fast", "failure", now=now, config=CONFIG)
    tokens: list[str | None] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        tokens.append(store.breaker_allow("fast", now=10.0, config=CONFIG).token)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len([t for t in tokens if t is not None]) == 1


def _hammer(url: str, n: int) -> None:
    s = RedisStateStore(url, prefix="h", timeout_s=2.0)
    for _ in range(n):
        s.task_record("shared", TaskDelta(cost=0.25, latency_s=0.5, escalated=True), rules=RULES)
        s.breaker_record("fast", "success", now=0.0, config=HOUR)
    s.close()


def test_two_processes_updating_one_task_stay_exact(redis_server: RedisServer) -> None:
    ctx = multiprocessing.get_context("spawn")
    n = 200
    procs = [ctx.Process(target=_hammer, args=(redis_server.url, n)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    s = RedisStateStore(redis_server.url, prefix="h")
    snap = s.task_snapshot("shared")
    assert snap.steps == 2 * n
    assert snap.escalations == 2 * n
    assert snap.cost == 0.25 * 2 * n  # exact: quarters add up exactly in binary
    assert snap.latency_s == 0.5 * 2 * n
    assert s.breaker_snapshot("fast", now=0.0, config=HOUR).calls == 2 * n
    s.close()


def test_dead_redis_fails_fast_and_typed_then_recovers(redis_server: RedisServer) -> None:
    redis_server.stop()
    redis_server.password = "hunter2"
    redis_server.start()
    s = RedisStateStore(
        redis_server.url.replace("127.0.0.1", ":hunter2@127.0.0.1"),
        prefix="d",
        timeout_s=0.2,
        retry_s=0.3,
        cache_s=0,
    )
    assert s.ping()
    s.breaker_record("fast", "failure", now=0.0, config=CONFIG)
    redis_server.stop()
    with pytest.raises(StateStoreUnavailable) as first:
        s.breaker_allow("fast", now=0.0, config=CONFIG)
    assert first.value.store == f"127.0.0.1:{redis_server.port}"
    assert "hunter2" not in str(first.value) and "hunter2" not in repr(s)
    # one failure is not an outage: each call tries Redis until _DOWN_AFTER in a row failed
    for _ in range(_DOWN_AFTER - 1):
        with pytest.raises(StateStoreUnavailable, match="failed: ConnectionError"):
            s.task_snapshot("t")
    # then, inside retry_s, the store refuses without touching the network
    with pytest.raises(StateStoreUnavailable, match="retrying after"):
        s.task_snapshot("t")
    assert not s.ping()
    redis_server.start()  # back, empty: the scripts are loaded again on first use
    time.sleep(0.35)
    assert s.breaker_allow("fast", now=0.0, config=CONFIG).allowed is True
    assert s.task_record("t", TASK_DELTAS[0], rules=RULES).steps == 1
    s.close()


def test_slow_redis_is_bounded_by_the_timeout(redis_server: RedisServer) -> None:
    import os
    import signal

    s = RedisStateStore(redis_server.url, prefix="w", timeout_s=0.1, retry_s=60, cache_s=0)
    assert s.ping()
    assert redis_server.process is not None
    os.kill(redis_server.process.pid, signal.SIGSTOP)  # hung, not dead
    try:
        # the read times out after timeout_s (redis-py's own retries are off)
        with pytest.raises(StateStoreUnavailable, match="TimeoutError"):
            s.breaker_allow("fast", now=0.0, config=CONFIG)
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)
    s.close()


def test_a_hung_redis_bounds_every_async_call_by_the_timeout(redis_server: RedisServer) -> None:
    """The async client's calls are bounded by one timeout each (not per socket operation)."""
    import asyncio
    import os
    import signal

    delta = TaskDelta(cost=1.0, latency_s=0.1)

    async def main() -> list[tuple[str, float]]:
        s = RedisStateStore(
            redis_server.url,
            prefix="h",
            timeout_s=0.1,
            retry_s=0,
            cache_s=0,
            connect_timeout_s=0.2,
        )
        await s.atask_snapshot("t")  # connected, and the task known: its record is sent
        await s.flush()  # the pool's warm connections are open
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)  # hung, not dead
        took: list[tuple[str, float]] = []
        try:
            for name, call in (
                ("allow", lambda: s.abreaker_allow("fast", now=0.0, config=CONFIG)),
                ("read", lambda: s.atask_snapshot("t")),
                # a sent record needs a connection of its own, whose handshake a hung
                # Redis does not answer either: bounded by connect_timeout_s
                ("record", lambda: s.atask_record("t", delta, rules=RULES)),
            ):
                started = time.perf_counter()
                with pytest.raises(StateStoreUnavailable, match="TimeoutError"):
                    await call()
                took.append((name, time.perf_counter() - started))
            await s.flush()
            assert s.background_failures == 0  # nothing was sent, so nothing went missing
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        await s.aclose()
        return took

    took = asyncio.run(main())
    assert [name for name, _ in took] == ["allow", "read", "record"]
    assert all(seconds < 1.0 for _, seconds in took), took


def test_closed_breaker_is_cached_and_successes_written_behind(
    redis_server: RedisServer,
) -> None:
    import asyncio

    config = BreakerConfig(consecutive_failures=2, cooldown_s=60)
    here = RedisStateStore(redis_server.url, prefix="c", cache_s=30)
    there = RedisStateStore(redis_server.url, prefix="c", cache_s=0)

    async def main() -> None:
        assert (await here.abreaker_allow("fast", now=0, config=config)).state == "closed"
        for _ in range(5):
            assert await here.abreaker_record("fast", "success", now=0, config=config) == "closed"
        await here.flush()  # the background writes all landed, exactly
        assert (await there.abreaker_snapshot("fast", now=0, config=config)).calls == 5
        # successes still waiting are written before a failure, so the run counts right
        await here.abreaker_allow("other", now=0, config=config)  # seen closed: cached
        for _ in range(3):
            await here.abreaker_record("other", "success", now=0, config=config)
        assert await here.abreaker_record("other", "failure", now=0, config=config) == "closed"
        snap = await there.abreaker_snapshot("other", now=0, config=config)
        assert (snap.calls, snap.failures, snap.consecutive_failures) == (4, 1, 1)
        # another process opens the breaker: this one keeps its cached "closed" for cache_s
        await there.abreaker_record("fast", "failure", now=0, config=config)
        await there.abreaker_record("fast", "failure", now=0, config=config)
        assert (await there.abreaker_allow("fast", now=0, config=config)).allowed is False
        assert (await here.abreaker_allow("fast", now=0, config=config)).allowed is True
        # its own failure is awaited and sees the open breaker at once
        state = await here.abreaker_record("fast", "failure", now=0, config=config)
        assert state == "open"
        assert (await here.abreaker_allow("fast", now=0, config=config)).allowed is False
        await here.aclose()
        await there.aclose()

    asyncio.run(main())
    assert here.background_failures == 0


def test_a_sync_record_writes_the_waiting_successes_first(redis_server: RedisServer) -> None:
    import asyncio

    config = BreakerConfig(consecutive_failures=2, cooldown_s=60)
    store = RedisStateStore(redis_server.url, prefix="y", cache_s=30)

    async def main() -> None:
        await store.abreaker_allow("fast", now=0, config=config)
        for _ in range(3):
            await store.abreaker_record("fast", "success", now=0, config=config)
        # a cancelled call is recorded through the sync twin, inside the loop
        assert store.breaker_record("fast", "failure", now=0, config=config) == "closed"
        snap = store.breaker_snapshot("fast", now=0, config=config)
        assert (snap.calls, snap.failures, snap.consecutive_failures) == (4, 1, 1)
        await store.aclose()

    asyncio.run(main())


class CountingStore(MemoryStateStore):
    """A memory store that counts the task reads of each kind."""

    def __init__(self) -> None:
        super().__init__()
        self.sync_reads = 0
        self.async_reads = 0

    def task_snapshot(self, task_id: str) -> Any:
        self.sync_reads += 1
        return super().task_snapshot(task_id)

    async def atask_snapshot(self, task_id: str) -> Any:
        self.async_reads += 1
        return super().task_snapshot(task_id)


def test_an_async_task_never_reads_the_store_synchronously() -> None:
    import asyncio

    from tiered_router import Router

    policy = {
        "version": 1,
        "backends": {"fast": {"model": "f", "kind": "diffusion"}, "frontier": {"model": "b"}},
        "tiers": {"fast": "fast", "frontier": "frontier"},
    }
    store = CountingStore()
    router = Router(policy, state=store)

    async def main() -> None:
        async with router.task("t1") as task:
            assert task.steps == 0

    asyncio.run(main())
    assert (store.sync_reads, store.async_reads) == (0, 1)


def test_a_task_turn_is_one_round_trip_and_one_sent_record(redis_server: RedisServer) -> None:
    """A turn in a task reads the task once (HGETALL) and sends its record once (a script)."""
    import asyncio

    from tiered_router import Router, Turn
    from tiered_router.testing import Reply, ScriptedServer

    with ScriptedServer() as upstream:
        upstream.default = Reply.text("ok")
        policy = {
            "version": 1,
            "backends": {
                name: {
                    "type": "openai",
                    "base_url": upstream.base_url,
                    "api_key": "k",
                    "model": f"{name}-model",
                    "price": {"input_per_mtok": 1, "output_per_mtok": 1},
                }
                for name in ("fast", "frontier")
            },
            "tiers": {"fast": "fast", "frontier": "frontier"},
        }
        watcher = client(redis_server)

        async def turns() -> dict[str, int]:
            # a cache that outlives the test and successes held back until flush(): what is
            # counted does not depend on how fast a loaded machine runs the turn
            store = RedisStateStore(redis_server.url, prefix="rt", cache_s=600.0)
            store.behind_s = 600.0
            router = Router(policy, state=store)
            turn = Turn([{"role": "user", "content": "hi"}])
            async with router.task("warm"):  # connections, scripts loaded, breakers cached
                await router.acomplete(turn)
            async with router.task("warm"):  # and the connection sent records go on
                await router.acomplete(turn)
            await store.flush()
            watcher.config_resetstat()
            async with router.task("ticket-1"):
                await router.acomplete(turn)
            stats = watcher.info("commandstats")
            await router.aclose()
            await store.aclose()
            return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}

        calls = asyncio.run(turns())
    watcher.close()
    calls.pop("config|resetstat", None)
    calls.pop("info", None)
    evalsha = calls.pop("evalsha", 0)
    assert evalsha == 1  # the task's record; the closed breakers answer from the cache
    # commands run inside a script count too; the record is sent, so its script returns no
    # totals and the one HGETALL is the read on entering the task
    assert calls.pop("hgetall") == 1
    scripted = {"hincrby", "hincrbyfloat", "hset", "hget", "hmget", "hdel", "pexpire", "time"}
    scripted.add("hkeys")  # the record looks for other processes holding a copy: none
    assert set(calls) <= scripted, calls  # nothing else went to Redis


# -- a task turn's record, sent before the turn returns and confirmed in the background --------


def _same_totals(got: Any, want: Any) -> None:
    assert got.cost == pytest.approx(want.cost)
    assert got.latency_s == pytest.approx(want.latency_s)
    exact = ("cost", "latency_s", "recent")
    assert {k: v for k, v in vars_of(got).items() if k not in exact} == {
        k: v for k, v in vars_of(want).items() if k not in exact
    }


def test_a_sent_record_returns_the_read_totals_with_the_turn_applied(
    redis_server: RedisServer,
) -> None:
    import asyncio

    from tiered_router.state._base import apply_task_delta

    async def main() -> None:
        store = RedisStateStore(redis_server.url, prefix="sent1", timeout_s=1.0)
        memory = MemoryStateStore()
        for delta in TASK_DELTAS:
            base = await store.atask_snapshot("t")
            got = await store.atask_record("t", delta, rules=RULES)
            _same_totals(got, apply_task_delta(base, delta, RULES))
            _same_totals(got, memory.task_record("t", delta, rules=RULES))
        await store.flush()
        _same_totals(await store.atask_snapshot("t"), memory.task_snapshot("t"))
        assert store.background_failures == 0
        await store.aclose()

    asyncio.run(main())


def test_sent_records_from_two_stores_add_up_exactly(redis_server: RedisServer) -> None:
    import asyncio

    delta = TaskDelta(cost=0.25, latency_s=0.5, fast_decided=True, fast_served=True, clean=True)

    async def main() -> float:
        one = RedisStateStore(redis_server.url, prefix="sent2", timeout_s=1.0)
        two = RedisStateStore(redis_server.url, prefix="sent2", timeout_s=1.0)
        await one.atask_snapshot("t")
        await two.atask_snapshot("t")

        async def turns(store: RedisStateStore) -> None:
            for _ in range(60):
                await store.atask_record("t", delta, rules=RULES)

        await asyncio.gather(turns(one), turns(two), turns(one))
        await one.flush()
        await two.flush()
        final = await one.atask_snapshot("t")
        assert final.steps == 180
        assert (one.background_failures, two.background_failures) == (0, 0)
        await one.aclose()
        await two.aclose()
        return final.cost

    assert asyncio.run(main()) == pytest.approx(45.0)


def test_what_sent_and_confirmed_records_return_when_another_replica_wrote_meanwhile(
    redis_server: RedisServer,
) -> None:
    """Sent: the totals read on entering, plus this turn. Confirmed: Redis's totals."""
    import asyncio

    delta = TaskDelta(cost=1.0, latency_s=0.1, clean=True)

    async def main() -> tuple[int, int, int]:
        other = RedisStateStore(redis_server.url, prefix="sent3", timeout_s=1.0)
        sent = RedisStateStore(redis_server.url, prefix="sent3", timeout_s=1.0)
        confirmed = RedisStateStore(
            redis_server.url, prefix="sent3", timeout_s=1.0, confirm_writes=True
        )
        await sent.atask_snapshot("t")
        await confirmed.atask_snapshot("t")
        for _ in range(3):  # another replica's turns, after both read the task
            await other.atask_record("t", delta, rules=RULES)
        await other.flush()
        a = (await sent.atask_record("t", delta, rules=RULES)).steps
        b = (await confirmed.atask_record("t", delta, rules=RULES)).steps
        await sent.flush()
        total = (await other.atask_snapshot("t")).steps
        for store in (other, sent, confirmed):
            await store.aclose()
        return a, b, total

    assert asyncio.run(main()) == (1, 5, 5)


def test_a_task_not_read_in_this_process_is_recorded_and_confirmed(
    redis_server: RedisServer,
) -> None:
    import asyncio

    delta = TaskDelta(cost=1.0, latency_s=0.1)

    async def main() -> int:
        first = RedisStateStore(redis_server.url, prefix="sent4", timeout_s=1.0)
        for _ in range(2):
            await first.atask_record("t", delta, rules=RULES)  # never read: each one awaited
        later = RedisStateStore(redis_server.url, prefix="sent4", timeout_s=1.0)
        steps = (await later.atask_record("t", delta, rules=RULES)).steps
        await first.aclose()
        await later.aclose()
        return steps

    assert asyncio.run(main()) == 3


def test_a_sent_record_lands_when_redis_lost_the_script(redis_server: RedisServer) -> None:
    import asyncio

    delta = TaskDelta(cost=1.0, latency_s=0.1)
    watcher = client(redis_server)

    async def main() -> tuple[int, int]:
        store = RedisStateStore(redis_server.url, prefix="sent5", timeout_s=1.0)
        await store.atask_snapshot("t")
        await store.atask_record("t", delta, rules=RULES)
        await store.flush()
        watcher.script_flush()  # as after a Redis restart
        returned = (await store.atask_record("t", delta, rules=RULES)).steps
        await store.flush()
        landed = (await store.atask_snapshot("t")).steps
        failures = store.background_failures
        await store.aclose()
        assert failures == 0
        return returned, landed

    try:
        assert asyncio.run(main()) == (2, 2)
    finally:
        watcher.close()


PAUSED_DELTA = TaskDelta(cost=1.0, latency_s=0.1)


async def _sending_store(server: RedisServer, prefix: str, **options: Any) -> RedisStateStore:
    """A store whose next record of task ``t`` is sent: the task read, the script loaded."""
    store = RedisStateStore(server.url, prefix=prefix, timeout_s=0.1, **options)
    await store.atask_snapshot("t")
    await store.atask_record("t", PAUSED_DELTA, rules=RULES)  # the first one, awaited
    return store


@contextlib.contextmanager
def _pausing(server: RedisServer) -> Iterator[redis.Redis]:
    """A client to pause writes with (:func:`_pause`); any pause ends, and it closes, on exit."""
    watcher = client(server)
    try:
        yield watcher
    finally:
        watcher.execute_command("CLIENT", "UNPAUSE")
        watcher.close()


def _pause(watcher: redis.Redis, ms: int) -> None:
    """Redis holds every script that writes for ``ms`` (``CLIENT PAUSE ... WRITE``)."""
    watcher.execute_command("CLIENT", "PAUSE", str(ms), "WRITE")


def test_a_burst_of_sent_records_shares_one_connection_and_all_land(
    redis_server: RedisServer,
) -> None:
    import asyncio

    async def main() -> tuple[int, int, int]:
        store = await _sending_store(redis_server, "sent8")
        await asyncio.gather(
            *(store.atask_record("t", PAUSED_DELTA, rules=RULES) for _ in range(200))
        )
        with client(redis_server) as watcher:
            connections = len(watcher.client_list()) - 1  # not the watcher's own
        await store.flush()
        steps = (await store.atask_snapshot("t")).steps
        failures = store.background_failures
        await store.aclose()
        return connections, steps, failures

    connections, steps, failures = asyncio.run(main())
    # the pool's (the read's, and the ones warmed ahead of use) and the one every sent
    # record goes on (one each before this: a connection per record in flight, up to 64)
    assert connections <= _WARM + 2
    assert (steps, failures) == (201, 0)


def test_a_killed_sending_connection_loses_no_record_silently(redis_server: RedisServer) -> None:
    """Each record after the kill lands, or is counted lost, or raises: none goes missing."""
    import asyncio

    async def main() -> tuple[int, int, int, int]:
        store = await _sending_store(redis_server, "sent9", retry_s=0)
        await store.atask_record("t", PAUSED_DELTA, rules=RULES)  # sent: opens the connection
        await store.flush()
        before = (await store.atask_snapshot("t")).steps
        with client(redis_server) as killer:
            (sender,) = [c for c in killer.client_list() if c["cmd"] == "evalsha"]
            killer.execute_command("CLIENT", "KILL", "ID", sender["id"])
        raised = 0
        for _ in range(6):
            try:
                await store.atask_record("t", PAUSED_DELTA, rules=RULES)
            except StateStoreUnavailable:
                raised += 1
            await store.flush()
        landed = (await store.atask_snapshot("t")).steps - before
        lost = store.background_failures
        await store.aclose()
        return landed, lost, raised, before

    landed, lost, raised, before = asyncio.run(main())
    assert before == 2
    assert landed + lost + raised == 6
    assert landed >= 4  # a fresh connection carries the records after the first failure


def test_a_sent_record_redis_refuses_is_counted_and_the_store_rests(
    redis_server: RedisServer,
) -> None:
    import asyncio

    async def main() -> tuple[int, int]:
        store = await _sending_store(redis_server, "sent10", retry_s=30)
        with client(redis_server) as other:
            other.set("sent10:task:t", "not a hash")  # the script now fails (WRONGTYPE)
        steps = (await store.atask_record("t", PAUSED_DELTA, rules=RULES)).steps
        await store.flush()
        failures = store.background_failures
        with pytest.raises(StateStoreUnavailable):  # resting for retry_s, like a failed call
            await store.atask_snapshot("t")
        await store.aclose()
        return steps, failures

    assert asyncio.run(main()) == (2, 1)


def test_a_sent_record_redis_does_not_answer_in_time_is_counted_and_logged(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging

    async def main(watcher: redis.Redis) -> tuple[int, float, int]:
        store = await _sending_store(redis_server, "sent6", retry_s=30)
        _pause(watcher, 600)
        started = time.perf_counter()
        returned = (await store.atask_record("t", PAUSED_DELTA, rules=RULES)).steps
        waited = time.perf_counter() - started
        await store.flush()
        failures = store.background_failures
        # one lost record does not take Redis down: the next call still goes to it
        assert (await store.atask_snapshot("t")).steps >= 1
        await store.aclose()
        return returned, waited, failures

    with caplog.at_level(logging.WARNING, logger="tiered_router.state"):
        with _pausing(redis_server) as watcher:
            returned, waited, failures = asyncio.run(main(watcher))
    assert returned == 2
    assert waited < 0.3  # the turn did not wait for the paused Redis (600 ms)
    assert failures == 1
    assert "did not confirm a record of task 't'" in caplog.text


def test_confirm_writes_comes_from_the_policy(redis_server: RedisServer) -> None:
    from tiered_router import Router

    policy: dict[str, Any] = {
        "version": 1,
        "backends": {
            n: {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "k",
                "model": n}
            for n in ("fast", "frontier")
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "state": {"type": "redis", "url": redis_server.url, "confirm_writes": True},
    }  # fmt: skip
    router = Router(policy)
    try:
        store = router.state.store  # type: ignore[attr-defined]
        assert isinstance(store, RedisStateStore)
        assert store.confirm_writes is True
    finally:
        router.close()
    policy["state"].pop("confirm_writes")
    router = Router(policy)
    try:
        assert router.state.store.confirm_writes is False  # type: ignore[attr-defined]
    finally:
        router.close()


def test_unconfirmed_records_are_all_counted_and_warned_about_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging

    async def main(watcher: redis.Redis) -> int:
        store = await _sending_store(redis_server, "sent7", retry_s=0)
        _pause(watcher, 1500)
        for _ in range(2):
            await store.atask_record("t", PAUSED_DELTA, rules=RULES)
            await store.flush()
        failures = store.background_failures
        await store.aclose()
        return failures

    with caplog.at_level(logging.WARNING, logger="tiered_router.state"):
        with _pausing(redis_server) as watcher:
            failures = asyncio.run(main(watcher))
    assert failures == 2
    assert caplog.text.count("did not confirm a record") == 1


def test_the_first_record_of_a_process_is_awaited_so_redis_has_the_script(
    redis_server: RedisServer,
) -> None:
    """A sent call that met NOSCRIPT would land only later, in the background."""
    import asyncio

    delta = TaskDelta(cost=1.0, latency_s=0.1)
    watcher = client(redis_server)
    watcher.script_flush()  # a Redis that has never seen the scripts
    watcher.config_resetstat()

    async def main() -> list[str | None]:
        store = RedisStateStore(redis_server.url, prefix="sent8", timeout_s=1.0)
        await store.atask_snapshot("t")
        seen: list[str | None] = []
        for _ in range(3):
            await store.atask_record("t", delta, rules=RULES)
            # read at once, with this event loop blocked: only what Redis has already run
            seen.append(watcher.hget(store.task_key("t"), "steps"))  # type: ignore[arg-type]
        await store.flush()
        await store.aclose()
        return seen

    try:
        seen = asyncio.run(main())
        noscript = watcher.info("errorstats").get("errorstat_NOSCRIPT", {}).get("count", 0)
    finally:
        watcher.close()
    assert seen[0] == "1"  # the first record was awaited: Redis ran it (and loaded it)
    assert noscript == 1  # met once, by that awaited call; no sent call met it


def test_the_asyncio_pool_gets_redis_pys_asyncio_retry(redis_server: RedisServer) -> None:
    # redis-py 8 warns (and the suite's warnings-as-errors fails) when an asyncio pool is given
    # the sync Retry; every pool the store builds must take its own kind's class
    import warnings

    from redis.asyncio.retry import Retry as AsyncRetry

    async def main() -> Any:
        store = RedisStateStore(redis_server.url)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await store.abreaker_allow("fast", now=0.0, config=BreakerConfig())
            client = store._link._async
            assert client is not None
            return client.connection_pool.connection_kwargs["retry"]
        finally:
            await store.aclose()

    import anyio

    assert isinstance(anyio.run(main), AsyncRetry)


def test_background_work_that_fails_leaves_no_unretrieved_exception(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import gc

    seen: list[dict[str, Any]] = []

    async def boom() -> None:
        raise RuntimeError("not a Redis failure")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: seen.append(ctx))
        store = RedisStateStore(redis_server.url)
        try:
            store._link.track(asyncio.ensure_future(boom()))
            await store._link.drain()  # waits; does not raise the background failure
        finally:
            await store.aclose()
        gc.collect()

    with caplog.at_level("WARNING", logger="tiered_router.state._redis_link"):
        asyncio.run(main())
    assert seen == []
    assert any("background write failed: RuntimeError" in r.getMessage() for r in caplog.records)
