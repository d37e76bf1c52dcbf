from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from conftest import RoutePath
from routerkit import JSON_TURN, SECRET, Slept, easy_turn, make_policy, router_for, tracked

from tiered_router import (
    AllTiersFailed,
    GateFailed,
    JSONLSink,
    LoggingSink,
    MemorySink,
    Router,
)
from tiered_router.testing import Reply, ScriptedServer


def test_fast_draft_that_passes_is_returned(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.text("hi there")], model="fast-model")
    result = path.complete(router_for(server), easy_turn())
    assert result.tier == "fast"
    assert result.escalated is False
    assert result.completion.text == "hi there"
    (attempt,) = result.trace.attempts
    assert attempt.backend == "fast" and attempt.model == "fast-model"
    assert attempt.verdict is not None and attempt.verdict.passed
    expected = (attempt.usage.input_tokens * 0.25 + attempt.usage.output_tokens * 0.75) / 1e6
    assert attempt.cost == pytest.approx(expected)
    assert result.trace.decision.tier == "fast"
    assert [r.body["model"] for r in server.requests] == ["fast-model"]


def test_gate_failure_escalates_to_frontier(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"answer": 4})], model="frontier-model")
    result = path.complete(router_for(server), easy_turn(**JSON_TURN))
    assert result.tier == "frontier"
    assert result.escalated is True
    assert result.trace.escalations == ("gate_failed",)
    first, second = result.trace.attempts
    assert first.verdict is not None and "json_schema" in first.verdict.failed_checks
    assert second.verdict is not None and second.verdict.passed
    assert json.loads(result.completion.text) == {"answer": 4}


def test_a_truncated_draft_escalates(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.truncated("the answer is")], model="fast-model")
    server.script([Reply.text("the answer is 4")], model="frontier-model")
    result = path.complete(router_for(server), easy_turn())
    assert result.tier == "frontier"
    assert result.trace.attempts[0].verdict is not None
    assert result.trace.attempts[0].verdict.failed_checks == ("not_truncated",)


def test_backend_error_after_retries_escalates(server: ScriptedServer, path: RoutePath) -> None:
    slept = Slept()
    server.script([Reply.status(500)] * 3, model="fast-model")
    server.script([Reply.text("from frontier")], model="frontier-model")
    result = path.complete(router_for(server, slept), easy_turn())
    assert result.tier == "frontier" and result.escalated
    assert result.trace.escalations == ("backend_error",)
    errors = [a.error for a in result.trace.attempts if a.error]
    assert len(errors) == 3
    assert all(e["type"] == "BackendStatusError" and e["status_code"] == 500 for e in errors)
    assert [a.try_index for a in result.trace.attempts[:3]] == [0, 1, 2]
    # exponential backoff with jitter in [0.75, 1.0]: 0.5*2**0, 0.5*2**1
    assert len(slept) == 2
    assert 0.375 <= slept[0] <= 0.5 and 0.75 <= slept[1] <= 1.0


def test_retry_after_is_honoured(server: ScriptedServer, path: RoutePath) -> None:
    slept = Slept()
    server.script([Reply.status(429, retry_after=3), Reply.text("ok")], model="fast-model")
    result = path.complete(router_for(server, slept), easy_turn())
    assert result.tier == "fast" and not result.escalated
    assert slept == [3.0]
    assert result.trace.attempts[0].error is not None
    assert result.trace.attempts[0].error["retry_after_s"] == 3.0


def test_retry_after_ms_is_preferred(server: ScriptedServer, path: RoutePath) -> None:
    slept = Slept()
    server.script(
        [Reply.status(429, retry_after=9, retry_after_ms=250), Reply.text("ok")], model="fast-model"
    )
    result = path.complete(router_for(server, slept), easy_turn())
    assert result.tier == "fast"
    assert slept == [0.25]


def test_long_retry_after_escalates_instead_of_waiting(
    server: ScriptedServer, path: RoutePath
) -> None:
    slept = Slept()
    server.script([Reply.status(429, retry_after=600)], model="fast-model")
    server.script([Reply.text("frontier")], model="frontier-model")
    result = path.complete(router_for(server, slept), easy_turn())
    assert result.tier == "frontier"
    assert slept == []
    assert len(server.requests_for("fast-model")) == 1


