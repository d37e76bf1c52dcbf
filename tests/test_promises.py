"""The engine's promises, each on both paths (the ``path`` fixture: sync and async).

One trace per turn however it ends, the turn's deadline, the breaker, a caller that stops
reading, the cost of every attempt: a turn keeps each of these whether it is driven by
``complete`` or ``acomplete``, ``stream`` or ``astream``. The backends are the in-process
doubles, so each test is the engine and nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import RoutePath
from routerkit import doubles_policy, easy_turn

from tiered_router import (
    AllTiersFailed,
    BackendTimeout,
    Completion,
    GateFailed,
    MemorySink,
    Router,
    Usage,
)
from tiered_router.backends import CompletionRequest
from tiered_router.testing import ScriptedBackend, ScriptError

PRICED = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


def _policy(**sections: Any) -> dict[str, Any]:
    policy = doubles_policy(
        resilience={"retry": {"base_s": 0.0, "max_s": 0.0}},
        scoring={"type": "heuristic", "threshold": 0.9},
        **sections,
    )
    for config in policy["backends"].values():
        config["max_retries"] = 0
        config["price"] = PRICED
    return policy


def _router(fast: Any, frontier: Any, sink: MemorySink, **options: Any) -> Router:
    policy = options.pop("policy", None) or _policy()
    return Router(policy, backends={"fast": fast, "frontier": frontier}, sinks=[sink], **options)


def _run(path: RoutePath, how: str, router: Router, **options: Any) -> Any:
    """The turn's result (``complete``) or its stream (``stream``), on ``path``."""
    if how == "complete":
        return path.complete(router, easy_turn(), **options)
    _chunks, stream = path.stream(router, easy_turn(), **options)
    return stream.result


HOW = pytest.mark.parametrize("how", ["complete", "stream"])


# -- one trace per turn, however it ends ---------------------------------------------------------


