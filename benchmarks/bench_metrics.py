"""What the proxy's /metrics bookkeeping costs per request (prometheus_client).

Per request the proxy moves the in-flight gauge up and down, counts the turn (one routed
turn: tier, one attempt with tokens and cost, a passed verdict), the response, and one
overhead observation. This times exactly those calls, in one process (values in memory)
and with ``PROMETHEUS_MULTIPROC_DIR`` set (``serve --workers N``: values in mmap files),
and one scrape of each. ``benchmarks/bench_proxy.py`` gives the same cost as a share of the
proxy's whole CPU per request. Figures are printed, never asserted.

Run:

    PYTHONPATH=. python benchmarks/bench_metrics.py [--n 50000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _trace() -> object:
    from tiered_router.gate import Verdict
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt, Trace
    from tiered_router.turn import Usage

    decision = Decision(tier="fast", backend="fast", score=0.2, threshold=0.5)
    attempt = Attempt(
        tier="fast",
        backend="fast",
        model="fast-model",
        latency_s=0.01,
        usage=Usage(input_tokens=120, output_tokens=40),
        cost=0.00006,
        verdict=Verdict(passed=True, checks=("non_empty",)),
    )
    return Trace(turn_id="t", decision=decision, attempts=(attempt,), tier="fast", backend="fast")


def measure(n: int) -> None:
    """Time ``n`` requests' bookkeeping and one scrape in this process; print one line."""
    from tiered_router.server._metrics import worker_metrics

    metrics = worker_metrics()
    trace = _trace()
    rounds: list[float] = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n // 5):
            metrics.in_flight.add((), 1.0)
            metrics.emit(trace)  # type: ignore[arg-type]
            metrics.response("/v1/chat/completions", 200)
            metrics.overhead.observe((), 0.0004)
            metrics.in_flight.add((), -1.0)
        rounds.append((time.perf_counter() - start) / (n // 5))
    start = time.perf_counter()
    text = metrics.render()
    scrape = time.perf_counter() - start
    mode = "multiprocess" if metrics.multiprocess_dir else "in memory"
    print(
        f"  {mode:<13} {statistics.median(rounds) * 1e6:6.1f} us/request"
        f"  (min {min(rounds) * 1e6:.1f})  scrape {scrape * 1e3:5.2f} ms"
        f"  ({len(text.splitlines())} lines)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="requests per mode")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(args.n)
        return
    print(f"python {sys.version.split()[0]}; {args.n} requests per mode (median of 5 rounds)")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    command = [sys.executable, __file__, "--child", "--n", str(args.n)]
    subprocess.run(command, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as directory:
        # the variable must be set before prometheus_client is imported: a fresh process
        subprocess.run(command, env={**env, "PROMETHEUS_MULTIPROC_DIR": directory}, check=True)


if __name__ == "__main__":
    main()