def test_non_retryable_status_escalates_without_retry(
    server: ScriptedServer, path: RoutePath
) -> None:
    slept = Slept()
    server.script([Reply.status(400, message="bad request")], model="fast-model")
    server.script([Reply.text("frontier")], model="frontier-model")
    result = path.complete(router_for(server, slept), easy_turn())
    assert result.tier == "frontier"
    assert slept == [] and len(server.requests_for("fast-model")) == 1


def test_dropped_connection_is_retried(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.drop(), Reply.text("second try")], model="fast-model")
    result = path.complete(router_for(server), easy_turn())
    assert result.tier == "fast" and result.completion.text == "second try"
    assert result.trace.attempts[0].error is not None
    assert result.trace.attempts[0].error["type"] == "BackendConnectionError"


def test_final_rule_goes_to_frontier(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.text("final answer")], model="frontier-model")
    result = path.complete(router_for(server), easy_turn(final=True))
    assert result.tier == "frontier" and not result.escalated
    assert result.trace.decision.rule == "final-answer"
    assert server.requests_for("fast-model") == []


def test_frontier_gate_failure_returns_with_verdict(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.empty()], model="fast-model")
    server.script([Reply.empty()], model="frontier-model")
    result = path.complete(router_for(server), easy_turn())
    assert result.tier == "frontier"
    assert result.verdict is not None and not result.verdict.passed
    assert result.trace.escalations == ("gate_failed",)


def test_frontier_gate_failure_raises_when_policy_says_so(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.refusal()], model="fast-model")
    server.script([Reply.refusal()], model="frontier-model")
    router = router_for(server, escalation={"when_frontier_fails_gate": "raise"})
    with pytest.raises(GateFailed) as info:
        path.complete(router, easy_turn())
    assert len(info.value.attempts) == 2
    assert "no_refusal" in info.value.verdict.failed_checks
    assert info.value.trace is not None and info.value.trace.tier == "frontier"


def test_all_tiers_failed_carries_every_attempt(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.status(503)] * 3, model="fast-model")
    server.script([Reply.status(500)] * 2, model="frontier-model")
    with pytest.raises(AllTiersFailed) as info:
        path.complete(router_for(server), easy_turn())
    exc = info.value
    assert len(exc.attempts) == 5 and len(exc.errors) == 5
    assert [a.backend for a in exc.attempts] == ["fast"] * 3 + ["frontier"] * 2
    assert SECRET not in str(exc)


def test_escalation_off_returns_failed_fast_draft(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    router = router_for(server, escalation={"on_gate_failure": False})
    result = path.complete(router, easy_turn(**JSON_TURN))
    assert result.tier == "fast" and not result.escalated
    assert result.verdict is not None and not result.verdict.passed


def test_backend_error_escalation_off_raises(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.status(500)] * 3, model="fast-model")
    router = router_for(server, escalation={"on_backend_error": False})
    with pytest.raises(AllTiersFailed):
        path.complete(router, easy_turn())
    assert server.requests_for("frontier-model") == []


def test_circuit_breaker_routes_around_open_backend(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.status(503)] * 5, model="fast-model")
    server.default = Reply.text("frontier ok")
    router = router_for(server, retries=(0, 0))
    for _ in range(5):
        result = path.complete(router, easy_turn())
        assert result.trace.escalations == ("backend_error",)
    assert router.breaker("fast").state == "open"
    result = path.complete(router, easy_turn())
    assert result.trace.escalations == ("circuit_open",)
    assert result.tier == "frontier" and result.escalated
    assert len(server.requests_for("fast-model")) == 5  # the open backend got no request


