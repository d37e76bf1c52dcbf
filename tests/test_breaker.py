"""The circuit breaker and the state store behind it, on a fake clock."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from conftest import RoutePath
from routerkit import easy_turn, make_policy, tracked

from tiered_router import BackendResponseError, MemorySink, Router
from tiered_router.backends import CompletionRequest
from tiered_router.engine.resilience import breaker_outcome
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendRateLimited,
    BackendStatusError,
    BackendTimeout,
    BackendUnavailable,
    StreamInterrupted,
)
from tiered_router.policy import BreakerConfig
from tiered_router.state import (
    Admission,
    MemoryStateStore,
    SafeStateStore,
    StateStore,
    TaskDelta,
    TaskRules,
)
from tiered_router.testing import FunctionBackend, Reply, ScriptedBackend, ScriptedServer


class Clock:
    """A fake monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CONFIG = BreakerConfig()


def router(server: ScriptedServer, clock: Clock, **kw: Any) -> Router:
    policy = make_policy(server, retries=(0, 0))
    for name, value in kw.pop("fast", {}).items():
        policy["backends"]["fast"][name] = value
    return tracked(Router(policy, clock=clock, **kw))


# -- the store on its own ------------------------------------------------------------------------


def test_store_opens_after_a_run_of_failures_and_a_trial_closes_it() -> None:
    store, now = MemoryStateStore(), 0.0
    for _ in range(4):
        assert store.breaker_allow("b", now=now, config=CONFIG).allowed
        assert store.breaker_record("b", "failure", now=now, config=CONFIG) == "closed"
    assert store.breaker_record("b", "failure", now=now, config=CONFIG) == "open"
    assert store.breaker_allow("b", now=now + 4.9, config=CONFIG) == Admission(
        allowed=False, state="open"
    )
    trial = store.breaker_allow("b", now=now + 5, config=CONFIG)
    assert trial.allowed and trial.state == "half_open" and trial.token is not None
    assert not store.breaker_allow("b", now=now + 5, config=CONFIG).allowed  # one trial only
    assert store.breaker_snapshot("b", now=now + 5, config=CONFIG).trial_in_flight
    state = store.breaker_record("b", "success", now=now + 6, config=CONFIG, token=trial.token)
    assert state == "closed"
    assert store.breaker_snapshot("b", now=now + 6, config=CONFIG).consecutive_failures == 0


def test_store_failed_trial_reopens_and_neutral_trial_only_releases() -> None:
    store = MemoryStateStore()
    for _ in range(5):
        store.breaker_record("b", "failure", now=0.0, config=CONFIG)
    trial = store.breaker_allow("b", now=5.0, config=CONFIG)
    assert store.breaker_record("b", "neutral", now=5.0, config=CONFIG, token=trial.token) == (
        "half_open"
    )
    again = store.breaker_allow("b", now=5.0, config=CONFIG)
    assert again.allowed and again.token != trial.token
    assert store.breaker_record("b", "failure", now=6.0, config=CONFIG, token=again.token) == (
        "open"
    )
    assert store.breaker_snapshot("b", now=10.9, config=CONFIG).state == "open"  # cooldown anew
    # a stale token (from the released trial) changes nothing
    assert store.breaker_record("b", "success", now=7.0, config=CONFIG, token=trial.token) == (
        "open"
    )


def test_store_gives_up_a_trial_after_its_lease() -> None:
    store = MemoryStateStore()
    config = BreakerConfig(trial_lease_s=10)
    for _ in range(5):
        store.breaker_record("b", "failure", now=0.0, config=config)
    lost = store.breaker_allow("b", now=5.0, config=config)  # its worker died: never recorded
    assert not store.breaker_allow("b", now=14.9, config=config).allowed
    fresh = store.breaker_allow("b", now=15.0, config=config)
    assert fresh.allowed and fresh.token not in (None, lost.token)


def test_store_window_opens_on_a_failure_share() -> None:
    store = MemoryStateStore()
    config = BreakerConfig(consecutive_failures=None, min_calls=4, failure_ratio=0.5, window_s=10)
    for outcome in ("success", "failure", "success", "failure"):
        assert store.breaker_record("b", outcome, now=1.0, config=config) == "closed"
    assert store.breaker_record("b", "failure", now=2.0, config=config) == "open"  # 3/5 > 0.5
    # failures older than the window no longer count
    store2 = MemoryStateStore()
    for _ in range(3):
        store2.breaker_record("b", "failure", now=0.0, config=config)
    snap = store2.breaker_snapshot("b", now=30.0, config=config)
    assert (snap.calls, snap.failures) == (0, 0)
    assert store2.breaker_record("b", "failure", now=30.0, config=config) == "closed"


