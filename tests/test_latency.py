from __future__ import annotations

import itertools
from typing import Any

import pytest
from routerkit import make_policy

from tiered_router import Router, Turn
from tiered_router.engine._latency import LatencyTracker
from tiered_router.policy import LatencyModel
from tiered_router.testing import Reply, ScriptedServer

USER = [{"role": "user", "content": "Summarise the ticket."}]


def test_ewma_replaces_the_model_once_measured() -> None:
    tracker = LatencyTracker(alpha=0.5)
    model = LatencyModel(ttft_s=0.5, tokens_per_s=100.0)
    assert tracker.expected("b", model, output_tokens=200) == pytest.approx(2.5)
    assert tracker.measured("b") is None
    tracker.record("b", 1.0, 100)
    tracker.record("b", 2.0, 300)
    measured = tracker.measured("b")
    assert measured is not None and measured.calls == 2
    assert (measured.latency_s, measured.output_tokens) == (1.5, 200.0)
    assert measured.tokens_per_s == pytest.approx(200 / 1.5)
    assert tracker.expected("b", model, output_tokens=200) == 1.5
    assert "backends=['b']" in repr(tracker)
    with pytest.raises(ValueError, match="alpha"):
        LatencyTracker(alpha=0)


def _policy(server: ScriptedServer) -> dict[str, Any]:
    policy = make_policy(server)
    # the fast tier's latency model comes from the dlmserve profile (33 tok/s), the
    # frontier's from the openai profile (100 tok/s): neither is written in the policy
    policy["backends"]["fast"] = {"preset": "dlmserve", "base_url": server.base_url}
    policy["backends"]["frontier"] = {
        "preset": "openai",
        "base_url": server.base_url,
        "api_key": "sk-test-0123456789",
        "model": "frontier-model",
    }
    policy["scoring"] = {"threshold": 1.0}
    return policy


def test_task_budget_uses_profile_defaults_then_measurements(server: ScriptedServer) -> None:
    ticks = itertools.count()
    router = Router(_policy(server), clock=lambda: next(ticks) * 0.001)
    with router.task(max_latency_s=5.0) as task:
        # 256 tokens: dlmserve ~0.05 + 256/33 = 7.8 s, openai ~0.5 + 2.56 = 3.1 s
        assert task.expected_latency("fast") == pytest.approx(0.05 + 256 / 33)
        assert task.expected_latency("frontier") == pytest.approx(0.5 + 2.56)
        decision = router.decide(Turn(USER))
    assert decision.tier == "frontier" and decision.rule == "task.budget.latency"
    # one measured fast call (outside any task) replaces the 33 tok/s default
    server.script([Reply.text("done")])
    assert router.complete(Turn(USER)).tier == "fast"
    measured = router.latency.measured("fast")
    assert measured is not None and measured.calls == 1
    with router.task(max_latency_s=5.0) as task:
        assert task.expected_latency("fast") == measured.latency_s
        assert router.decide(Turn(USER)).tier == "fast"
    router.close()
