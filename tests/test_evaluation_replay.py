"""Replay backends through the real Router, the simulated clock, and whole-policy evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from routerkit import ADD

from tiered_router.backends._base import CompletionRequest
from tiered_router.evaluation import (
    Dataset,
    EvalRow,
    Outcome,
    ReplayBackend,
    SimulatedClock,
    evaluate,
    load_sample,
    replay_backend_factory,
    simulated_latency,
    write_dataset,
)
from tiered_router.evaluation.calibration import load_policy_offline
from tiered_router.evaluation.runner import Replay
from tiered_router.evaluation.sources import bundled_policy_path
from tiered_router.exceptions import BackendError, PolicyError
from tiered_router.policy import BackendConfig, LatencyModel, Policy, load_policy
from tiered_router.router import Router
from tiered_router.turn import ToolCall, Turn, Usage

TOOL = ADD


def _policy(**changes: Any) -> Policy:
    data: dict[str, Any] = {
        "version": 1,
        "backends": {
            "fast": {
                "type": "replay",
                "model": "weak",
                "kind": "diffusion",
                "latency": {"ttft_s": 0.1, "tokens_per_s": 1000},
                "price": {"input_per_mtok": 1, "output_per_mtok": 1},
            },
            "frontier": {
                "type": "replay",
                "model": "strong",
                "latency": {"ttft_s": 0.5, "tokens_per_s": 100},
                "price": {"input_per_mtok": 10, "output_per_mtok": 10},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"type": "heuristic", "threshold": 1.0},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
        "gate": {"checks": ["non_empty", "tool_arguments"]},
    }
    data.update(changes)
    return load_policy(data)


def _dataset() -> Dataset:
    usage = Usage(input_tokens=100, output_tokens=50)
    rows = [
        EvalRow.build(
            "ok",
            [{"role": "user", "content": "hi"}],
            {
                "weak": Outcome(quality=1.0, text="hello", usage=usage),
                "strong": Outcome(quality=1.0, text="hello there", usage=usage, latency_s=2.0),
            },
        ),
        EvalRow.build(
            "empty",
            [{"role": "user", "content": "say something"}],
            {
                "weak": Outcome(quality=0.0, text="", usage=usage),
                "strong": Outcome(quality=1.0, text="something", usage=usage),
            },
        ),
        EvalRow.build(
            "tool",
            [{"role": "user", "content": "add 1 and 2"}],
            {
                "weak": Outcome(
                    quality=0.0,
                    tool_calls=(ToolCall(id="c", name="add", arguments='{"a": "1"}'),),
                    finish_reason="tool_calls",
                    usage=usage,
                ),
                "strong": Outcome(
                    quality=1.0,
                    tool_calls=(ToolCall(id="c", name="add", arguments='{"a": 1, "b": 2}'),),
                    finish_reason="tool_calls",
                    usage=usage,
                ),
            },
            tools=[TOOL],
        ),
        EvalRow.build(
            "unrecorded",
            [{"role": "user", "content": "2+2?"}],
            {
                "weak": Outcome(quality=1.0, usage=Usage(input_tokens=10, output_tokens=1)),
                "strong": Outcome(quality=1.0, usage=Usage(input_tokens=10, output_tokens=1)),
            },
        ),
        EvalRow.build(
            "final",
            [{"role": "user", "content": "wrap up"}],
            {
                "weak": Outcome(quality=0.0, text="meh", usage=usage),
                "strong": Outcome(quality=1.0, text="done", usage=usage),
            },
            final=True,
        ),
        EvalRow.build(
            "weak-missing",
            [{"role": "user", "content": "only strong"}],
            {
                "strong": Outcome(quality=1.0, text="here", usage=usage),
            },
        ),
    ]
    return Dataset(name="tiny", rows=tuple(rows))


def _router(ds: Dataset) -> Router:
    """A router over replay backends (each router gets its own simulated clock)."""
    policy = _policy()
    return Replay.bind(policy, ds, fast_model="weak", frontier_model="strong").router(policy)


def test_simulated_clock_moves_only_when_told() -> None:
    clock = SimulatedClock(5.0)
    assert clock() == 5.0
    clock.advance(1.5)
    clock.sleep(0.5)
    assert clock() == 7.0
    with pytest.raises(ValueError, match="back in time"):
        clock.advance(-1)


@pytest.mark.anyio
async def test_simulated_clock_async_sleep_advances() -> None:
    clock = SimulatedClock()
    await clock.asleep(2.0)
    assert clock() == 2.0


def test_simulated_latency_prefers_recorded_then_model() -> None:
    o = Outcome(quality=1.0, text="x", usage=Usage(output_tokens=500), latency_s=3.0)
    model = LatencyModel(ttft_s=0.2, tokens_per_s=1000)
    assert simulated_latency(o, model) == 3.0
    assert simulated_latency(o, model, prefer_recorded=False) == pytest.approx(0.7)
    plain = Outcome(quality=1.0, text="x", usage=Usage(output_tokens=500))
    assert simulated_latency(plain, LatencyModel(ttft_s=0.6, tokens_per_s=100)) == pytest.approx(
        5.6
    )


def test_replay_backend_serves_the_row_and_advances_the_clock() -> None:
    ds = _dataset()
    clock = SimulatedClock()
    fast = ReplayBackend(
        "fast", ds, model="weak", clock=clock, latency=LatencyModel(ttft_s=0.1, tokens_per_s=1000)
    )
    row = ds.get("ok")
    assert row is not None
    completion = fast.complete(CompletionRequest.from_turn(row.turn))
    assert (
        completion.text == "hello" and completion.model == "weak" and completion.backend == "fast"
    )
    assert clock() == pytest.approx(0.1 + 50 / 1000)
    # found by content when the turn id is not a row id
    again = fast.complete(CompletionRequest.from_turn(Turn([{"role": "user", "content": "hi"}])))
    assert again.text == "hello"
    with pytest.raises(BackendError, match="no recorded row"):
        fast.complete(CompletionRequest.from_turn(Turn([{"role": "user", "content": "??"}])))
    missing = ds.get("weak-missing")
    assert missing is not None
    with pytest.raises(BackendError, match="no recorded outcome for model 'weak'"):
        fast.complete(CompletionRequest.from_turn(missing.turn))


def test_real_router_over_replay_backends_measures_simulated_latency() -> None:
    ds = _dataset()
    router = _router(ds)
    row = ds.get("ok")
    assert row is not None
    result = router.complete(row.turn)
    assert result.tier == "fast" and not result.escalated
    assert result.completion.text == "hello"
    (attempt,) = result.trace.attempts
    assert attempt.latency_s == pytest.approx(0.15)  # 0.1 s + 50 tokens / 1000 tok/s
    assert result.trace.latency_s == pytest.approx(0.15)


@pytest.mark.anyio
async def test_async_router_over_replay_backends() -> None:
    ds = _dataset()
    router = _router(ds)
    row = ds.get("ok")
    assert row is not None
    result = await router.acomplete(row.turn)
    assert result.completion.text == "hello" and result.trace.latency_s == pytest.approx(0.15)


def test_gate_failures_escalate_with_recorded_frontier_answer() -> None:
    ds = _dataset()
    router = _router(ds)
    empty, tool = ds.get("empty"), ds.get("tool")
    assert empty is not None and tool is not None
    result = router.complete(empty.turn)
    assert result.escalated and result.tier == "frontier"
    assert result.completion.text == "something"
    assert result.trace.escalations == ("gate_failed",)
    assert result.trace.latency_s == pytest.approx(0.15 + 0.5 + 0.5)
    tool_result = router.complete(tool.turn)
    assert tool_result.escalated
    verdict = tool_result.trace.attempts[0].verdict
    assert verdict is not None and verdict.failed_checks == ("tool_arguments",)
    assert tool_result.completion.tool_calls[0].parsed_arguments() == {"a": 1, "b": 2}


def test_unrecorded_answer_passes_the_gate_and_missing_outcome_escalates() -> None:
    ds = _dataset()
    router = _router(ds)
    unrecorded, missing = ds.get("unrecorded"), ds.get("weak-missing")
    assert unrecorded is not None and missing is not None
    result = router.complete(unrecorded.turn)
    assert result.tier == "fast" and not result.escalated
    assert result.verdict is not None and result.verdict.passed
    fallback = router.complete(missing.turn)
    assert fallback.tier == "frontier" and fallback.trace.escalations == ("backend_error",)


def test_evaluate_reports_headline_metrics_from_router_runs() -> None:
    ds = _dataset()
    result = evaluate(_policy(), ds, fast_model="weak", frontier_model="strong")
    s = result.summary
    assert s.n == 6
    # threshold 1.0: all but the `final` row start fast; empty/tool/missing escalate
    assert s.rules == {"final-answer": 1}
    assert s.routed_fast_share == pytest.approx(5 / 6)
    assert s.fast_share == pytest.approx(2 / 6)
    assert s.escalations == 3 and s.escalation_rate == pytest.approx(3 / 5)
    assert s.escalation_reasons == {"gate_failed": 2, "backend_error": 1}
    assert s.failed_checks == {"non_empty": 1, "tool_arguments": 1}
    assert s.quality == pytest.approx(1.0) and s.quality_retained == pytest.approx(1.0)
    # gate vs labels on the 4 recorded fast drafts: 2 wrong caught, "final"'s wrong draft passes
    assert s.gate.drafts == 4 and s.gate.wrong == 3 and s.gate.wrong_failed == 2
    assert s.gate.p_fail_given_right == 0.0
    assert s.cost < s.cost_frontier
    assert s.latency_frontier_mean_s > 0


def test_headline_equals_the_sweep_point_at_the_policy_threshold() -> None:
    policy = load_policy_offline(bundled_policy_path())
    dataset = load_sample()
    first = evaluate(policy, dataset)
    point = first.points[len(first.points) // 2]
    scoring = policy.scoring.model_copy(update={"threshold": point.threshold})
    again = evaluate(policy.model_copy(update={"scoring": scoring}), dataset)
    s = again.summary
    assert s.quality == pytest.approx(point.quality)
    assert s.cost == pytest.approx(point.cost)
    assert s.fast_share == pytest.approx(point.fast_share)
    assert s.frontier_call_share == pytest.approx(point.strong_share)
    assert s.latency_mean_s == pytest.approx(point.latency_s)


def test_multi_step_tasks_sum_latency(tmp_path: Path) -> None:
    usage = Usage(input_tokens=10, output_tokens=100)
    rows = tuple(
        EvalRow.build(
            f"t{t}.{s}",
            [{"role": "user", "content": f"task {t} step {s}"}],
            {
                "weak": Outcome(quality=1.0, text="ok", usage=usage),
                "strong": Outcome(quality=1.0, text="ok", usage=usage),
            },
            step=s,
            metadata={"task_id": f"t{t}"},
        )
        for t in range(2)
        for s in range(3)
    )
    result = evaluate(
        _policy(), Dataset(name="tasks", rows=rows), fast_model="weak", frontier_model="strong"
    )
    s = result.summary
    assert s.tasks == 2
    assert s.task_latency_mean_s == pytest.approx(3 * (0.1 + 100 / 1000))
    assert s.task_latency_frontier_mean_s == pytest.approx(3 * (0.5 + 100 / 100))


def test_replay_factory_builds_from_policy_options(tmp_path: Path) -> None:
    path = write_dataset(_dataset(), tmp_path / "tiny.jsonl")
    config = BackendConfig(type="replay", model="weak", options={"data": str(path)})
    backend = replay_backend_factory("fast", config)
    assert backend.model == "weak" and len(backend.dataset) == 6
    with pytest.raises(PolicyError, match="options.data"):
        replay_backend_factory("fast", BackendConfig(type="replay", model="weak"))
    with pytest.raises(PolicyError, match="no outcomes"):
        replay_backend_factory(
            "fast", BackendConfig(type="replay", model="nope", options={"data": str(path)})
        )


def test_recorded_failures_and_slow_answers_raise_typed_errors() -> None:
    from tiered_router.exceptions import BackendTimeout

    usage = Usage(input_tokens=10, output_tokens=10)
    rows = (
        EvalRow.build(
            "down",
            [{"role": "user", "content": "a"}],
            {
                "weak": Outcome(quality=0.0, error="HTTP 503", latency_s=0.2),
                "strong": Outcome(quality=1.0, text="ok", usage=usage),
            },
        ),
        EvalRow.build(
            "slow",
            [{"role": "user", "content": "b"}],
            {
                "weak": Outcome(quality=0.0, error="read timeout", latency_s=30.0),
                "strong": Outcome(quality=1.0, text="ok", usage=usage, latency_s=90.0),
            },
        ),
    )
    ds = Dataset(name="fail", rows=rows)
    clock = SimulatedClock()
    weak = ReplayBackend("fast", ds, model="weak", clock=clock)
    with pytest.raises(BackendError, match="recorded failure: HTTP 503") as info:
        weak.complete(CompletionRequest.from_turn(rows[0].turn))
    assert not isinstance(info.value, BackendTimeout) and clock() == pytest.approx(0.2)
    with pytest.raises(BackendTimeout):
        weak.complete(CompletionRequest.from_turn(rows[1].turn))
    strong = ReplayBackend("frontier", ds, model="strong", clock=clock)
    before = clock()
    with pytest.raises(BackendTimeout, match="exceeds"):
        strong.complete(CompletionRequest.from_turn(rows[1].turn, timeout_s=60.0))
    assert clock() - before == pytest.approx(60.0)  # the call waited out its timeout
    result = evaluate(_policy(), ds, fast_model="weak", frontier_model="strong")
    assert result.summary.escalation_reasons.get("backend_error") == 2  # both fast calls fail
    assert result.summary.failures == 1  # "slow": the frontier answer never arrives in time
