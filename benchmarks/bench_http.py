"""CPU per call of aiohttp's transport (the backends' one async path) against httpx2's.

Each row sends the same chat-completions body ``--n`` times, one at a time, through
``tiered_router.backends._wire.acall`` (send, read the whole answer, parse it) to
:class:`tiered_router.testing.ScriptedServer` running in its own process on 127.0.0.1, and
prints this process's CPU time and wall time per call, so the upstream's own work is not
counted:

- ``aiohttp``: :class:`tiered_router._http._aiohttp.AiohttpTransport`, what every backend's
  async calls go over;
- ``httpx2``: httpx2's own async client (httpcore2 + h11 on anyio), the alternative it was
  chosen against, and what a backend given ``async_http_client=`` sends on.

Both run under the default asyncio loop, then under uvloop (the proxy's loop) when installed.

Figures are printed, never asserted. Run:

    PYTHONPATH=. python benchmarks/bench_http.py [--n 3000]
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


async def measure(choice: str, url: str, n: int) -> tuple[str, float, float, float]:
    transport: _wire.Sender = (
        _http.build_async_transport() if choice == "aiohttp" else _http.build_async_client()
    )
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
    finally:
        await transport.aclose()
    walls.sort()
    p50 = statistics.median(walls) * 1000
    p99 = walls[int(0.99 * (len(walls) - 1))] * 1000
    return type(transport).__name__, cpu_ms, p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per transport")
    args = parser.parse_args()
    port = free_port()
    upstream = start_upstream(port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    print(f"{args.n} sequential calls each; this process's CPU and wall time per call")
    loops: list[tuple[str, Callable[[Any], Any]]] = [("asyncio", asyncio.run)]
    try:
        import uvloop

        loops.append(("uvloop", uvloop.run))
    except ImportError:
        pass
    try:
        for loop_name, run in loops:
            for choice in ("aiohttp", "httpx2"):
                name, cpu_ms, p50, p99 = run(measure(choice, url, args.n))
                print(
                    f"  {loop_name:<8} {choice:<8} ({name:<17}) cpu {cpu_ms:6.3f} ms"
                    f"   wall p50 {p50:6.3f} ms  p99 {p99:6.3f} ms"
                )
    finally:
        stop(upstream)


if __name__ == "__main__":
    main()
