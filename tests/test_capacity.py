"""Queue- and canvas-aware latency, and the capacity.<backend> rule (engine/_capacity.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tiered_router import Router, Turn
from tiered_router.engine._capacity import (
    InFlight,
    estimate,
    over_capacity,
    service_seconds,
)
from tiered_router.engine._latency import LatencyTracker
from tiered_router.policy import LatencyModel
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

USER = [{"role": "user", "content": "hi"}]


def test_service_bills_whole_canvases() -> None:
    model = LatencyModel(ttft_s=0.2, tokens_per_s=160.0)
    assert service_seconds(model, output_tokens=20) == pytest.approx(0.2 + 20 / 160)
    # a 20-token reply on a 256-token canvas costs the whole canvas
    assert service_seconds(model, output_tokens=20, canvas_tokens=256) == pytest.approx(1.8)
    assert service_seconds(model, output_tokens=300, canvas_tokens=256) == pytest.approx(3.4)


@pytest.mark.parametrize(
    ("in_flight", "slots", "wait"),
    [(0, 1, 0.0), (1, 1, 1.0), (3, 1, 3.0), (7, 8, 0.0), (8, 8, 1.0), (17, 8, 2.0)],
)
def test_queue_wait_counts_whole_waves(in_flight: int, slots: int, wait: float) -> None:
    est = estimate(backend="b", in_flight=in_flight, max_concurrency=slots, service_s=1.0)
    assert est.wait_s == wait and est.total_s == wait + 1.0


def test_over_capacity_says_why() -> None:
    est = estimate(backend="llada", in_flight=3, max_concurrency=1, service_s=1.0)
    assert over_capacity(est, left_s=None) is None
    assert over_capacity(est, left_s=4.0) is None
    why = over_capacity(est, left_s=2.5)
    assert why is not None and why.startswith("capacity.llada: 3 call(s) in flight on 1 slot")
    with pytest.raises(ValueError, match="max_concurrency"):
        estimate(backend="b", in_flight=0, max_concurrency=0, service_s=1.0)


def test_in_flight_release_is_idempotent_and_thread_safe() -> None:
    count = InFlight()
    releases = []

    def take() -> None:
        for _ in range(200):
            releases.append(count.acquire("b"))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count.count("b") == 800
    for release in releases:
        release()
        release()
    assert count.count("b") == 0 and "InFlight" in repr(count)


def one_slot(seconds: float, model: str, other: Reply) -> Any:
    """A reply callable: ``model``'s requests are served one at a time, ``seconds`` each."""
    lock = threading.Lock()
    free_at = [0.0]

    def reply(body: dict[str, Any]) -> Reply:
        if body.get("model") != model:
            return other
        with lock:
            now = time.monotonic()
            done = max(now, free_at[0]) + seconds
            free_at[0] = done
        return Reply.slow(done - now, Reply.text("fast answer"))

    return reply


def policy(server: ScriptedServer, **fast: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "backends": {
            "llada": {
                "preset": "sglang",
                "base_url": server.base_url,
                "model": "llada",
                "max_retries": 0,
                **fast,
            },
            "big": {"base_url": server.base_url, "model": "big", "api_key": "k"},
        },
        "tiers": {"fast": "llada", "frontier": "big"},
        "scoring": {"threshold": 1.0},
        "gate": {"checks": ["non_empty"]},
        "resilience": {"deadline_s": 1.5},
    }


