"""The proxy's plain-number series print what prometheus_client's own metrics print."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tiered_router.server._series import Families, Series

BUCKETS = (0.001, 0.01, 0.1, 1.0)
OBSERVED = (0.0, 0.001, 0.0010001, 0.05, 0.1, 0.7, 1.0, 3.0, 1e9, float("inf"), float("nan"))


def _text(*collectors: object) -> list[str]:
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)  # type: ignore[arg-type]
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_counters_gauges_and_histograms_print_as_prometheus_clients_do() -> None:
    ours = {
        "turns": Series("counter", "t_turns_total", "Turns.", ("tier",)),
        "plain": Series("counter", "t_plain_total", "Unlabelled."),
        "idle": Series("counter", "t_idle_total", "Never counted."),
        "in_flight": Series("gauge", "t_in_flight", "In flight."),
        "latency": Series("histogram", "t_latency_seconds", "Latency.", ("tier",), buckets=BUCKETS),
        "overhead": Series("histogram", "t_overhead_seconds", "Overhead.", buckets=BUCKETS),
    }
    theirs = {
        "turns": Counter("t_turns", "Turns.", ("tier",), registry=None),
        "plain": Counter("t_plain", "Unlabelled.", registry=None),
        "idle": Counter("t_idle", "Never counted.", registry=None),
        "in_flight": Gauge("t_in_flight", "In flight.", registry=None),
        "latency": Histogram(
            "t_latency_seconds", "Latency.", ("tier",), registry=None, buckets=BUCKETS
        ),
        "overhead": Histogram("t_overhead_seconds", "Overhead.", registry=None, buckets=BUCKETS),
    }
    for tier, amount in (("fast", 1.0), ("frontier", 2.5), ("fast", 0.25)):
        ours["turns"].add((tier,), amount)
        theirs["turns"].labels(tier).inc(amount)
    ours["plain"].add()
    theirs["plain"].inc()
    for step in (1.0, 1.0, -1.0, 1.0):  # a gauge goes down too
        ours["in_flight"].add((), step)
        theirs["in_flight"].inc(step)
    for value in OBSERVED:  # a value on a bound counts in that bound's bucket ("le")
        for tier in ("fast", "frontier"):
            ours["latency"].observe((tier,), value)
            theirs["latency"].labels(tier).observe(value)
        ours["overhead"].observe((), value)
        theirs["overhead"].observe(value)
    assert _text(Families(ours.values())) == _text(*theirs.values())


def test_a_histogram_that_has_seen_nothing_prints_its_zero_buckets_when_unlabelled() -> None:
    overhead = Series("histogram", "t_overhead_seconds", "Overhead.", buckets=BUCKETS)
    latency = Series("histogram", "t_latency_seconds", "Latency.", ("tier",), buckets=BUCKETS)
    text = _text(Families([overhead, latency]))
    assert 't_overhead_seconds_bucket{le="+Inf"} 0.0' in text
    assert "t_overhead_seconds_count 0.0" in text
    assert not any(line.startswith("t_latency_seconds_") for line in text)


@pytest.mark.parametrize(
    ("kind", "buckets"), [("counter", BUCKETS), ("gauge", BUCKETS), ("histogram", ())]
)
def test_buckets_go_with_histograms_only(kind: str, buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="t_bad: buckets are for histograms"):
        Series(kind, "t_bad", "Bad.", buckets=buckets)  # type: ignore[arg-type]


def test_a_counter_never_goes_down_and_a_gauge_may() -> None:
    turns = Series("counter", "t_turns_total", "Turns.")
    with pytest.raises(ValueError, match="t_turns_total: a counter only goes up, got -1"):
        turns.add((), -1.0)
    gauge = Series("gauge", "t_in_flight", "In flight.")
    gauge.add((), -1.0)
    assert (turns.values, gauge.values) == ({(): 0.0}, {(): -1.0})


def _in_four_threads(work: Callable[[], None]) -> None:
    """Run ``work`` in 4 threads at once, switching as often as the interpreter can."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def test_counts_from_many_threads_are_all_kept() -> None:
    turns = Series("counter", "t_turns_total", "Turns.", ("tier",))
    latency = Series("histogram", "t_latency_seconds", "Latency.", ("tier",), buckets=BUCKETS)

    def count() -> None:
        for _ in range(20_000):
            turns.add(("fast",))
            latency.observe(("fast",), 0.05)

    _in_four_threads(count)
    assert turns.values[("fast",)] == 80_000
    assert sum(latency.values[("fast",)]) == 80_000


def _trace_with(cost: object, usage: object) -> object:
    from tiered_router.gate import Verdict
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt, Trace

    attempt = Attempt(
        tier="fast",
        backend="fast",
        model="fast-model",
        latency_s=0.01,
        usage=usage,  # type: ignore[arg-type]
        cost=cost,  # type: ignore[arg-type]
        verdict=Verdict(passed=True, checks=("non_empty",)),
    )
    decision = Decision(tier="fast", backend="fast", score=0.2, threshold=0.5)
    return Trace(turn_id="t", decision=decision, attempts=(attempt,), tier="fast", backend="fast")


def test_a_turn_with_a_missing_or_negative_count_is_counted_without_it() -> None:
    from tiered_router.server._metrics import Metrics
    from tiered_router.turn import Usage

    metrics = Metrics()
    good = Usage(input_tokens=120, output_tokens=40)
    bad = Usage(input_tokens=-5, output_tokens=None)  # type: ignore[arg-type]
    for trace in (_trace_with(None, good), _trace_with(-0.2, bad)):
        metrics.emit(trace)  # type: ignore[arg-type]
    lines = metrics.render().splitlines()
    assert 'tiered_router_requests_total{escalated="false",tier="fast"} 2.0' in lines
    assert 'tiered_router_turn_latency_seconds_count{tier="fast"} 2.0' in lines
    assert 'tiered_router_tokens_total{backend="fast",direction="input"} 120.0' in lines
    assert 'tiered_router_tokens_total{backend="fast",direction="output"} 40.0' in lines
    assert not [line for line in lines if line.startswith("tiered_router_cost_usd_total{")]


def test_a_tracked_total_synced_from_many_threads_is_added_once() -> None:
    from tiered_router.server._metrics import Metrics

    metrics = Metrics()
    grown = [0]
    source = threading.Lock()

    def total() -> float:
        with source:
            return float(grown[0])

    metrics.track(metrics.state_fallbacks, total)

    def grow_and_sync() -> None:
        for _ in range(3_000):
            with source:
                grown[0] += 1
            metrics.sync()

    _in_four_threads(grow_and_sync)
    metrics.sync()
    assert metrics.state_fallbacks.values[()] == 12_000
