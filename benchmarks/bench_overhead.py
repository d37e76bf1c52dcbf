"""What the router adds to one call: ``Router.acomplete`` vs a plain aiohttp call, same server.

Both talk to the same upstream, :class:`tiered_router.testing.ScriptedServer` in its own
process on 127.0.0.1, which answers at once, so the difference is the router's own cost:
scoring, deciding, building the request, gating the draft, recording the trace (the
target: <= 0.3 ms mean added). Rows:

- ``aiohttp``: a plain call, as a careful caller writes it without the router: one
  ``aiohttp.ClientSession`` (its pool kept), the request body serialised, ``POST``, the
  answer read and parsed as JSON;
- ``Router``: ``router.acomplete(Turn(messages))``, the policy's two tiers on that server
  (its async calls go over aiohttp too, see ``tiered_router._http``);
- ``AsyncOpenAI`` (``--sdk``): the openai SDK's client, ``max_retries=0``, for reference.

At concurrency 1 the calls alternate (plain, routed, plain, routed...) so that noise from
other processes hits both sides alike; wall time per call (mean, p50, p99) and CPU per call
(this process, all threads). At concurrency 32, ``--rounds`` blocks of ``--n32`` calls per
row, the rows alternating block by block; the mean wall time per call and the CPU per call.
Figures are printed, never asserted.

Run:

    PYTHONPATH=. python benchmarks/bench_overhead.py [--n 3000] [--n32 6000] [--sdk]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

Call = Callable[[], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def summary(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return statistics.fmean(ordered) * 1e3, ordered[len(ordered) // 2] * 1e3, p99 * 1e3


async def one_at_a_time(calls: dict[str, Call], n: int) -> dict[str, Any]:
    """Concurrency 1: the rows alternate call by call."""
    wall: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
    for _ in range(n):
        for name, call in calls.items():
            c0, t0 = time.process_time(), time.perf_counter()
            await call()
            wall[name].append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    return {name: (summary(wall[name]), cpu[name] / n * 1e3) for name in calls}


async def block(call: Call, n: int, concurrency: int) -> tuple[list[float], float]:
    """``n`` calls over ``concurrency`` workers: each call's wall time, and the CPU spent."""
    left = n
    walls: list[float] = []

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            await call()
            walls.append(time.perf_counter() - t0)

    c0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return walls, time.process_time() - c0


async def concurrently(calls: dict[str, Call], n: int, rounds: int, c: int) -> dict[str, Any]:
    """Concurrency ``c``: ``rounds`` blocks of ``n`` calls per row, the rows alternating."""
    wall: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
    for _ in range(rounds):
        for name, call in calls.items():
            walls, spent = await block(call, n, c)
            wall[name].extend(walls)
            cpu[name] += spent
    return {name: (summary(wall[name]), cpu[name] / (n * rounds) * 1e3) for name in calls}


def show(title: str, results: dict[str, Any]) -> None:
    print(title)
    (base_mean, _, base_p99), base_cpu = results["aiohttp"]
    for name, ((mean, p50, p99), cpu) in results.items():
        line = f"  {name:<12} mean {mean:7.3f}  p50 {p50:7.3f}  p99 {p99:7.3f}  cpu {cpu:6.3f}"
        if name != "aiohttp":
            line += (
                f"  | added: mean {mean - base_mean:+6.3f}  p99 {p99 - base_p99:+6.3f}"
                f"  cpu {cpu - base_cpu:+6.3f}"
            )
        print(line)


async def run(base_url: str, args: argparse.Namespace) -> None:
    import aiohttp

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
        "resilience": {"breaker": {"enabled": not args.no_breaker}},
    }
    router = Router(policy)
    session = aiohttp.ClientSession()
    url = f"{base_url}/chat/completions"
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}

    async def plain() -> None:
        body = json.dumps({"model": "fast-model", "messages": MESSAGES}).encode()
        async with session.post(url, data=body, headers=headers) as response:
            json.loads(await response.read())

    async def routed() -> None:
        await router.acomplete(Turn(MESSAGES))

    calls: dict[str, Call] = {"aiohttp": plain, "Router": routed}
    sdk = None
    if args.sdk:
        import openai

        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)

        async def with_sdk() -> None:
            await sdk.chat.completions.create(model="fast-model", messages=MESSAGES)  # type: ignore[arg-type]

        calls["AsyncOpenAI"] = with_sdk
    for call in calls.values():  # warm up: connections, imports, caches
        for _ in range(200):
            await call()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    show(
        f"concurrency 1: {args.n} calls each, alternating; wall mean / p50 / p99 and CPU per"
        " call, ms",
        await one_at_a_time(calls, args.n),
    )
    show(
        f"concurrency 32: {args.rounds} blocks of {args.n32} calls each, alternating; wall"
        " mean / p50 / p99 per call and CPU per call, ms",
        await concurrently(calls, args.n32, args.rounds, 32),
    )
    await session.close()
    await router.aclose()
    if sdk is not None:
        await sdk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per row, concurrency 1")
    parser.add_argument("--n32", type=int, default=2000, help="calls per block, concurrency 32")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per row, concurrency 32")
    parser.add_argument("--sdk", action="store_true", help="add the openai SDK's client")
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
        asyncio.run(run(f"http://127.0.0.1:{port}/v1", args))
    finally:
        assert upstream.stdin is not None
        upstream.stdin.close()
        upstream.wait(15)


if __name__ == "__main__":
    main()
