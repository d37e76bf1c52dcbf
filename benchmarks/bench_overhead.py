"""What the router adds to one call: ``Router.acomplete`` vs a plain ``AsyncOpenAI`` call.

Both talk to the same upstream, :class:`tiered_router.testing.ScriptedServer` in its own
process on 127.0.0.1, which answers at once, so the difference is the router's own cost:
scoring, deciding, building the request, gating the draft, recording the trace (the
target: <= 0.5 ms mean and <= 1 ms p99 on a pass-through turn). The calls alternate
(plain, routed, plain, routed...) so that noise from other processes hits both sides alike.

Rows:

- ``AsyncOpenAI``: ``client.chat.completions.create`` with the SDK, ``max_retries=0``;
- ``Router``: the router with its default backend (JSON over its own httpx2 pool, no SDK
  objects).

Run:

    PYTHONPATH=. python benchmarks/bench_overhead.py [--n 3000] [--no-breaker]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

UPSTREAM = """
import sys
from tiered_router.testing import ScriptedServer
server = ScriptedServer(port=int(sys.argv[1])).start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""

MESSAGES = [{"role": "user", "content": "Say hi to the team and wish them a good week."}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def summary(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return statistics.fmean(ordered) * 1e3, ordered[len(ordered) // 2] * 1e3, p99 * 1e3


async def measure(calls: dict[str, Callable[[], Awaitable[Any]]], n: int) -> dict[str, Any]:
    for call in calls.values():  # warm up: connections, imports, caches
        for _ in range(100):
            await call()
    wall: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
    for _ in range(n):
        for name, call in calls.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            await call()
            wall[name].append(time.perf_counter() - t0)
            cpu[name] += time.thread_time() - c0
    return {name: (summary(wall[name]), cpu[name] / n * 1e3) for name in calls}


async def run(base_url: str, n: int, *, breaker: bool) -> None:
    try:
        import openai  # the baseline: a plain SDK call to the same server
    except ModuleNotFoundError:
        raise SystemExit(
            'bench_overhead compares with the openai SDK: pip install "tiered-router[openai]"'
        ) from None

    from tiered_router import Router, Turn

    policy = {
        "version": 1,
        "backends": {
            "fast": {
                "type": "openai",
                "base_url": base_url,
                "api_key": "sk-bench",
                "model": "fast-model",
                "kind": "diffusion",
            },
            "frontier": {
                "type": "openai",
                "base_url": base_url,
                "api_key": "sk-bench",
                "model": "frontier-model",
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "resilience": {"breaker": {"enabled": breaker}},
    }
    plain = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    router = Router(policy)

    async def direct() -> None:
        await plain.chat.completions.create(model="fast-model", messages=MESSAGES)  # type: ignore[arg-type]

    async def routed() -> None:
        await router.acomplete(Turn(MESSAGES))

    results = await measure({"AsyncOpenAI": direct, "Router": routed}, n)
    (base_mean, base_p50, base_p99), base_cpu = results["AsyncOpenAI"]
    print(f"{n} calls each, alternating; wall mean / p50 / p99 and CPU per call, milliseconds")
    for name, ((mean, p50, p99), cpu) in results.items():
        line = f"  {name:<13} mean {mean:6.3f}  p50 {p50:6.3f}  p99 {p99:6.3f}  cpu {cpu:6.3f}"
        if name != "AsyncOpenAI":
            line += (
                f"  | vs AsyncOpenAI: mean {mean - base_mean:+6.3f}  p99 {p99 - base_p99:+6.3f}"
                f"  cpu {cpu - base_cpu:+6.3f}"
            )
        print(line)
    await plain.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per row")
    parser.add_argument(
        "--no-breaker", action="store_true", help="turn the circuit breaker off (diagnosis)"
    )
    args = parser.parse_args()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    upstream = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert upstream.stdout is not None
        if upstream.stdout.readline().strip() != b"ready":
            raise RuntimeError("the scripted upstream did not start")
        asyncio.run(run(f"http://127.0.0.1:{port}/v1", args.n, breaker=not args.no_breaker))
    finally:
        assert upstream.stdin is not None
        upstream.stdin.close()
        upstream.wait(15)


if __name__ == "__main__":
    main()
