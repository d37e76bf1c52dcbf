"""Shadow mode: the other tier on a sampled share of turns, recorded, never in the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from routerkit import easy_turn, make_policy, tracked

from tiered_router import JSONLSink, MemorySink, PolicyError, Router, load_policy
from tiered_router.engine._shadow import sampled
from tiered_router.evaluation.traces import dataset_from_traces
from tiered_router.server._metrics import Metrics
from tiered_router.testing import Reply, ScriptedServer


def shadowed(server: ScriptedServer, *, rate: float = 1.0, **kw: Any) -> Router:
    policy = make_policy(server, retries=(0, 0))
    policy["shadow"] = {"rate": rate}
    return tracked(Router(policy, **kw))


def test_sampling_is_a_hash_of_the_turn_id() -> None:
    ids = [f"turn-{i}" for i in range(2000)]
    assert not any(sampled(i, 0.0) for i in ids) and all(sampled(i, 1.0) for i in ids)
    share = sum(sampled(i, 0.05) for i in ids) / len(ids)
    assert 0.03 < share < 0.07
    assert [sampled(i, 0.05) for i in ids] == [sampled(i, 0.05) for i in ids]


@pytest.mark.anyio
async def test_a_fast_answer_gets_a_frontier_shadow_run(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = shadowed(server, sinks=[sink])
    server.script([Reply.text("fast answer")], model="fast-model")
    server.script([Reply.text("frontier answer")], model="frontier-model")
    result = await r.acomplete(easy_turn())
    assert result.tier == "fast" and result.completion.text == "fast answer"
    await r.adrain_shadows()
    main, shadow = sink.traces
    assert main is result.trace and main.decision.rule is None
    assert shadow.turn_id == main.turn_id and shadow.metadata["shadow"] is True
    assert shadow.decision.rule == "shadow" and shadow.decision.tier == "frontier"
    assert shadow.tier == "frontier" and [a.backend for a in shadow.attempts] == ["frontier"]
    assert shadow.decision.reasons[0] == "shadow run of the frontier tier (shadow.rate 1)"


def test_a_frontier_answer_gets_a_fast_shadow_run_sync(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = shadowed(server, sinks=[sink])
    server.script([Reply.text("frontier answer")], model="frontier-model")
    server.script([Reply.text("fast answer")], model="fast-model")
    result = r.complete(easy_turn(final=True))
    assert result.tier == "frontier"
    r.drain_shadows()
    assert [(t.decision.rule, t.tier) for t in sink.traces] == [
        ("final-answer", "frontier"),
        ("shadow", "fast"),
    ]


def test_a_failing_shadow_run_changes_nothing(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = shadowed(server, sinks=[sink])
    server.script([Reply.text("fast answer")], model="fast-model")
    server.script([Reply.status(503)], model="frontier-model")
    result = r.complete(easy_turn())
    r.drain_shadows()
    assert result.completion.text == "fast answer"
    main, shadow = sink.traces
    assert shadow.tier is None and shadow.escalations == ()  # a shadow never escalates
    assert [a.backend for a in shadow.attempts] == ["frontier"]
    assert len(server.requests_for("fast-model")) == 1


def test_no_shadow_when_both_tiers_ran_or_the_rate_is_zero(server: ScriptedServer) -> None:
    sink = MemorySink()
    r = shadowed(server, sinks=[sink])
    server.script([Reply.truncated("the answer is")], model="fast-model")
    server.script([Reply.text("the answer is 4")], model="frontier-model")
    assert r.complete(easy_turn()).trace.escalations == ("gate_failed",)
    r.drain_shadows()
    assert len(sink.traces) == 1
    off = shadowed(server, rate=0.0, sinks=[sink])
    server.script([Reply.text("fast answer")], model="fast-model")
    off.complete(easy_turn())
    off.drain_shadows()
    assert len(sink.traces) == 2 and len(server.requests) == 3


def test_shadow_runs_label_both_tiers_in_a_dataset(server: ScriptedServer, tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    sink = JSONLSink(path)
    r = shadowed(server, sinks=[sink], record=True)
    server.script([Reply.text("fast answer")] * 3, model="fast-model")
    server.script([Reply.text("frontier answer")] * 3, model="frontier-model")
    for i in range(3):
        r.complete(easy_turn(id=f"t{i}"))
    r.drain_shadows()
    sink.close()
    dataset, stats = dataset_from_traces([path])
    assert stats.merged == 3 and len(dataset.rows) == 3
    for row in dataset.rows:
        assert set(row.outcomes) == {"fast-model", "frontier-model"}


def test_the_metrics_sink_does_not_count_a_shadow_run_as_a_turn(server: ScriptedServer) -> None:
    metrics = Metrics()
    r = shadowed(server, sinks=[metrics])
    server.default = Reply.text("hello")
    r.complete(easy_turn())
    r.drain_shadows()
    text = metrics.render()
    assert 'tiered_router_requests_total{escalated="false",tier="fast"} 1.0' in text
    assert 'tiered_router_requests_total{tier="frontier"' not in text
    assert len(server.requests) == 2


def test_the_shadow_rate_is_checked_at_load() -> None:
    base = {
        "backends": {"a": {"model": "a"}},
        "tiers": {"fast": "a", "frontier": "a"},
    }
    assert load_policy({**base, "shadow": {"rate": 0.05}}).shadow.rate == 0.05
    with pytest.raises(PolicyError, match="shadow.rate"):
        load_policy({**base, "shadow": {"rate": 1.5}})
