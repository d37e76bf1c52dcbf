"""CPU per call of the backends' async transport (ours) against aiohttp's and httpx2's.

Each row sends the same chat-completions body ``--n`` times through
``tiered_router.backends._wire.acall`` (send, read the whole answer, parse it) to
:class:`tiered_router.testing.ScriptedServer` running in its own process on 127.0.0.1, one
at a time and then from ``--concurrency`` tasks at once (``C=``), and prints this process's
CPU time per call and the wall time of a sequential call, so the upstream's own work is
not counted:

- ``direct``: :class:`tiered_router._http._direct.DirectTransport`, our HTTP/1.1 client,
  what every backend's direct (no proxy) async calls go over;
- ``aiohttp``: :class:`tiered_router._http._aiohttp.AiohttpTransport`, aiohttp's client,
  what calls through a proxy from the environment go over (and, before, every call);
- ``httpx2``: httpx2's own async client (httpcore2 + h11 on anyio), what a backend given
  ``async_http_client=`` sends on.

All run under the default asyncio loop, then under uvloop (the proxy's loop) when installed.

Figures are printed, never asserted. Run:

    PYTHONPATH=. python benchmarks/bench_http.py [--n 3000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import MESSAGES, free_port, start_upstream, stop  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.backends import _wire  # noqa: E402


def _sender(choice: str) -> Any:
    if choice == "direct":
        return _http.build_async_transport()
    if choice == "aiohttp":
        from tiered_router._http._aiohttp import AiohttpTransport

        return AiohttpTransport()
    return _http.build_async_client()


async def measure(
    choice: str, url: str, n: int, concurrency: int
) -> tuple[str, float, float, float, float]:
    transport = _sender(choice)
    body = json.dumps({"model": "fast-model", "messages": MESSAGES}).encode()
    call = _wire.Call(
        backend="bench",
        url=_http.URL(url),
        headers=(("authorization", "Bearer sk-bench"), ("content-type", "application/json")),
        body=body,
        timeout_s=10.0,
    )
    try:
        for _ in range(min(200, n)):  # warm up: connections, code paths
            await _wire.acall(transport, call)
        walls = []
        cpu = time.process_time()
        for _ in range(n):
            started = time.perf_counter()
            await _wire.acall(transport, call)
            walls.append(time.perf_counter() - started)
        cpu_ms = (time.process_time() - cpu) / n * 1000

        async def worker(calls: int) -> None:
            for _ in range(calls):
                await _wire.acall(transport, call)

        each = max(1, n // concurrency)
        await asyncio.gather(*(worker(min(each, 20)) for _ in range(concurrency)))  # warm up
        cpu = time.process_time()
        await asyncio.gather(*(worker(each) for _ in range(concurrency)))
        concurrent_ms = (time.process_time() - cpu) / (each * concurrency) * 1000
    finally:
        await transport.aclose()
    walls.sort()
    p50 = statistics.median(walls) * 1000
    p99 = walls[int(0.99 * (len(walls) - 1))] * 1000
    return type(transport).__name__, cpu_ms, concurrent_ms, p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per transport and row")
    parser.add_argument("--concurrency", type=int, default=32, help="tasks of the C= column")
    args = parser.parse_args()
    port = free_port()
    upstream = start_upstream(port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    print(
        f"{args.n} calls each, sequential (C=1) then from {args.concurrency} tasks"
        f" (C={args.concurrency}); this process's CPU per call, wall time of a C=1 call"
    )
    loops: list[tuple[str, Callable[[Any], Any]]] = [("asyncio", asyncio.run)]
    try:
        import uvloop

        loops.append(("uvloop", uvloop.run))
    except ImportError:
        pass
    try:
        for loop_name, run in loops:
            for choice in ("direct", "aiohttp", "httpx2"):
                name, cpu_ms, many_ms, p50, p99 = run(
                    measure(choice, url, args.n, args.concurrency)
                )
                print(
                    f"  {loop_name:<8} {choice:<8} ({name:<17}) cpu C=1 {cpu_ms:6.3f} ms"
                    f"  C={args.concurrency} {many_ms:6.3f} ms"
                    f"   wall p50 {p50:6.3f} ms  p99 {p99:6.3f} ms"
                )
    finally:
        stop(upstream)


if __name__ == "__main__":
    main()
