"""The escalation engine's promises, through the public API: every exit path ends in a
completion or a typed error, is traced exactly once, and ``tier=`` pins a turn."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from conftest import RoutePath
from routerkit import JSON_TURN, Slept, easy_turn, make_policy, tracked

from tiered_router import (
    AllTiersFailed,
    BackendResponseError,
    GateFailed,
    MemorySink,
    Router,
    StreamInterrupted,
    TieredRouterError,
    Trace,
)
from tiered_router.backends import CompletionRequest
from tiered_router.exceptions import BackendError, UnknownModel
from tiered_router.testing import Reply, ScriptedBackend, ScriptedServer
from tiered_router.turn import CompletionChunk

PROSE = " ".join(f"token{i}" for i in range(60))
CHEAP = {"gate": {"checks": ["non_empty"]}}  # drafts stream straight through
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def router(server: ScriptedServer, sink: MemorySink, **kw: Any) -> Router:
    policy = make_policy(server, retries=(0, 0))
    for section, value in kw.pop("policy", {}).items():
        policy[section] = value
    return tracked(Router(policy, sinks=[sink], **kw))


# -- every exit path is traced once ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_cancelled_turn_is_traced_once_and_its_trial_released(
    server: ScriptedServer,
) -> None:
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.slow(30.0)], model="fast-model")
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.acomplete, easy_turn())
        while not server.requests_for("fast-model"):
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    (trace,) = sink.traces
    assert trace.interrupted == "CancelledError" and trace.tier is None
    (attempt,) = trace.attempts
    assert attempt.backend == "fast" and attempt.error is not None
    assert attempt.error["type"] == "CancelledError"
    snap = r.breaker("fast").snapshot()
    assert snap.state == "closed" and snap.consecutive_failures == 0  # a cancel proves nothing


def test_an_abandoned_stream_is_traced(server: ScriptedServer, path: RoutePath) -> None:
    sink = MemorySink()
    r = router(server, sink, policy=CHEAP)
    server.script([Reply.text(PROSE).streamed(chunks=8)], model="fast-model")
    path.stream(r, easy_turn(), read=1)  # the client went away after one chunk
    (trace,) = sink.traces
    assert trace.interrupted == "abandoned" and trace.tier is None
    assert trace.attempts[-1].tier == "fast" and trace.attempts[-1].error is not None
    assert trace.attempts[-1].error["type"] == "GeneratorExit"
    assert r.breaker("fast").snapshot().consecutive_failures == 0


def test_an_abandoned_sync_stream_is_traced_when_the_loop_ends(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = router(server, sink, policy=CHEAP)
    server.script([Reply.text(PROSE).streamed(chunks=8)], model="fast-model")
    for _chunk in r.stream(easy_turn()):
        break
    (trace,) = sink.traces
    assert trace.interrupted == "abandoned"


def test_an_abandoned_stream_counts_in_its_task(server: ScriptedServer, path: RoutePath) -> None:
    sink = MemorySink()
    r = router(server, sink, policy=CHEAP)
    server.script([Reply.text(PROSE).streamed(chunks=8)], model="fast-model")
    with r.task("t-abandon") as task:
        path.abandon(path.start(r, easy_turn()))
    assert task.steps == 1 and task.traces == tuple(sink.traces)
    assert len(sink.traces) == 1 and sink.traces[0].interrupted == "abandoned"


def test_a_stream_closed_before_it_started_is_traced(
    server: ScriptedServer, path: RoutePath
) -> None:
    sink = MemorySink()
    r = router(server, sink)
    path.abandon(path.open(r, easy_turn()))
    (trace,) = sink.traces
    assert trace.interrupted == "abandoned" and trace.attempts == ()
    assert server.requests == []


class _Malformed:
    """A backend whose stream raises a TypeError after its first chunk (a malformed answer)."""

    name = "fast"
    model = "malformed"
    kind = "diffusion"
    supports_tools = True

    async def acomplete(self, request: CompletionRequest) -> Any:
        raise TypeError("'int' object is not iterable")

    def complete(self, request: CompletionRequest) -> Any:
        raise TypeError("'int' object is not iterable")

    async def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
        yield CompletionChunk(text="partial ")
        raise TypeError("'bool' object is not iterable")

    def stream(self, request: CompletionRequest) -> Iterator[CompletionChunk]:
        yield CompletionChunk(text="partial ")
        raise TypeError("'bool' object is not iterable")


@pytest.mark.anyio
async def test_an_unexpected_error_mid_stream_is_a_typed_interruption(
    server: ScriptedServer,
) -> None:
    sink = MemorySink()
    r = router(server, sink, backends={"fast": _Malformed()}, policy=CHEAP)
    got: list[str] = []
    with pytest.raises(StreamInterrupted) as info:
        async for chunk in r.astream(easy_turn()):
            got.append(chunk.text)
    assert got == ["partial "]
    assert isinstance(info.value.__cause__, BackendResponseError)
    assert not isinstance(info.value, BackendError)  # the turn is over: no tier is tried
    assert isinstance(info.value, TieredRouterError)
    (trace,) = sink.traces
    assert info.value.trace is trace and trace.interrupted == "BackendResponseError"
    assert r.breaker("fast").snapshot().consecutive_failures == 1
    with pytest.raises(StreamInterrupted):
        list(r.stream(easy_turn()))
    assert len(sink.traces) == 2


@pytest.mark.anyio
async def test_a_malformed_upstream_answer_escalates_instead_of_failing(
    server: ScriptedServer,
) -> None:
    sink = MemorySink()
    r = router(server, sink)
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "fast-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "tool_calls": 5},
            }
        ],
    }
    server.script(
        [Reply.raw(200, json.dumps(body), {"content-type": "application/json"})] * 2,
        model="fast-model",
    )
    server.default = Reply.text("frontier ok")
    for result in (await r.acomplete(easy_turn()), r.complete(easy_turn())):
        assert result.tier == "frontier" and result.trace.escalations == ("backend_error",)
        error = result.trace.attempts[0].error
        assert error is not None and error["type"] == "BackendResponseError"
    assert len(sink.traces) == 2


def test_all_tiers_failed_lists_backends_in_the_order_tried(
    server: ScriptedServer, path: RoutePath
) -> None:
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.status(503)], model="frontier-model")
    server.script([Reply.status(503)], model="fast-model")
    with pytest.raises(AllTiersFailed, match=r"tried: frontier, fast\)") as info:
        path.complete(r, easy_turn(final=True))  # decided frontier; its failure falls to fast
    assert [a.backend for a in info.value.attempts] == ["frontier", "fast"]
    assert sink.traces == [info.value.trace]


def test_gate_failed_is_traced_once(server: ScriptedServer, path: RoutePath) -> None:
    sink = MemorySink()
    r = router(server, sink, policy={"escalation": {"when_frontier_fails_gate": "raise"}})
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.bad_json()], model="frontier-model")
    with pytest.raises(GateFailed) as info:
        path.complete(r, easy_turn(**JSON_TURN))
    assert sink.traces == [info.value.trace]
    assert info.value.trace is not None and info.value.trace.interrupted is None


class _Broken:
    def emit(self, trace: Trace) -> None:
        raise OSError("disk full")


def test_a_failing_sink_never_loses_the_turn(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture, path: RoutePath
) -> None:
    sink = MemorySink()
    r = tracked(Router(make_policy(server), sinks=[_Broken(), sink]))
    server.script([Reply.text("hi")], model="fast-model")
    with caplog.at_level(logging.ERROR, logger="tiered_router.router"):
        result = path.complete(r, easy_turn())
    assert result.completion.text == "hi" and sink.traces == [result.trace]
    assert "trace sink" in caplog.text and "disk full" in caplog.text


def test_a_kept_draft_is_the_one_the_gate_judged(server: ScriptedServer, path: RoutePath) -> None:
    # the fast draft fails the gate, the frontier errors: the fast draft is returned as is
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.truncated("the answer is")], model="fast-model")
    server.script([Reply.status(503)], model="frontier-model")
    result = path.complete(r, easy_turn())
    assert result.tier == "fast" and result.completion.text == "the answer is"
    assert result.verdict is not None and result.verdict.failed_checks == ("not_truncated",)
    assert result.trace.escalations == ("gate_failed",)


# -- tier= -------------------------------------------------------------------------------------


def test_decide_with_tier_pins_and_says_so(server: ScriptedServer) -> None:
    r = router(server, MemorySink())
    decision = r.decide(easy_turn(), tier="frontier")
    assert decision.tier == "frontier" and decision.rule == "pinned"
    assert decision.backend == "frontier"
    assert decision.reasons[0] == "pinned to the frontier tier by the caller"
    assert r.decide(easy_turn(final=True), tier="fast").tier == "fast"
    with pytest.raises(ValueError, match="tier must be"):
        r.decide(easy_turn(), tier="medium")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_pinned_fast_turn_is_still_gated_and_escalated(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.bad_json()] * 2, model="fast-model")
    server.script([Reply.json({"a": 1})] * 2, model="frontier-model")
    results = [
        await r.acomplete(easy_turn(final=True, **JSON_TURN), tier="fast"),
        r.complete(easy_turn(final=True, **JSON_TURN), tier="fast"),
    ]
    for result in results:
        assert result.trace.decision.rule == "pinned" and result.trace.decision.tier == "fast"
        assert result.tier == "frontier" and result.trace.escalations == ("gate_failed",)
    assert [t.decision.rule for t in sink.traces] == ["pinned", "pinned"]


@pytest.mark.anyio
async def test_streams_take_tier_too(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.text("from the frontier")] * 2, model="frontier-model")
    stream = r.astream(easy_turn(), tier="frontier")
    text = "".join([c.text async for c in stream])
    assert text == "from the frontier" and stream.result.trace.decision.rule == "pinned"
    sync = r.stream(easy_turn(), tier="frontier")
    assert "".join(c.text for c in sync) == "from the frontier"
    assert server.requests_for("fast-model") == []


def test_a_pinned_fast_tool_turn_still_respects_capabilities(server: ScriptedServer) -> None:
    policy = make_policy(server)
    policy["backends"]["fast"]["tools"] = False
    r = tracked(Router(policy))
    decision = r.decide(easy_turn(tools=TOOLS), tier="fast")
    assert decision.tier == "frontier" and decision.rule == "capability.tools"


def test_a_pinned_turn_inside_a_task_skips_task_rules_but_counts(
    server: ScriptedServer, path: RoutePath
) -> None:
    sink = MemorySink()
    r = router(server, sink, policy={"task": {"max_escalations": 0}})
    server.script([Reply.text("fast anyway")], model="fast-model")
    with r.task("pinned-task") as task:
        assert r.decide(easy_turn()).rule == "task.budget.escalations"
        result = path.complete(r, easy_turn(), tier="fast")
    assert result.tier == "fast" and result.trace.decision.rule == "pinned"
    assert task.steps == 1 and result.trace.metadata["task_id"] == "pinned-task"


def test_unknown_model_is_a_tiered_router_error() -> None:
    exc = UnknownModel("gpt-x", ["auto", "fast"])
    assert isinstance(exc, TieredRouterError) and isinstance(exc, ValueError)
    assert exc.known == ["auto", "fast"] and "gpt-x" in str(exc)


def test_scripted_doubles_drive_the_engine_too(server: ScriptedServer, path: RoutePath) -> None:
    fast = ScriptedBackend("fast", [BackendResponseError("broken"), "second try"])
    policy = make_policy(server, retries=(1, 0))
    slept = Slept()
    r = tracked(Router(policy, backends={"fast": fast}, sleep=slept, asleep=slept.asleep))
    result = path.complete(r, easy_turn())
    assert result.tier == "fast" and [a.try_index for a in result.trace.attempts] == [0, 1]
    fast.assert_complete()


def test_a_buffered_draft_is_finished_before_its_chunks_are_replayed(
    server: ScriptedServer, path: RoutePath
) -> None:
    # with whole-draft checks the turn is over (and traced) once the gate passed the draft
    sink = MemorySink()
    r = router(server, sink)
    server.script([Reply.text(PROSE).streamed(chunks=8)], model="fast-model")
    stream = path.start(r, easy_turn())
    (trace,) = sink.traces
    assert trace.interrupted is None and trace.tier == "fast"
    assert "".join(c.text for c in path.read(stream)) == PROSE
    assert sink.traces == [trace]


def test_the_gate_says_which_turns_need_the_whole_draft() -> None:
    from tiered_router import Completion, QualityGate, Turn

    plain = Turn([{"role": "user", "content": "hi"}])
    shaped = Turn([{"role": "user", "content": "hi"}], response_format={"type": "json_object"})
    tooled = Turn([{"role": "user", "content": "hi"}], tools=TOOLS)
    cheap = QualityGate(["non_empty", "not_truncated", "no_refusal", {"max_chars": {"limit": 9}}])
    assert not cheap.needs_whole_draft(plain)
    structured = QualityGate(["non_empty", "json_schema", "tool_arguments"])
    assert not structured.needs_whole_draft(plain)
    assert structured.needs_whole_draft(shaped) and structured.needs_whole_draft(tooled)

    def custom(completion: Completion, turn: Turn) -> None:
        return None

    assert QualityGate(["non_empty", custom]).needs_whole_draft(plain)
    assert QualityGate(["repetition"]).needs_whole_draft(plain)


def test_the_proxy_traces_a_stream_its_client_abandoned(server: ScriptedServer) -> None:
    import threading
    import time

    pytest.importorskip("starlette")
    uvicorn = pytest.importorskip("uvicorn")
    from tiered_router import _http
    from tiered_router.server import create_app

    sink = MemorySink()
    app = create_app(make_policy(server, retries=(0, 0)), sinks=[sink], env={})
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    proxy = uvicorn.Server(config)
    thread = threading.Thread(target=proxy.run, daemon=True)
    thread.start()
    while not proxy.started:
        assert thread.is_alive()
        time.sleep(0.01)
    url = f"http://127.0.0.1:{proxy.servers[0].sockets[0].getsockname()[1]}"
    slow = Reply.text(PROSE, chunks=12, chunk_delay_s=0.05)
    server.script([slow], model="frontier-model")
    body = {"model": "frontier", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    try:
        with _http.build_client() as http:
            with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                assert next(response.iter_lines()).startswith("data: ")
            deadline = time.monotonic() + 10
            while not sink.traces and time.monotonic() < deadline:
                time.sleep(0.02)  # the proxy notices the client left and ends the turn
    finally:
        proxy.should_exit = True
        thread.join(10)
    (trace,) = sink.traces
    assert trace.interrupted == "abandoned" and trace.decision.rule == "pinned"
    assert trace.attempts[-1].backend == "frontier" and trace.attempts[-1].error is not None


@pytest.mark.anyio
@pytest.mark.parametrize("policy", [{}, CHEAP], ids=["buffered", "live"])
async def test_a_backend_that_cannot_stream_still_streams(
    server: ScriptedServer, policy: dict[str, Any]
) -> None:
    from tiered_router.testing import FunctionBackend

    sink = MemorySink()
    fast = FunctionBackend("fast", lambda request: PROSE)
    r = router(server, sink, backends={"fast": fast}, policy=policy)
    text = "".join([c.text async for c in r.astream(easy_turn())])
    assert text == PROSE and "".join(c.text for c in r.stream(easy_turn())) == PROSE
    assert [t.tier for t in sink.traces] == ["fast", "fast"] and fast.calls == 2


def test_a_stream_that_fails_before_content_escalates_and_is_closed(
    server: ScriptedServer, path: RoutePath
) -> None:
    closed: list[str] = []

    class Failing(_Malformed):
        def stream(self, request: CompletionRequest) -> Iterator[CompletionChunk]:
            try:
                yield CompletionChunk(text="")  # a role chunk, no content yet
                raise TypeError("'bool' object is not iterable")
            finally:
                closed.append("closed")

        async def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
            try:
                yield CompletionChunk(text="")
                raise TypeError("'bool' object is not iterable")
            finally:
                closed.append("closed")

    sink = MemorySink()
    server.default = Reply.text("frontier ok")
    r = router(server, sink, backends={"fast": Failing()}, policy=CHEAP)
    chunks, _stream = path.stream(r, easy_turn())
    assert "".join(c.text for c in chunks) == "frontier ok"
    assert closed == ["closed"]
    (trace,) = sink.traces
    assert trace.escalations == ("backend_error",) and trace.tier == "frontier"