def test_circuit_breaker_never_cuts_last_path(server: ScriptedServer, path: RoutePath) -> None:
    server.script([Reply.status(503)] * 5, model="frontier-model")
    server.default = Reply.text("fast fallback")
    router = router_for(server, retries=(0, 0))
    for _ in range(5):  # frontier-decided turns; the frontier fails, the fast tier serves
        result = path.complete(router, easy_turn(final=True))
        assert result.tier == "fast"
    assert router.breaker("frontier").state == "open"
    # with the fast tier unusable (tool turn, tools: false) the open frontier is still tried
    policy = make_policy(server)
    policy["backends"]["fast"]["tools"] = False
    r2 = tracked(Router(policy))
    for _ in range(5):
        r2.breaker("frontier").record("failure")
    assert r2.breaker("frontier").state == "open"
    server.script([Reply.text("frontier anyway")], model="frontier-model")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    result = path.complete(r2, easy_turn(tools=tools, final=True))
    assert result.tier == "frontier" and result.completion.text == "frontier anyway"


def test_deadline_is_shared_by_retries_and_escalation(
    server: ScriptedServer, path: RoutePath
) -> None:
    server.script([Reply.slow(5.0, then=Reply.text("late"))], model="fast-model")
    server.script([Reply.text("never asked")], model="frontier-model")
    router = router_for(server)
    with pytest.raises(AllTiersFailed) as info:
        path.complete(router, easy_turn(), deadline_s=0.3)
    types = [a.error["type"] for a in info.value.attempts if a.error]
    assert types[0] == "BackendTimeout"
    assert all(t == "BackendTimeout" for t in types)
    assert server.requests_for("frontier-model") == []


def test_tool_turn_never_goes_to_backend_without_tools(
    server: ScriptedServer, path: RoutePath
) -> None:
    policy = make_policy(server)
    policy["backends"]["fast"]["tools"] = False
    server.script([Reply.tool_calls([("lookup", {"q": "x"})])], model="frontier-model")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    router = tracked(Router(policy))
    turn = easy_turn(tools=tools)
    decision = router.decide(turn)
    assert decision.tier == "frontier" and decision.rule == "capability.tools"
    result = path.complete(router, turn)
    assert result.tier == "frontier"
    assert result.completion.tool_calls[0].name == "lookup"
    assert server.requests_for("fast-model") == []


def _comparable(trace_dict: dict[str, Any]) -> dict[str, Any]:
    trace_dict = dict(trace_dict)
    trace_dict.pop("turn_id")
    trace_dict["totals"] = {k: v for k, v in trace_dict["totals"].items() if k != "latency_s"}
    trace_dict["attempts"] = [
        {k: v for k, v in a.items() if k != "latency_s"} for a in trace_dict["attempts"]
    ]
    return trace_dict


SCRIPTS: list[tuple[list[Reply], list[Reply], dict[str, Any]]] = [
    ([Reply.text("ok")], [], {}),
    ([Reply.bad_json()], [Reply.json({"a": 1})], JSON_TURN),
    ([Reply.status(500)] * 3, [Reply.text("f")], {}),
    ([Reply.status(429, retry_after=1), Reply.text("ok")], [], {}),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("fast", "frontier", "kw"), SCRIPTS)
async def test_sync_and_async_paths_give_the_same_trace(
    fast: list[Reply], frontier: list[Reply], kw: dict[str, Any]
) -> None:
    traces = []
    for mode in ("async", "sync"):
        with ScriptedServer() as srv:
            srv.script(fast, model="fast-model")
            srv.script(frontier, model="frontier-model")
            router = router_for(srv)
            turn = easy_turn(**kw)
            result = await router.acomplete(turn) if mode == "async" else router.complete(turn)
            traces.append(_comparable(result.trace.to_dict()))
    assert traces[0] == traces[1]


def test_sinks_receive_traces_and_secrets_stay_out(
    server: ScriptedServer, tmp_path: Any, caplog: pytest.LogCaptureFixture, path: RoutePath
) -> None:
    memory = MemorySink()
    jsonl = JSONLSink(tmp_path / "traces.jsonl")
    server.script([Reply.status(401, message="bad key")], model="fast-model")
    server.script([Reply.text("ok")], model="frontier-model")
    router = router_for(server, sinks=[memory, jsonl, LoggingSink()])
    with caplog.at_level(logging.DEBUG):
        result = path.complete(router, easy_turn(metadata={"task": "demo"}))
    jsonl.close()
    assert memory.traces == [result.trace]
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    assert row["tier"] == "frontier" and row["escalations"] == ["backend_error"]
    assert row["attempts"][0]["error"]["status_code"] == 401
    assert row["metadata"] == {"task": "demo"}
    assert any("tier=frontier" in r.getMessage() for r in caplog.records)
    for text in (lines[0], caplog.text, repr(router), repr(router.policy), str(result)):
        assert SECRET not in text