@HOW
def test_an_answered_turn_is_traced_once(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    result = _run(
        path, how, _router(ScriptedBackend("fast", ["hi"]), ScriptedBackend("frontier"), sink)
    )
    assert result.tier == "fast" and result.completion.text == "hi"
    assert sink.traces == [result.trace]


@HOW
def test_an_escalated_turn_is_traced_once(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", [""])  # empty: fails the gate
    result = _run(path, how, _router(fast, ScriptedBackend("frontier", ["ok"]), sink))
    assert result.tier == "frontier" and result.escalated
    assert sink.traces == [result.trace]
    assert result.trace.escalations == ("gate_failed",)
    assert [a.tier for a in result.trace.attempts] == ["fast", "frontier"]


@HOW
def test_a_turn_no_tier_answered_is_traced_once(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", [BackendTimeout("slow")])
    frontier = ScriptedBackend("frontier", [BackendTimeout("slow too")])
    with pytest.raises(AllTiersFailed) as info:
        _run(path, how, _router(fast, frontier, sink))
    assert sink.traces == [info.value.trace]
    assert info.value.trace.escalations == ("backend_error",)


@HOW
def test_a_raised_gate_failure_is_traced_once(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    policy = _policy(escalation={"when_frontier_fails_gate": "raise"})
    router = _router(
        ScriptedBackend("fast", [""]), ScriptedBackend("frontier", [""]), sink, policy=policy
    )
    with pytest.raises(GateFailed) as info:
        _run(path, how, router)
    assert sink.traces == [info.value.trace]
    assert info.value.trace.escalations == ("gate_failed",)


@HOW
def test_a_test_doubles_mistake_is_the_tests_not_a_backend_error(path: RoutePath, how: str) -> None:
    # a double out of script raises ScriptError (a BaseException): no escalation hides it,
    # and the turn's trace still goes out once, interrupted by it
    sink = MemorySink()
    frontier = ScriptedBackend("frontier", ["never asked"])
    with pytest.raises(ScriptError, match="script exhausted"):
        _run(path, how, _router(ScriptedBackend("fast"), frontier, sink))
    (trace,) = sink.traces
    assert trace.interrupted == "ScriptError" and frontier.requests == []


class _Asserting:
    """A backend (not a test double) with a bug: an ``assert`` fails inside it."""

    name = "fast"
    model = "buggy"
    kind = "diffusion"
    supports_tools = True

    async def acomplete(self, request: CompletionRequest) -> Completion:
        raise AssertionError("an internal invariant")

    def complete(self, request: CompletionRequest) -> Completion:
        raise AssertionError("an internal invariant")


def test_an_assertion_inside_a_backend_is_its_error(path: RoutePath) -> None:
    # production code has no special case for AssertionError (it had one for the test
    # doubles): a backend's is a malformed answer like any other, and the turn escalates
    sink = MemorySink()
    result = path.complete(
        _router(_Asserting(), ScriptedBackend("frontier", ["ok"]), sink), easy_turn()
    )
    assert result.tier == "frontier" and result.trace.escalations == ("backend_error",)
    error = result.trace.attempts[0].error
    assert error is not None and error["type"] == "BackendResponseError"
    assert "AssertionError" in error["message"]


# -- the deadline ------------------------------------------------------------------------------


@HOW
def test_the_deadline_bounds_the_whole_turn(path: RoutePath, how: str) -> None:
    clock = [0.0]

    def slow_clock() -> float:
        clock[0] += 0.2  # every reading of the clock costs 0.2 s of the turn's deadline
        return clock[0]

    sink = MemorySink()
    fast = ScriptedBackend("fast", [BackendTimeout("slow")])
    frontier = ScriptedBackend("frontier", ["never asked"])
    router = _router(fast, frontier, sink, clock=slow_clock)
    with pytest.raises(AllTiersFailed) as info:
        _run(path, how, router, deadline_s=0.5)
    last = info.value.attempts[-1]
    assert last.backend == "frontier" and last.error is not None
    assert last.error["type"] == "BackendTimeout"
    assert frontier.requests == [] and sink.traces == [info.value.trace]


# -- the breaker ------------------------------------------------------------------------------


@HOW
def test_an_open_breaker_is_routed_around(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", ["never asked"])
    router = _router(fast, ScriptedBackend("frontier", ["ok"]), sink)
    for _ in range(5):
        router.breaker("fast").record("failure")
    assert router.breaker("fast").state == "open"
    result = _run(path, how, router)
    assert result.tier == "frontier" and result.trace.escalations == ("circuit_open",)
    assert fast.requests == []


@HOW
def test_a_failing_backend_opens_its_breaker(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", default=BackendTimeout("down"))
    router = _router(fast, ScriptedBackend("frontier", default="ok"), sink)
    for _ in range(5):
        assert _run(path, how, router).trace.escalations == ("backend_error",)
    assert router.breaker("fast").state == "open"
    assert _run(path, how, router).trace.escalations == ("circuit_open",)
    assert len(fast.requests) == 5


# -- a caller that stops reading ---------------------------------------------------------------


def test_a_caller_that_stops_reading_ends_the_turn(path: RoutePath) -> None:
    sink = MemorySink()
    fast = ScriptedBackend("fast", ["a draft long enough to come in three chunks"])
    cheap = _policy(gate={"checks": ["non_empty"]})  # the draft streams straight through
    router = _router(fast, ScriptedBackend("frontier"), sink, policy=cheap)
    chunks, _stream = path.stream(router, easy_turn(), read=1)
    assert len(chunks) == 1
    (trace,) = sink.traces
    assert trace.interrupted == "abandoned" and trace.tier is None
    (attempt,) = trace.attempts
    assert attempt.error is not None and attempt.error["type"] == "GeneratorExit"
    assert router.breaker("fast").snapshot().consecutive_failures == 0


# -- cost ----------------------------------------------------------------------------------------


@HOW
def test_every_attempt_is_paid_for(path: RoutePath, how: str) -> None:
    sink = MemorySink()
    usage = Usage(input_tokens=1000, output_tokens=500)
    fast = ScriptedBackend("fast", [Completion(text="", usage=usage)])
    frontier = ScriptedBackend("frontier", [Completion(text="ok", usage=usage)])
    trace = _run(path, how, _router(fast, frontier, sink)).trace
    costs = [a.cost for a in trace.attempts]
    assert costs == [pytest.approx(0.002)] * 2  # 1000 in at $1/M + 500 out at $2/M
    assert trace.cost == pytest.approx(sum(costs))
