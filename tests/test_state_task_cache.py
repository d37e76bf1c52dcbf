"""A process's copy of task totals (``state.task_cache_s``) against a real redis-server:
repeat turns skip the read, another process's record drops the copy, and a lost listener,
a note during a read, an old copy or a lost record all fall back to reading Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("redis")

import redis  # noqa: E402
from redisfix import RedisServer  # noqa: E402
from statekit import RULES, TASK_DELTAS  # noqa: E402

from tiered_router import load_policy  # noqa: E402
from tiered_router.exceptions import PolicyError  # noqa: E402
from tiered_router.state import MemoryStateStore  # noqa: E402
from tiered_router.state.redis_store import RedisStateStore  # noqa: E402


async def _until(condition: Callable[[], bool], what: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.005)


async def _cached_store(server: RedisServer, prefix: str, **options: Any) -> RedisStateStore:
    """A store with the task cache on, its listener subscribed."""
    options.setdefault("task_cache_s", 60.0)
    store = RedisStateStore(server.url, prefix=prefix, timeout_s=1.0, **options)
    await store.atask_snapshot("warm")  # starts the listener
    cache = store.task_cache
    assert cache is not None
    await _until(lambda: cache.listening, "the listener subscribed")
    return store


def _reads(watcher: redis.Redis) -> int:
    stats = watcher.info("commandstats")
    return int(stats.get("cmdstat_hgetall", {}).get("calls", 0))


def _totals(snapshot: Any) -> tuple[Any, ...]:
    return (
        snapshot.steps,
        round(snapshot.cost, 9),
        snapshot.escalations,
        snapshot.gate_failures,
        snapshot.locked_by,
        snapshot.clean_streak,
        dict(snapshot.rules),
        snapshot.input_tokens,
    )


def test_repeat_turns_skip_the_read_and_totals_match_the_memory_store(
    redis_server: RedisServer,
) -> None:
    watcher = redis.Redis.from_url(redis_server.url)

    async def main() -> tuple[int, list[tuple[Any, ...]], tuple[Any, ...]]:
        store = await _cached_store(redis_server, "tc1")
        memory = MemoryStateStore()
        before = _reads(watcher)
        seen = []
        for delta in TASK_DELTAS * 3:
            seen.append(_totals(await store.atask_snapshot("t")))
            got = await store.atask_record("t", delta, rules=RULES)
            assert _totals(got) == _totals(memory.task_record("t", delta, rules=RULES))
        reads = _reads(watcher) - before
        await store.flush()
        saved = store.task_reads_saved
        fresh = RedisStateStore(redis_server.url, prefix="tc1")
        stored = _totals(fresh.task_snapshot("t"))
        fresh.close()
        await store.aclose()
        assert saved == len(TASK_DELTAS) * 3 - 1
        return reads, seen, stored

    reads, seen, stored = asyncio.run(main())
    watcher.close()
    assert reads == 1  # the first turn read the task; the other eleven used the copy
    assert [steps for steps, *_ in seen] == list(range(len(TASK_DELTAS) * 3))
    memory = MemoryStateStore()
    for delta in TASK_DELTAS * 3:
        want = memory.task_record("t", delta, rules=RULES)
    assert stored == _totals(want)  # Redis holds every record


def test_another_process_record_drops_the_copy(redis_server: RedisServer) -> None:
    async def main() -> tuple[int, int, bool]:
        store = await _cached_store(redis_server, "tc2")
        await store.atask_snapshot("t")
        await store.atask_record("t", TASK_DELTAS[0], rules=RULES)
        cache = store.task_cache
        assert cache is not None and cache.current("t")
        await store.atask_snapshot("other")  # a copy of another task, which stays
        other = RedisStateStore(redis_server.url, prefix="tc2")  # another replica (sync)
        for delta in TASK_DELTAS[:2]:
            other.task_record("t", delta, rules=RULES)
        other.close()
        await _until(lambda: not cache.current("t"), "the copy dropped")
        steps = (await store.atask_snapshot("t")).steps
        after = (await store.atask_record("t", TASK_DELTAS[-1], rules=RULES)).steps
        kept = cache.current("other")
        await store.aclose()
        return steps, after, kept

    steps, after, kept = asyncio.run(main())
    assert (steps, after) == (3, 4)  # the other replica's two turns are seen
    assert kept


def test_a_note_while_the_read_is_in_flight_keeps_the_copy_out(redis_server: RedisServer) -> None:
    publisher = redis.Redis.from_url(redis_server.url)

    async def main() -> tuple[bool, bool, bool]:
        store = await _cached_store(redis_server, "tc3")
        cache = store.task_cache
        assert cache is not None
        results = []
        for task, noted in (("t", "t"), ("u", "elsewhere"), ("v", None)):
            mark = cache.mark()  # as a read starts
            if noted is not None:  # another writer's record lands before the answer
                before = cache._notes
                publisher.publish(cache.channel, f"tc3:task:{noted}")
                await _until(lambda: cache._notes > before, "the note arrived")  # noqa: B023
            await store.atask_snapshot(task)  # reads (no copy yet) ...
            cache._current.pop(task, None)
            cache.confirmed(task, mark)  # ... and is confirmed as of the mark
            results.append(cache.current(task))
        await store.aclose()
        return results[0], results[1], results[2]

    written, elsewhere, quiet = asyncio.run(main())
    publisher.close()
    assert not written  # the note may be about a write the read did not see
    assert elsewhere and quiet


def test_notes_go_only_to_the_other_processes_holding_a_copy(redis_server: RedisServer) -> None:
    watcher = redis.Redis.from_url(redis_server.url)

    def publishes() -> int:
        stats = watcher.info("commandstats")
        return int(stats.get("cmdstat_publish", {}).get("calls", 0))

    async def main() -> tuple[int, int, int, int, bool]:
        one = await _cached_store(redis_server, "tc4")
        two = await _cached_store(redis_server, "tc4")
        assert one.task_cache is not None and two.task_cache is not None
        before = publishes()
        await one.atask_snapshot("t")
        for delta in TASK_DELTAS:  # turns that stay on one process: nobody to tell
            await one.atask_snapshot("t")
            await one.atask_record("t", delta, rules=RULES)
        await one.flush()
        alone = publishes() - before
        await two.atask_snapshot("t")  # two holds a copy now
        await one.atask_record("t", TASK_DELTAS[0], rules=RULES)  # one note, to two
        await one.flush()
        await _until(lambda: two.task_cache.heard == 1, "two heard")  # type: ignore[union-attr]
        shared = publishes() - before - alone
        await one.atask_record("t", TASK_DELTAS[0], rules=RULES)  # two was forgotten: no note
        await one.flush()
        again = publishes() - before - alone - shared
        heard = (one.task_cache.heard, two.task_cache.heard)
        kept = one.task_cache.current("t")
        for store in (one, two):
            await store.aclose()
        return alone, shared, again, heard[0], kept

    alone, shared, again, one_heard, kept = asyncio.run(main())
    watcher.close()
    assert (alone, shared, again) == (0, 1, 0)
    assert one_heard == 0 and kept  # a process's own records are no news to it


def test_a_lost_listener_drops_every_copy_then_resubscribes(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    killer = redis.Redis.from_url(redis_server.url)

    async def main() -> tuple[bool, int, bool]:
        store = await _cached_store(redis_server, "tc5", retry_s=0.1)
        cache = store.task_cache
        assert cache is not None
        await store.atask_snapshot("t")
        assert cache.current("t")
        killer.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        await _until(lambda: not cache.listening, "the listener noticed")
        dropped = not cache.current("t")
        before = _reads(killer)
        await store.atask_snapshot("t")  # reads Redis while nobody listens
        reads = _reads(killer) - before
        await _until(lambda: cache.listening, "the listener back")
        await store.atask_snapshot("t")
        again = cache.current("t")
        await store.aclose()
        return dropped, reads, again

    with caplog.at_level(logging.WARNING, logger="tiered_router.state"):
        dropped, reads, again = asyncio.run(main())
    killer.close()
    assert dropped and reads == 1 and again
    assert any("task notes stopped" in r.getMessage() for r in caplog.records)


def test_a_copy_is_not_used_past_task_cache_s(redis_server: RedisServer) -> None:
    watcher = redis.Redis.from_url(redis_server.url)

    async def main() -> tuple[int, int]:
        store = await _cached_store(redis_server, "tc6", task_cache_s=0.2)
        await store.atask_snapshot("t")
        before = _reads(watcher)
        await store.atask_snapshot("t")
        young = _reads(watcher) - before
        await asyncio.sleep(0.25)
        await store.atask_snapshot("t")
        old = _reads(watcher) - before - young
        await store.aclose()
        return young, old

    assert asyncio.run(main()) == (0, 1)
    watcher.close()


def test_a_record_redis_did_not_confirm_drops_the_copy(redis_server: RedisServer) -> None:
    watcher = redis.Redis.from_url(redis_server.url)

    async def main() -> tuple[int, bool]:
        store = await _cached_store(redis_server, "tc7", retry_s=0)
        store._link.timeout_s = 0.1
        await store.atask_snapshot("t")
        await store.atask_record("t", TASK_DELTAS[0], rules=RULES)  # the first one, awaited
        cache = store.task_cache
        assert cache is not None and cache.current("t")
        watcher.execute_command("CLIENT", "PAUSE", "600", "WRITE")
        try:
            await store.atask_record("t", TASK_DELTAS[-1], rules=RULES)  # sent; not confirmed
            await store.flush()
        finally:
            watcher.execute_command("CLIENT", "UNPAUSE")
        failures, current = store.background_failures, cache.current("t")
        await store.aclose()
        return failures, current

    assert asyncio.run(main()) == (1, False)
    watcher.close()


def test_aclose_stops_the_listener(redis_server: RedisServer) -> None:
    watcher = redis.Redis.from_url(redis_server.url, decode_responses=True)

    channel = ""

    def subscribers() -> int:
        return int(watcher.pubsub_numsub(channel)[0][1])

    async def main() -> tuple[int, int]:
        nonlocal channel
        store = await _cached_store(redis_server, "tc8")
        assert store.task_cache is not None
        channel = store.task_cache.channel
        during = subscribers()
        await store.aclose()
        assert store.task_cache is not None and not store.task_cache.listening
        await _until(lambda: subscribers() == 0, "the subscription gone")
        return during, subscribers()

    assert asyncio.run(main()) == (1, 0)
    watcher.close()


def test_the_cache_is_off_by_default_and_set_in_the_policy(redis_server: RedisServer) -> None:
    assert RedisStateStore(redis_server.url).task_cache is None
    state = {"type": "redis", "url": redis_server.url, "task_cache_s": 30}
    policy = load_policy(_policy(state))
    store = RedisStateStore.from_config(policy.state)
    assert store.task_cache is not None and store.task_cache.max_age_s == 30
    with pytest.raises(PolicyError, match=r"state\.task_cache_s"):
        load_policy(_policy({**state, "task_cache_s": -1}))


def _policy(state: dict[str, Any]) -> dict[str, Any]:
    backends = {
        name: {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": name}
        for name in ("fast", "frontier")
    }
    return {
        "version": 1,
        "backends": backends,
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "state": state,
    }


def test_a_user_without_pubsub_reads_every_turn_and_registers_nowhere(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis 7 gives a new ACL user no pub/sub channel: no copy, no holder, one warning."""
    admin = redis.Redis.from_url(redis_server.url, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", "nochan", "on", ">pw", "~*", "+@all", "resetchannels")
    url = f"redis://nochan:pw@127.0.0.1:{redis_server.port}/0"

    async def main() -> tuple[int, int, bool, int]:
        store = RedisStateStore(url, prefix="tc9", timeout_s=1.0, retry_s=0.05, task_cache_s=60)
        cache = store.task_cache
        assert cache is not None
        await store.atask_snapshot("t")
        await _until(lambda: cache.stops >= 2, "the listener refused twice")
        for delta in TASK_DELTAS:
            await store.atask_snapshot("t")
            await store.atask_record("t", delta, rules=RULES)
        await store.flush()
        result = store.task_reads_saved, store.background_failures, cache.listening, cache.stops
        await store.aclose()
        return result

    with caplog.at_level(logging.WARNING, logger="tiered_router.state"):
        saved, failures, listening, stops = asyncio.run(main())
    holders = [f for f in admin.hkeys("tc9:task:t") if f.startswith("holder:")]
    steps = admin.hget("tc9:task:t", "steps")
    admin.execute_command("ACL", "DELUSER", "nochan")
    admin.close()
    assert (saved, failures, listening) == (0, 0, False)
    assert holders == [] and steps == str(len(TASK_DELTAS))
    warnings = [r for r in caplog.records if "task notes stopped" in r.getMessage()]
    assert stops >= 2 and len(warnings) == 1


def test_copies_left_current_equal_redis_after_concurrent_turns(redis_server: RedisServer) -> None:
    """Two caching processes, one that does not, and two concurrent loops in one of them,
    on three shared tasks: once the notes are in, every copy still current equals Redis."""
    tasks = ("a", "b", "c")

    async def main() -> tuple[int, int, list[str]]:
        one = await _cached_store(redis_server, "tc10")
        two = await _cached_store(redis_server, "tc10")
        plain = RedisStateStore(redis_server.url, prefix="tc10", timeout_s=1.0)

        async def turns(store: RedisStateStore, n: int, offset: int) -> None:
            for i in range(n):
                task = tasks[(i + offset) % len(tasks)]
                await store.atask_snapshot(task)
                await store.atask_record(task, TASK_DELTAS[i % len(TASK_DELTAS)], rules=RULES)

        await asyncio.gather(
            turns(one, 90, 0), turns(one, 90, 1), turns(two, 90, 2), turns(plain, 45, 0)
        )
        for store in (one, two, plain):
            await store.flush()
        await asyncio.sleep(1.0)  # the last notes arrive (0.2 s was short on a loaded machine)
        truth = RedisStateStore(redis_server.url, prefix="tc10")
        stale = []
        checked = 0
        # twice: the copies that outlived the others' turns (or reads), then copies only
        for round_ in (1, 2):
            for name, store in (("one", one), ("two", two)):
                assert store.task_cache is not None
                for task in tasks:
                    was_current = store.task_cache.current(task)
                    got = await store.atask_snapshot(task)
                    checked += round_ == 2 and was_current
                    if _totals(got) != _totals(truth.task_snapshot(task)):
                        stale.append(f"{name}:{task} round {round_}")
        steps = sum(truth.task_snapshot(task).steps for task in tasks)
        truth.close()
        for store in (one, two, plain):
            await store.aclose()
        return steps, checked, stale

    steps, checked, stale = asyncio.run(main())
    assert steps == 90 * 3 + 45
    assert stale == [], stale
    assert checked == 6  # the second round used every copy, and each was right


def test_a_record_sent_while_a_read_is_in_flight_keeps_the_read_from_making_a_copy(
    redis_server: RedisServer,
) -> None:
    """The read may have run before the record: its totals would miss this process's turn."""

    async def main() -> tuple[bool, tuple[Any, ...], tuple[Any, ...]]:
        store = await _cached_store(redis_server, "tc11")
        cache = store.task_cache
        assert cache is not None
        await store.atask_snapshot("t")
        await store.atask_record("t", TASK_DELTAS[0], rules=RULES)  # the first record, awaited
        await store.atask_record("t", TASK_DELTAS[0], rules=RULES)  # sent: its connection opens
        await store.flush()
        cache.drop("t")  # the next read makes the copy again
        reading = asyncio.ensure_future(store.atask_snapshot("t"))
        for _ in range(10):
            await asyncio.sleep(0)  # the read's bytes go out (its answer takes far longer)
        await store.atask_record("t", TASK_DELTAS[-1], rules=RULES)  # sent after the read
        await reading
        await store.flush()
        truth = RedisStateStore(redis_server.url, prefix="tc11")
        want = _totals(truth.task_snapshot("t"))
        truth.close()
        current = cache.current("t")
        got = _totals(await store.atask_snapshot("t"))
        await store.aclose()
        return current, got, want

    current, got, want = asyncio.run(main())
    assert got == want  # the copy, if current, has the record; else a fresh read has it