def test_a_burst_on_a_one_slot_backend_sends_the_queue_to_the_frontier(
    server: ScriptedServer,
) -> None:
    # the sglang preset: max_concurrency 1, about 0.84 s a call by its latency model
    server.default = one_slot(0.5, "llada", Reply.text("frontier answer"))
    sink = MemorySink()
    router = Router(policy(server), sinks=[sink])

    async def burst(*, warm: bool = False) -> list[Any]:
        if warm:  # the HTTP stack's first import is not the server's latency
            await router.acomplete(Turn(messages=USER), tier="frontier")
        turns = [router.acomplete(Turn(messages=USER)) for _ in range(6)]
        return await asyncio.gather(*turns)

    results = asyncio.run(burst(warm=True))
    rules = [r.decision.rule for r in results]
    assert rules.count("capacity.llada") == 5 and results[0].tier == "fast"
    assert all(r.completion.text for r in results)
    assert len(server.requests_for("llada")) == 1  # no call was made for the routed ones
    why = results[1].decision.reasons[0]
    assert why.startswith("capacity.llada: 1 call(s) in flight on 1 slot")
    assert router.latency.in_flight.count("llada") == 0  # every hold released
    # the measured latency replaces the model: 0.5 s a call now, so two fit in 1.5 s
    measured = router.latency.measured("llada")
    assert measured is not None and 0.5 <= measured.latency_s < 1.0  # 0.5 s plus a loaded machine
    results = asyncio.run(burst())
    assert [r.tier for r in results].count("fast") == int(1.5 // measured.latency_s)
    router.close()


def test_without_max_concurrency_nothing_is_queued_and_pins_are_kept(
    server: ScriptedServer,
) -> None:
    server.default = one_slot(0.05, "llada", Reply.text("frontier answer"))
    router = Router(policy(server, max_concurrency=None))
    assert router.backend_config("llada").max_concurrency is None  # type: ignore[union-attr]

    async def burst(**kw: Any) -> list[Any]:
        return await asyncio.gather(
            *(router.acomplete(Turn(messages=USER), **kw) for _ in range(3))
        )

    assert {r.tier for r in asyncio.run(burst())} == {"fast"}
    router.close()
    pinned = Router(policy(server))

    async def pins() -> list[Any]:
        return await asyncio.gather(
            *(pinned.acomplete(Turn(messages=USER), tier="fast") for _ in range(3))
        )

    assert {r.decision.rule for r in asyncio.run(pins())} == {"pinned"}
    pinned.close()


def test_a_task_latency_budget_counts_the_queue(server: ScriptedServer) -> None:
    server.default = one_slot(0.3, "llada", Reply.text("frontier answer"))
    config = policy(server)
    config["resilience"] = {"deadline_s": 30}
    router = Router(config)

    async def run() -> list[Any]:
        async with router.task(max_latency_s=1.2):
            return await asyncio.gather(*(router.acomplete(Turn(messages=USER)) for _ in range(3)))

    decisions = [r.decision for r in asyncio.run(run())]
    assert [d.rule for d in decisions].count("capacity.llada") == 2
    assert decisions[1].reasons[0].endswith("left of the turn's task's latency budget")
    router.close()


def test_the_sync_path_holds_and_releases_too(server: ScriptedServer) -> None:
    server.default = one_slot(0.01, "llada", Reply.text("frontier answer"))
    router = Router(policy(server))
    result = router.complete(Turn(messages=USER))
    assert result.tier == "fast" and router.latency.in_flight.count("llada") == 0
    router.close()


def test_the_tracker_estimate_adds_the_queue_and_bills_canvases() -> None:
    tracker = LatencyTracker()
    model = LatencyModel(ttft_s=0.2, tokens_per_s=160.0)
    assert tracker.expected("g", model, output_tokens=20) == pytest.approx(0.325)
    assert tracker.expected("g", model, output_tokens=20, canvas_tokens=256) == pytest.approx(1.8)
    release = tracker.in_flight.acquire("g")
    queued = tracker.expected("g", model, output_tokens=20, canvas_tokens=256, max_concurrency=1)
    assert queued == pytest.approx(3.6)
    assert tracker.expected("g", model, output_tokens=20, max_concurrency=2) == pytest.approx(0.325)
    release()
    tracker.record("g", 0.5, 10)  # measured: replaces the model, the queue still counts
    assert tracker.expected("g", model, output_tokens=20, canvas_tokens=256) == 0.5


def test_a_panels_drafts_each_count_in_flight(server: ScriptedServer) -> None:
    # three drafts on one backend are three calls its queue has to serve, not one
    def reply(body: dict[str, Any]) -> Reply:
        if body.get("model") == "drafter":
            return Reply.slow(0.6, Reply.text("The answer is 4."))
        return Reply.text("The answer is 4.")

    server.default = reply
    config = {
        "version": 1,
        "backends": {
            "drafter": {
                "base_url": server.base_url,
                "model": "drafter",
                "api_key": "k",
                "kind": "diffusion",
                "max_retries": 0,
                "max_concurrency": 8,
            },
            "big": {"base_url": server.base_url, "model": "big", "api_key": "k"},
        },
        "tiers": {"fast": "drafter", "frontier": "big"},
        "scoring": {"threshold": 1.0},
        "gate": {"checks": ["non_empty"]},
        "drafts": {"k": 3, "when": ["all"], "n": False, "early": False},
    }
    router = Router(config)
    seen: list[int] = []

    async def run() -> Any:
        turn = asyncio.ensure_future(
            router.acomplete(Turn(messages=[{"role": "user", "content": "2 + 2?"}]))
        )
        deadline = time.monotonic() + 5
        while len(server.requests_for("drafter")) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        seen.append(router.latency.in_flight.count("drafter"))
        return await turn

    result = asyncio.run(run())
    assert result.tier == "fast" and result.trace.panel is not None
    assert seen == [3]
    assert router.latency.in_flight.count("drafter") == 0
    router.close()
