"""Draft panels and hedged calls through the public API, over real HTTP.

Each test scripts the local OpenAI-compatible server (``ScriptedServer``) per model: the
panel's drafts are concurrent requests to the fast model, the hedge a request to the
frontier model. Traces are read through a sink.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from routerkit import doubles_policy, make_policy

from tiered_router import AllTiersFailed, PolicyError, Router, Turn, load_policy
from tiered_router.backends import CompletionRequest
from tiered_router.testing import FunctionBackend, Reply, ScriptedServer
from tiered_router.trace import MemorySink, Trace
from tiered_router.turn import Completion, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                },
                "required": ["city"],
            },
        },
    }
]


PARIS = '{"city": "Paris"}'


def tool_turn(**kw: Any) -> Turn:
    return Turn([{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS, **kw)


def call(city: str, **extra: Any) -> Reply:
    return Reply.tool_calls([("get_weather", {"city": city, **extra})])


def panel_router(
    server: ScriptedServer, *, sink: MemorySink, drafts: dict[str, Any] | None = None, **more: Any
) -> Router:
    sections: dict[str, Any] = {
        "drafts": {"k": 3, "min_agreement": 0.67, "n": False, **(drafts or {})},
        "rules": [{"name": "all-fast", "when": {}, "tier": "fast"}],
        "resilience": {"breaker": {"enabled": True, "consecutive_failures": 2}},
        **more,
    }
    return Router(make_policy(server, retries=(0, 0), **sections), sinks=[sink])


def drafts_of(trace: Trace) -> list[Any]:
    return [a for a in trace.attempts if a.role == "draft"]


@pytest.mark.anyio
async def test_agreeing_drafts_are_accepted(server: ScriptedServer) -> None:
    server.script([call("Paris"), call("Paris", unit="c"), call("Paris")], model="fast-model")
    sink = MemorySink()
    async with panel_router(server, sink=sink, drafts={"early": False}) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "fast" and not result.escalated
    assert result.completion.tool_calls[0].name == "get_weather"
    trace = sink.traces[-1]
    drafts = drafts_of(trace)
    assert len(drafts) == 3 and all(a.ok for a in drafts)
    # the default unit is dropped: the three calls are the same answer
    assert len({a.answer_key["value"] for a in drafts if a.answer_key}) == 1
    assert trace.panel is not None and trace.panel["agreed"] is True
    assert trace.cost == pytest.approx(sum(a.cost for a in drafts)) and trace.cost > 0
    assert len(server.requests_for("frontier-model")) == 0


@pytest.mark.anyio
async def test_disagreement_escalates_with_drafts_disagree(server: ScriptedServer) -> None:
    server.script([call("Paris"), call("London"), call("Rome")], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    async with panel_router(server, sink=sink) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "frontier" and result.escalated
    trace = sink.traces[-1]
    assert trace.escalations == ("drafts_disagree",)
    assert trace.panel is not None and trace.panel["agreed"] is False
    cities = sorted(a.answer_key["value"] for a in drafts_of(trace) if a.answer_key)
    assert len(cities) == 3 and len(set(cities)) == 3  # the panel's answers are in the trace
    assert trace.attempts[-1].tier == "frontier" and trace.attempts[-1].role == "call"


@pytest.mark.anyio
async def test_early_decision_cancels_the_third_draft(server: ScriptedServer) -> None:
    server.script(
        [call("Paris"), call("Paris"), Reply.slow(5.0, then=call("Rome"))], model="fast-model"
    )
    sink = MemorySink()
    async with panel_router(server, sink=sink) as router:
        result = await router.acomplete(tool_turn())
        breaker = await router.breaker("fast").asnapshot()
    assert result.tier == "fast"
    trace = sink.traces[-1]
    drafts = drafts_of(trace)
    cancelled = [a for a in drafts if a.cancelled]
    assert len(drafts) == 3 and len(cancelled) == 1
    assert cancelled[0].cost == 0.0 and cancelled[0].usage.output_tokens == 0
    assert cancelled[0].latency_s < 4.0
    assert trace.latency_s < 4.0
    assert breaker.state == "closed" and breaker.consecutive_failures == 0


def test_sync_early_decision_and_parity(server: ScriptedServer) -> None:
    server.script(
        [call("Paris"), call("Paris"), Reply.slow(3.0, then=call("Rome"))], model="fast-model"
    )
    sink = MemorySink()
    with panel_router(server, sink=sink) as router:
        result = router.complete(tool_turn())
    assert result.tier == "fast"
    trace = sink.traces[-1]
    assert [a.cancelled for a in drafts_of(trace)].count(True) == 1
    assert trace.latency_s < 2.5
    assert trace.panel is not None and trace.panel["agreed"] is True


def test_greedy_same_prompt_panel_is_refused_at_load(tmp_path: Any) -> None:
    policy = {
        "version": 1,
        "backends": {
            "llada": {"preset": "sglang", "model": "llada2", "base_url": "http://127.0.0.1:9/v1"},
            "big": {"type": "openai", "model": "gpt-5.2", "api_key": "x"},
        },
        "tiers": {"fast": "llada", "frontier": "big"},
        "drafts": {"k": 3},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert "policy.yaml:" in message and "drafts" in message and "greedily" in message
    assert "variants" in message
    policy["drafts"] = {"k": 3, "variants": ["", "Answer tersely."]}
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    assert load_policy(path).drafts is not None


@pytest.mark.anyio
async def test_hedge_answers_first_when_the_fast_side_is_slow(server: ScriptedServer) -> None:
    server.script([Reply.slow(5.0, then=call("Paris"))], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"after_s": 0.2},
    )
    async with Router(policy, sinks=[sink]) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "frontier" and not result.escalated
    trace = sink.traces[-1]
    assert trace.escalations == ("hedged",)
    roles = {(a.role, a.cancelled) for a in trace.attempts}
    assert ("hedge", False) in roles and ("call", True) in roles
    assert trace.latency_s < 4.0


@pytest.mark.anyio
async def test_fast_answer_cancels_the_hedge(server: ScriptedServer) -> None:
    server.script([Reply.slow(0.4, then=call("Paris"))], model="fast-model")
    server.script([Reply.slow(5.0, then=call("Paris"))], model="frontier-model")
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"after_s": 0.1},
    )
    async with Router(policy, sinks=[sink]) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "fast"
    trace = sink.traces[-1]
    hedge = [a for a in trace.attempts if a.role == "hedge"]
    assert len(hedge) == 1 and hedge[0].cancelled and hedge[0].cost == 0.0
    assert trace.latency_s < 4.0


@pytest.mark.anyio
async def test_every_draft_failing_escalates(server: ScriptedServer) -> None:
    server.script([Reply.status(500)] * 3, model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    async with panel_router(server, sink=sink) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "frontier"
    assert sink.traces[-1].escalations == ("backend_error",)


@pytest.mark.anyio
async def test_concurrent_panel_turns(server: ScriptedServer) -> None:
    server.default = call("Paris")
    sink = MemorySink()
    async with panel_router(server, sink=sink) as router:
        results = await asyncio.gather(*(router.acomplete(tool_turn()) for _ in range(32)))
    assert all(r.tier == "fast" for r in results)
    assert len(sink.traces) == 32
    assert all(t.panel is not None and t.panel["agreed"] for t in sink.traces)


def test_no_frontier_left_raises_with_every_draft(server: ScriptedServer) -> None:
    server.script([Reply.status(500)] * 3, model="fast-model")
    server.script([Reply.status(500)], model="frontier-model")
    sink = MemorySink()
    with panel_router(server, sink=sink) as router, pytest.raises(AllTiersFailed) as caught:
        router.complete(tool_turn())
    assert len([a for a in caught.value.attempts if a.role == "draft"]) == 3


@pytest.mark.anyio
async def test_a_panel_stream_streams_the_accepted_draft(server: ScriptedServer) -> None:
    server.script([call("Paris"), call("Paris"), call("Paris")], model="fast-model")
    sink = MemorySink()
    async with panel_router(server, sink=sink, drafts={"early": False}) as router:
        stream = router.astream(tool_turn())
        await stream.start()
        assert len([a for a in stream.attempts if a.role == "draft"]) == 3  # decided first
        chunks = [chunk async for chunk in stream]
    calls = [c for chunk in chunks for c in chunk.tool_calls]
    assert calls and calls[0].name == "get_weather"
    assert stream.result.tier == "fast"
    assert sink.traces[-1].panel is not None and sink.traces[-1].panel["agreed"]


def test_a_sync_panel_stream_escalates_on_disagreement(server: ScriptedServer) -> None:
    server.script([call("Paris"), call("London"), call("Rome")], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    with panel_router(server, sink=sink) as router:
        stream = router.stream(tool_turn())
        chunks = list(stream)
    assert [c for chunk in chunks for c in chunk.tool_calls][0].name == "get_weather"
    assert stream.result.tier == "frontier"
    assert sink.traces[-1].escalations == ("drafts_disagree",)


@pytest.mark.anyio
async def test_variants_and_temperature_reach_each_draft(server: ScriptedServer) -> None:
    server.default = call("Paris")
    sink = MemorySink()
    drafts = {"variants": ["", "Be brief.", "Think first."], "temperature": 0.7, "early": False}
    async with panel_router(server, sink=sink, drafts=drafts) as router:
        await router.acomplete(tool_turn())
    bodies = [r.body for r in server.requests_for("fast-model")]
    systems = sorted(
        next((m["content"] for m in b["messages"] if m["role"] == "system"), "") for b in bodies
    )
    assert systems == ["", "Be brief.", "Think first."]
    assert all(b.get("temperature") == 0.7 for b in bodies)


@pytest.mark.anyio
async def test_prose_is_not_comparable_and_falls_back_to_the_gate(
    server: ScriptedServer,
) -> None:
    server.script(
        [Reply.text("Hello there."), Reply.text("Hi!"), Reply.text("Hey.")], model="fast-model"
    )
    sink = MemorySink()
    drafts = {"when": ["all"], "early": False}
    async with panel_router(server, sink=sink, drafts=drafts) as router:
        result = await router.acomplete(Turn([{"role": "user", "content": "Say hi."}]))
    assert result.tier == "fast"
    panel = sink.traces[-1].panel
    assert panel is not None and panel["comparable"] is False and panel["agreed"] is False
    assert "not comparable" in panel["reason"]


@pytest.mark.anyio
async def test_turns_outside_when_get_one_draft(server: ScriptedServer) -> None:
    server.default = Reply.text("Hello.")
    sink = MemorySink()
    async with panel_router(server, sink=sink) as router:  # when: tools, json, answer
        await router.acomplete(Turn([{"role": "user", "content": "Say hi."}]))
    trace = sink.traces[-1]
    assert trace.panel is None and [a.role for a in trace.attempts] == ["call"]


@pytest.mark.anyio
async def test_json_turns_agree_on_canonical_json(server: ScriptedServer) -> None:
    server.script(
        [Reply.json({"a": 1, "b": 2}), Reply.text('{"b": 2.0, "a": 1}'), Reply.json({"a": 3})],
        model="fast-model",
    )
    sink = MemorySink()
    async with panel_router(server, sink=sink, drafts={"early": False}) as router:
        turn = Turn(
            [{"role": "user", "content": "Give a and b."}],
            response_format={"type": "json_object"},
        )
        result = await router.acomplete(turn)
    assert result.tier == "fast"
    panel = sink.traces[-1].panel
    assert panel is not None and panel["agreed"] and panel["kind"] == "json"
    assert len(panel["members"]) == 2


@pytest.mark.anyio
async def test_a_task_can_forbid_hedging(server: ScriptedServer) -> None:
    server.default = Reply.slow(0.3, then=call("Paris"))
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"after_s": 0.0},
    )
    async with Router(policy, sinks=[sink]) as router:
        async with router.task(hedge=False):
            await router.acomplete(tool_turn())
        async with router.task():
            await router.acomplete(tool_turn())
    forbidden, allowed = sink.traces
    assert not any(a.role == "hedge" for a in forbidden.attempts)
    assert any(a.role == "hedge" for a in allowed.attempts)
    assert allowed.cost == pytest.approx(sum(a.cost for a in allowed.attempts))


def test_sync_hedge_answers_first(server: ScriptedServer) -> None:
    server.script([Reply.slow(3.0, then=call("Paris"))], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"band": 1.0},
    )
    with Router(policy, sinks=[sink]) as router:
        result = router.complete(tool_turn())
    assert result.tier == "frontier"
    trace = sink.traces[-1]
    assert trace.escalations == ("hedged",) and trace.latency_s < 2.5
    assert [a.cancelled for a in trace.attempts if a.tier == "fast"] == [True]


@pytest.mark.anyio
async def test_the_breaker_recovers_under_a_panel(server: ScriptedServer) -> None:
    sink = MemorySink()
    breaker = {"enabled": True, "consecutive_failures": 2, "cooldown_s": 0.2}
    server.script([Reply.status(500)] * 3, model="fast-model")
    server.script([call("Paris")] * 3, model="frontier-model")
    async with panel_router(server, sink=sink, resilience={"breaker": breaker}) as router:
        first = await router.acomplete(tool_turn())
        assert (await router.breaker("fast").asnapshot()).state == "open"
        second = await router.acomplete(tool_turn())  # refused at once: circuit_open
        await asyncio.sleep(0.3)
        server.default = call("Paris")
        states = []
        for _ in range(3):
            await router.acomplete(tool_turn())
            states.append((await router.breaker("fast").asnapshot()).state)
    assert first.tier == second.tier == "frontier"
    assert sink.traces[1].escalations == ("circuit_open",)
    assert states[-1] == "closed"
    assert sink.traces[-1].tier == "fast" and sink.traces[-1].panel["agreed"]


@pytest.mark.anyio
async def test_64_concurrent_turns_with_panels_and_hedges(server: ScriptedServer) -> None:
    server.script([Reply.slow(0.05, then=call("Paris"))] * 200, model="fast-model")
    server.default = call("Paris")
    sink = MemorySink()
    async with panel_router(server, sink=sink, hedge={"after_s": 0.5}) as router:
        results = await asyncio.gather(*(router.acomplete(tool_turn()) for _ in range(64)))
    assert len(results) == 64 and len(sink.traces) == 64
    assert len({t.turn_id for t in sink.traces}) == 64
    for trace in sink.traces:
        assert trace.tier is not None
        assert sum(1 for a in trace.attempts if a.role == "draft") == 3


@pytest.mark.anyio
async def test_a_hedge_that_wins_while_the_cut_drafts_unwind_still_traces_every_draft() -> None:
    """The panel has decided and is cancelling its last draft when the hedge answers.

    A backend's call can take time to unwind once cancelled (closing its connection). The
    hedge's answer arrives in that window; the fast side is cancelled there, outside the
    wait for the drafts, and before the fix the turn's trace lost all three drafts (the
    64-turn test below failed on a loaded CI machine).
    """
    answered = 0
    unwinding = asyncio.Event()

    async def drafter(request: CompletionRequest) -> Completion:
        nonlocal answered
        answered += 1
        if answered <= 2:  # two agreeing drafts decide the panel at once
            return Completion(tool_calls=(ToolCall(id="c", name="get_weather", arguments=PARIS),))
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            unwinding.set()
            await asyncio.sleep(0.3)  # its connection closes slowly
            raise
        raise AssertionError("the third draft is cut")

    async def frontier(request: CompletionRequest) -> Completion:
        await unwinding.wait()  # the hedge answers while the cut draft unwinds
        return Completion(tool_calls=(ToolCall(id="f", name="get_weather", arguments=PARIS),))

    sink = MemorySink()
    policy = doubles_policy(
        drafts={"k": 3, "min_agreement": 0.67, "n": False},
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"after_s": 0.0},
    )
    backends = {
        "fast": FunctionBackend("fast", drafter, kind="diffusion"),
        "frontier": FunctionBackend("frontier", frontier),
    }
    async with Router(policy, backends=backends, sinks=[sink]) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "frontier"
    (trace,) = sink.traces
    drafts = drafts_of(trace)
    assert len(drafts) == 3
    assert [a.ok for a in drafts].count(True) == 2 and drafts[2].cancelled
    assert trace.panel is not None and trace.panel["reason"].startswith("the hedged")
    assert trace.cost == pytest.approx(sum(a.cost for a in trace.attempts))


def test_sync_and_async_give_the_same_panel_trace(server: ScriptedServer) -> None:
    def run(sync: bool) -> Trace:
        server.reset()
        server.script([call("Paris"), call("Paris", unit="c"), call("London")], model="fast-model")
        sink = MemorySink()
        router = panel_router(server, sink=sink, drafts={"early": False})
        if sync:
            with router:
                router.complete(tool_turn(id="t1"))
        else:

            async def once() -> None:
                async with router:
                    await router.acomplete(tool_turn(id="t1"))

            asyncio.run(once())
        return sink.traces[-1]

    sync, async_ = run(True), run(False)
    keys = sorted(a.answer_key["value"] for a in sync.attempts if a.answer_key)
    assert keys == sorted(a.answer_key["value"] for a in async_.attempts if a.answer_key)
    assert sync.tier == async_.tier == "fast"
    assert {k: v for k, v in sync.panel.items() if k != "members"} == {
        k: v for k, v in async_.panel.items() if k != "members"
    }


@pytest.mark.anyio
async def test_a_same_prompt_panel_uses_n_where_the_dialect_takes_it(
    server: ScriptedServer,
) -> None:
    server.script([call("Paris"), call("Paris"), call("Rome")], model="fast-model")
    sink = MemorySink()
    drafts = {"n": True, "temperature": 1.0}
    async with panel_router(server, sink=sink, drafts=drafts) as router:
        result = await router.acomplete(tool_turn())
    assert result.tier == "fast"
    (request,) = server.requests_for("fast-model")
    assert request.body["n"] == 3 and request.body["temperature"] == 1.0
    drafts_ = drafts_of(sink.traces[-1])
    assert len(drafts_) == 3 and all(a.ok for a in drafts_)
    assert drafts_[0].cost > 0 and drafts_[1].cost == drafts_[2].cost == 0.0  # one usage
    assert sink.traces[-1].panel["agreed"] and len(sink.traces[-1].panel["members"]) == 2


def hedge_router(server: ScriptedServer, sink: MemorySink, **hedge: Any) -> Router:
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge=hedge,
    )
    return Router(policy, sinks=[sink])


def test_sync_fast_answer_cancels_the_hedge(server: ScriptedServer) -> None:
    server.script([Reply.slow(0.4, then=call("Paris"))], model="fast-model")
    server.script([Reply.slow(3.0, then=call("Paris"))], model="frontier-model")
    sink = MemorySink()
    with hedge_router(server, sink, after_s=0.1) as router:
        result = router.complete(tool_turn())
    assert result.tier == "fast"
    hedge = [a for a in sink.traces[-1].attempts if a.role == "hedge"]
    assert len(hedge) == 1 and hedge[0].cancelled and sink.traces[-1].latency_s < 2.5


@pytest.mark.parametrize("sync", [True, False])
def test_a_failing_fast_side_takes_the_hedges_answer(server: ScriptedServer, sync: bool) -> None:
    server.script([Reply.slow(0.4, then=Reply.status(500))], model="fast-model")
    server.script([Reply.slow(0.6, then=call("Paris"))], model="frontier-model")
    sink = MemorySink()
    router = hedge_router(server, sink, after_s=0.1)
    if sync:
        with router:
            result = router.complete(tool_turn())
    else:

        async def once() -> Any:
            async with router:
                return await router.acomplete(tool_turn())

        result = asyncio.run(once())
    trace = sink.traces[-1]
    assert result.tier == "frontier" and result.escalated
    assert trace.escalations == ("backend_error",)
    assert len(server.requests_for("frontier-model")) == 1  # the hedge was the escalation
    assert [a.role for a in trace.attempts if a.tier == "frontier"] == ["hedge"]


@pytest.mark.parametrize("sync", [True, False])
def test_a_failed_hedge_leaves_the_fast_answer(server: ScriptedServer, sync: bool) -> None:
    server.script([Reply.slow(0.5, then=call("Paris"))], model="fast-model")
    server.script([Reply.status(500)], model="frontier-model")
    sink = MemorySink()
    router = hedge_router(server, sink, band=1.0)
    if sync:
        with router:
            result = router.complete(tool_turn())
    else:

        async def once() -> Any:
            async with router:
                return await router.acomplete(tool_turn())

        result = asyncio.run(once())
    assert result.tier == "fast" and not result.escalated
    hedge = [a for a in sink.traces[-1].attempts if a.role == "hedge"]
    assert len(hedge) == 1 and hedge[0].error is not None


@pytest.mark.anyio
async def test_a_hedge_not_yet_started_is_never_sent(server: ScriptedServer) -> None:
    server.script([Reply.status(500)], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    async with hedge_router(server, sink, after_s=5.0) as router:
        result = await router.acomplete(tool_turn())
    trace = sink.traces[-1]
    assert result.tier == "frontier" and trace.escalations == ("backend_error",)
    assert [a.role for a in trace.attempts] == ["call", "call"]


@pytest.mark.anyio
async def test_a_hedge_failing_the_gate_waits_for_the_fast_side(server: ScriptedServer) -> None:
    server.script([Reply.slow(0.5, then=call("Paris"))], model="fast-model")
    server.script([Reply.text("")], model="frontier-model")  # empty: fails non_empty
    sink = MemorySink()
    async with hedge_router(server, sink, band=1.0) as router:
        result = await router.acomplete(tool_turn())
    trace = sink.traces[-1]
    assert result.tier == "fast"
    hedge = [a for a in trace.attempts if a.role == "hedge"]
    assert len(hedge) == 1 and hedge[0].verdict is not None and not hedge[0].verdict.passed


@pytest.mark.parametrize("sync", [True, False])
def test_a_hedge_answering_first_abandons_the_panel(server: ScriptedServer, sync: bool) -> None:
    server.script([Reply.slow(3.0, then=call("Paris"))] * 3, model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    router = panel_router(server, sink=sink, hedge={"after_s": 0.1})
    if sync:
        with router:
            result = router.complete(tool_turn())
    else:

        async def once() -> Any:
            async with router:
                return await router.acomplete(tool_turn())

        result = asyncio.run(once())
    trace = sink.traces[-1]
    assert result.tier == "frontier" and trace.escalations == ("hedged",)
    assert [a.cancelled for a in drafts_of(trace)] == [True, True, True]
    assert (
        trace.panel is not None and "hedged frontier call answered first" in trace.panel["reason"]
    )
    assert trace.latency_s < 2.5


@pytest.mark.anyio
async def test_hedge_after_a_latency_percentile(server: ScriptedServer) -> None:
    server.default = call("Paris")
    sink = MemorySink()
    async with hedge_router(server, sink, after_percentile=50, min_samples=3) as router:
        for _ in range(3):
            await router.acomplete(tool_turn())
        assert not any(a.role == "hedge" for t in sink.traces for a in t.attempts)
        server.script([Reply.slow(2.0, then=call("Rome"))], model="fast-model")
        result = await router.acomplete(tool_turn())
    assert result.tier == "frontier" and sink.traces[-1].escalations == ("hedged",)


@pytest.mark.anyio
async def test_fewer_choices_than_n_count_as_failed_drafts(server: ScriptedServer) -> None:
    server.script([call("Paris"), Reply.status(500)], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    async with panel_router(server, sink=sink, drafts={"n": True}) as router:
        result = await router.acomplete(tool_turn())
    trace = sink.traces[-1]
    assert result.tier == "frontier" and trace.escalations == ("drafts_disagree",)
    errors = [a.error for a in drafts_of(trace) if a.error is not None]
    assert len(errors) == 2 and "choices for n=3" in errors[0]["message"]


@pytest.mark.anyio
async def test_the_frontier_breaker_recovers_under_hedges(server: ScriptedServer) -> None:
    sink = MemorySink()
    breaker = {"enabled": True, "consecutive_failures": 2, "cooldown_s": 1.0}
    server.script([Reply.status(500)] * 2, model="frontier-model")
    server.default = Reply.slow(0.1, then=call("Paris"))
    policy = make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        hedge={"band": 1.0},
        resilience={"breaker": breaker},
    )
    async with Router(policy, sinks=[sink]) as router:
        for _ in range(2):
            assert (await router.acomplete(tool_turn())).tier == "fast"
        assert (await router.breaker("frontier").asnapshot()).state == "open"
        refused = await router.acomplete(tool_turn())  # the hedge is refused, not sent
        await asyncio.sleep(1.1)
        server.default = Reply.slow(0.5, then=call("Paris"))
        server.script([call("Paris")], model="frontier-model")
        recovered = await router.acomplete(tool_turn())
        state = (await router.breaker("frontier").asnapshot()).state
    assert refused.tier == "fast"
    hedge = [a for a in sink.traces[2].attempts if a.role == "hedge"]
    assert hedge and hedge[0].error is not None and hedge[0].model == ""
    assert recovered.tier == "frontier" and state == "closed"