def test_store_ignores_neutral_calls_and_late_records_while_open() -> None:
    store = MemoryStateStore()
    for _ in range(50):
        store.breaker_record("b", "neutral", now=0.0, config=CONFIG)
    assert store.breaker_snapshot("b", now=0.0, config=CONFIG).calls == 0
    for _ in range(5):
        store.breaker_record("b", "failure", now=0.0, config=CONFIG)
    # a call admitted before it opened and finishing later neither closes nor reopens it
    assert store.breaker_record("b", "success", now=1.0, config=CONFIG) == "open"
    assert store.breaker_snapshot("b", now=1.0, config=CONFIG).opened_at == 0.0


def test_store_task_record_adds_up_and_locks() -> None:
    store = MemoryStateStore(max_tasks=2)
    rules = TaskRules(lock_after_gate_failures=2, unlock_after_clean_turns=2, latency_window=2)
    store.task_record("t", TaskDelta(cost=0.5, gate_failures=1, rule="task.stall"), rules=rules)
    snap = store.task_record(
        "t", TaskDelta(cost=0.25, gate_failures=1, latencies=(("f", 1.0, 3),)), rules=rules
    )
    assert (snap.steps, snap.cost, snap.gate_failures) == (2, 0.75, 2)
    assert snap.locked_by == "2 gate failures" and snap.rules == {"task.stall": 1}
    for i in range(3):
        snap = store.task_record(
            "t", TaskDelta(clean=True, latencies=(("f", float(i), 1),)), rules=rules
        )
    assert snap.locked_by is None and snap.window_failures == 0
    assert snap.recent["f"] == ((1.0, 1), (2.0, 1))  # the window keeps the last two
    stalled = store.task_record("t", TaskDelta(stalled=True), rules=rules)
    assert stalled.locked_by == "a stall" and stalled.stalls == 1
    store.task_record("u", TaskDelta(), rules=rules)
    store.task_record("v", TaskDelta(), rules=rules)  # past max_tasks: "t" is dropped
    assert store.task_snapshot("t").steps == 0 and store.task_snapshot("v").steps == 1


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (None, "success"),
        (BackendTimeout("slow"), "failure"),
        (BackendConnectionError("refused"), "failure"),
        (BackendRateLimited("busy"), "failure"),
        (BackendStatusError("down", status_code=503), "failure"),
        (BackendStatusError("key", status_code=401), "failure"),
        (BackendStatusError("bad", status_code=400), "neutral"),
        (BackendStatusError("gone", status_code=404), "neutral"),
        (BackendStatusError("big", status_code=413), "neutral"),
        (BackendStatusError("bad", status_code=422), "neutral"),
        (BackendUnavailable("open"), "neutral"),
        (BackendResponseError("bad json"), "failure"),
        (TypeError("tool_calls is a number"), "failure"),
        (GeneratorExit(), "neutral"),
    ],
)
def test_what_counts_as_a_failure(exc: BaseException | None, outcome: str) -> None:
    assert breaker_outcome(exc) == outcome


def test_an_interrupted_stream_counts_as_its_cause() -> None:
    broken = StreamInterrupted("broke")
    broken.__cause__ = BackendConnectionError("reset")
    assert breaker_outcome(broken) == "failure"
    assert breaker_outcome(GeneratorExit(), progressed=True) == "success"


# -- through the router ----------------------------------------------------------------------------