def test_decide_makes_no_call(server: ScriptedServer) -> None:
    router = router_for(server)
    decision = router.decide(easy_turn())
    assert decision.tier == "fast" and 0.0 <= decision.score <= 1.0
    assert decision.backend == "fast" and decision.threshold == 0.6
    assert server.requests == []


def test_deadline_passed_before_a_tier_is_recorded_as_its_attempt(
    server: ScriptedServer, path: RoutePath
) -> None:
    clock = [0.0]

    def slow_clock() -> float:
        clock[0] += 0.2  # every reading of the clock costs 0.2 s of the turn's deadline
        return clock[0]

    server.script([Reply.status(500)], model="fast-model")
    slept = Slept()
    router = tracked(
        Router(make_policy(server), clock=slow_clock, sleep=slept, asleep=slept.asleep)
    )
    with pytest.raises(AllTiersFailed) as info:
        path.complete(router, easy_turn(), deadline_s=0.5)
    backends = [a.backend for a in info.value.attempts]
    assert backends[-1] == "frontier"  # the skipped tier shows up, with its timeout
    assert info.value.attempts[-1].error is not None
    assert info.value.attempts[-1].error["type"] == "BackendTimeout"
    assert "frontier" in str(info.value)


def test_breaker_is_not_routed_around_when_backend_errors_do_not_escalate(
    server: ScriptedServer,
    path: RoutePath,
) -> None:
    router = router_for(server, escalation={"on_backend_error": False})
    for _ in range(5):
        router.breaker("fast").record("failure")
    server.script([Reply.text("fast anyway")], model="fast-model")
    result = path.complete(router, easy_turn())
    assert result.tier == "fast" and result.trace.escalations == ()


@pytest.mark.anyio
async def test_a_turn_that_is_not_a_turn_is_refused_at_the_door() -> None:
    router = Router(
        {
            "version": 1,
            "backends": {
                "f": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
            },
            "tiers": {"fast": "f", "frontier": "f"},
        }
    )
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(
        TypeError, match=r"expected a tiered_router.Turn, got list: .*Turn\(messages"
    ):
        await router.acomplete(messages)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got dict"):
        router.decide({"messages": messages})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got str"):
        router.astream("hi")  # type: ignore[arg-type]
    await router.aclose()


def test_bad_arguments_get_errors_that_say_what_and_how() -> None:
    from tiered_router import Turn

    router = Router(
        {
            "version": 1,
            "backends": {
                "f": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
            },
            "tiers": {"fast": "f", "frontier": "f"},
        }
    )
    turn = Turn([{"role": "user", "content": "hi"}])
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(ValueError, match=r"deadline_s must be a number of seconds > 0"):
            router.complete(turn, deadline_s=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="task max_cost must be a number > 0"):
        router.task(max_cost=-1)
    with pytest.raises(ValueError, match="task max_escalations must be a number >= 0"):
        router.task(max_escalations=-2)
    assert router.task(max_escalations=0).max_escalations == 0
    with pytest.raises(ValueError, match=r"^Turn.messages: must be a list, got str$"):
        Turn("hi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Turn.tools: must be a list, got str$"):
        Turn([{"role": "user", "content": "hi"}], tools="get_weather")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Turn.tools\[1\]: must be an OpenAI tool dict"):
        Turn([{"role": "user", "content": "hi"}], tools=[{"name": "a"}, 5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"^Turn.tools\[0\]: tool has no function name"):
        Turn([{"role": "user", "content": "hi"}], tools=[{"type": "function"}])
    with pytest.raises(ValueError, match=r"^Turn.messages: must be a list, got int$"):
        Turn.from_openai(messages=5)
    router.close()