def test_closed_open_half_open_closed(server: ScriptedServer, path: RoutePath) -> None:
    clock = Clock()
    r = router(server, clock)
    server.script([Reply.status(503)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        result = path.complete(r, easy_turn())
        assert result.trace.escalations == ("backend_error",)
    assert r.breaker("fast").state == "open"
    result = path.complete(r, easy_turn())
    assert result.tier == "frontier" and result.trace.escalations == ("circuit_open",)
    assert result.trace.attempts[0].error is not None
    assert result.trace.attempts[0].error["type"] == "BackendUnavailable"
    assert len(server.requests_for("fast-model")) == 5  # the open backend got no request
    clock.now += CONFIG.cooldown_s
    assert r.breaker("fast").state == "half_open"
    server.script([Reply.text("fast is back")], model="fast-model")
    result = path.complete(r, easy_turn())  # the trial
    assert result.tier == "fast" and result.completion.text == "fast is back"
    assert r.breaker("fast").state == "closed"


def test_a_failed_trial_opens_it_again(server: ScriptedServer, path: RoutePath) -> None:
    clock = Clock()
    r = router(server, clock)
    server.script([Reply.status(500)] * 6, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        path.complete(r, easy_turn())
    assert path.complete(r, easy_turn()).trace.escalations == ("circuit_open",)
    clock.now += CONFIG.cooldown_s
    result = path.complete(r, easy_turn())  # the trial fails: open again
    assert result.tier == "frontier" and result.trace.escalations == ("backend_error",)
    assert r.breaker("fast").state == "open"
    clock.now += CONFIG.cooldown_s
    server.script([Reply.text("fast is back")], model="fast-model")
    assert path.complete(r, easy_turn()).tier == "fast"
    assert r.breaker("fast").state == "closed"


@pytest.mark.anyio
async def test_a_cancelled_half_open_trial_is_released(server: ScriptedServer) -> None:
    clock = Clock()
    r = router(server, clock)
    server.script([Reply.status(502)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        await r.acomplete(easy_turn())
    clock.now += CONFIG.cooldown_s
    server.script([Reply.slow(30.0, then=Reply.text("too late"))], model="fast-model")
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.acomplete, easy_turn())
        while len(server.requests_for("fast-model")) < 6:  # the trial reached the upstream
            await anyio.sleep(0.01)
        assert r.breaker("fast").snapshot().trial_in_flight
        tg.cancel_scope.cancel()  # the client went away
    snap = r.breaker("fast").snapshot()
    assert snap.state == "half_open" and not snap.trial_in_flight
    server.script([Reply.text("fast is back")], model="fast-model")
    result = await r.acomplete(easy_turn())  # a new trial goes through
    assert result.tier == "fast" and r.breaker("fast").state == "closed"


def test_an_abandoned_stream_releases_its_trial(server: ScriptedServer, path: RoutePath) -> None:
    clock = Clock()
    r = router(server, clock)
    server.script([Reply.status(500)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        path.complete(r, easy_turn())
    clock.now += CONFIG.cooldown_s
    server.script([Reply.text("word " * 50)], model="fast-model")
    path.stream(r, easy_turn(), read=1)  # the caller stops reading after the first chunk
    assert r.breaker("fast").state == "closed"  # the backend answered: the trial succeeded


def test_a_hung_upstream_opens_the_breaker(server: ScriptedServer, path: RoutePath) -> None:
    clock = Clock()
    r = router(server, clock, fast={"timeout_s": 0.2})
    server.script([Reply.slow(5.0)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        result = path.complete(r, easy_turn())
        assert result.tier == "frontier"
        assert result.trace.attempts[0].error is not None
        assert result.trace.attempts[0].error["type"] == "BackendTimeout"
    assert r.breaker("fast").state == "open"
    result = path.complete(r, easy_turn())
    assert result.trace.escalations == ("circuit_open",)
    assert len(server.requests_for("fast-model")) == 5


def test_a_client_whose_requests_get_400_does_not_open_it(
    server: ScriptedServer, path: RoutePath
) -> None:
    clock = Clock()
    r = router(server, clock)
    server.script([Reply.status(400)] * 20, model="fast-model")
    server.script([Reply.text("frontier ok")] * 20, model="frontier-model")
    for _ in range(20):
        result = path.complete(r, easy_turn())
        assert result.trace.escalations == ("backend_error",)
    assert r.breaker("fast").state == "closed"
    server.script([Reply.text("fast for another client")], model="fast-model")
    result = path.complete(r, easy_turn())
    assert result.tier == "fast" and result.trace.escalations == ()


def test_an_unexpected_backend_exception_escalates_and_counts(
    server: ScriptedServer,
    path: RoutePath,
) -> None:
    def malformed(request: CompletionRequest) -> str:
        raise TypeError("'int' object is not iterable")

    clock, sink = Clock(), MemorySink()
    r = tracked(
        Router(
            make_policy(server, retries=(0, 0)),
            backends={"fast": FunctionBackend("fast", malformed)},
            clock=clock,
            sinks=[sink],
        )
    )
    server.default = Reply.text("frontier ok")
    result = path.complete(r, easy_turn())
    assert result.tier == "frontier" and result.trace.escalations == ("backend_error",)
    error = result.trace.attempts[0].error
    assert error is not None and error["type"] == "BackendResponseError"
    assert "TypeError" in error["message"]
    assert sink.traces == [result.trace]
    assert r.breaker("fast").snapshot().consecutive_failures == 1


class BrokenStore:
    """A state store whose every operation fails (a Redis that went away)."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("store is down")

        async def afail(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("store is down")

        return afail if name.startswith("a") else fail


@pytest.mark.anyio
async def test_a_failing_store_never_fails_a_turn(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    broken: StateStore = BrokenStore()
    fast = ScriptedBackend("fast", ["ok"] * 2 + [BackendTimeout("slow")] * 5)
    r = tracked(Router(make_policy(server, retries=(0, 0)), backends={"fast": fast}, state=broken))
    server.default = Reply.text("frontier ok")
    with caplog.at_level(logging.WARNING, logger="tiered_router.state"):
        assert (await r.acomplete(easy_turn())).tier == "fast"
        assert r.complete(easy_turn()).tier == "fast"
    assert "state store BrokenStore failed" in caplog.text
    assert isinstance(r.state, SafeStateStore) and r.state.failures >= 4
    for _ in range(5):
        await r.acomplete(easy_turn())
    assert r.breaker("fast").state == "open"  # the local fallback still protects the turn
    assert (await r.acomplete(easy_turn())).trace.escalations == ("circuit_open",)


def test_a_disabled_breaker_never_opens(server: ScriptedServer, path: RoutePath) -> None:
    policy = make_policy(server, retries=(0, 0))
    policy["resilience"] = {"breaker": {"enabled": False}}
    r = tracked(Router(policy))
    server.script([Reply.status(500)] * 8, model="fast-model")
    for _ in range(8):
        assert path.complete(r, easy_turn()).trace.escalations == ("backend_error",)
    assert r.breaker("fast").state == "closed"
    assert len(server.requests_for("fast-model")) == 8


@pytest.mark.anyio
async def test_the_safe_store_answers_every_operation_locally_while_the_store_is_down() -> None:
    broken: StateStore = BrokenStore()
    safe = SafeStateStore(broken, warn_every_s=3600)
    rules = TaskRules()
    for _ in range(5):
        assert safe.breaker_allow("b", now=0.0, config=CONFIG).allowed
        await safe.abreaker_record("b", "failure", now=0.0, config=CONFIG)
    assert (await safe.abreaker_snapshot("b", now=0.0, config=CONFIG)).state == "open"
    trial = await safe.abreaker_allow("b", now=5.0, config=CONFIG)
    assert trial.allowed and trial.token is not None and trial.token.startswith("local|")
    assert safe.breaker_record("b", "success", now=5.0, config=CONFIG, token=trial.token) == (
        "closed"
    )
    for _ in range(5):
        safe.breaker_record("b", "failure", now=6.0, config=CONFIG)
    again = safe.breaker_allow("b", now=11.0, config=CONFIG)
    state = await safe.abreaker_record("b", "failure", now=11.0, config=CONFIG, token=again.token)
    assert state == "open" and safe.breaker_snapshot("b", now=11.0, config=CONFIG).state == "open"
    assert safe.task_record("t", TaskDelta(cost=1.0), rules=rules).steps == 1
    assert (await safe.atask_record("t", TaskDelta(cost=1.0), rules=rules)).cost == 2.0
    assert safe.task_snapshot("t").steps == 2 and (await safe.atask_snapshot("t")).steps == 2
    assert safe.failures == 23 and "BrokenStore" in repr(safe)  # trial releases go local


@pytest.mark.anyio
async def test_the_safe_store_passes_through_a_working_store() -> None:
    inner = MemoryStateStore()
    safe = SafeStateStore(inner)
    trial_free = await safe.abreaker_allow("b", now=0.0, config=CONFIG)
    assert trial_free.allowed and trial_free.token is None
    assert await safe.abreaker_record("b", "failure", now=0.0, config=CONFIG) == "closed"
    assert inner.breaker_snapshot("b", now=0.0, config=CONFIG).consecutive_failures == 1
    await safe.atask_record("t", TaskDelta(), rules=TaskRules())
    assert inner.task_snapshot("t").steps == 1 and safe.failures == 0


class SuspendingStore(MemoryStateStore):
    """A store whose async operations really wait (as a network store's do)."""

    async def abreaker_allow(self, name: str, **kw: Any) -> Admission:
        await anyio.sleep(0)
        return self.breaker_allow(name, **kw)

    async def abreaker_record(self, name: str, outcome: Any, **kw: Any) -> Any:
        await anyio.sleep(0)
        return self.breaker_record(name, outcome, **kw)

    async def atask_record(self, task_id: str, delta: TaskDelta, **kw: Any) -> Any:
        await anyio.sleep(0)
        return self.task_record(task_id, delta, **kw)


@pytest.mark.anyio
async def test_a_cancelled_trial_is_released_even_when_the_store_must_be_awaited(
    server: ScriptedServer,
) -> None:
    clock, sink = Clock(), MemorySink()
    store = SuspendingStore()
    r = tracked(Router(make_policy(server, retries=(0, 0)), clock=clock, state=store, sinks=[sink]))
    server.script([Reply.status(503)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    for _ in range(5):
        await r.acomplete(easy_turn())
    clock.now += CONFIG.cooldown_s
    server.script([Reply.slow(30.0)], model="fast-model")
    async with r.task("t-cancel") as task:
        async with anyio.create_task_group() as tg:
            tg.start_soon(r.acomplete, easy_turn())
            while len(server.requests_for("fast-model")) < 6:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()  # every await in the scope is cancelled from now on
    assert not store.breaker_snapshot("fast", now=clock.now, config=CONFIG).trial_in_flight
    assert sink.traces[-1].interrupted == "CancelledError" and task.steps == 1
