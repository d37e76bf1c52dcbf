"""CPU per call of the two async transports under the backends, through the one request path.

Each row sends the same chat-completions body ``--n`` times, one at a time, through
``tiered_router.backends._wire.acall`` (send, read the whole answer, parse it) to
:class:`tiered_router.testing.ScriptedServer` running in its own process on 127.0.0.1, and
prints this process's CPU time and wall time per call, so the upstream's own work is not
counted:

- ``aiohttp``: :class:`tiered_router._http._aiohttp.AiohttpTransport` (the default when
  aiohttp is installed, as the ``server`` extra does);
- ``httpcore``: httpx2's own transport with the asyncio socket layer
  (``TIERED_ROUTER_ASYNC_HTTP=httpcore``).

Figures are printed, never asserted. Run:

    PYTHONPATH=. python benchmarks/bench_http.py [--n 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import MESSAGES, free_port, start_upstream, stop  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router._http._aiohttp import ENV_VAR  # noqa: E402
from tiered_router.backends import _wire  # noqa: E402


async def measure(url: str, n: int) -> tuple[str, float, float, float]:
    transport = _http.build_async_transport()
    assert transport is not None, "unset HTTP(S)_PROXY to measure the direct transports"
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
    try:
        for choice in ("aiohttp", "httpcore"):
            os.environ[ENV_VAR] = choice
            name, cpu_ms, p50, p99 = asyncio.run(measure(url, args.n))
            print(
                f"  {choice:<9} ({name:<18}) cpu {cpu_ms:6.3f} ms   wall p50 {p50:6.3f} ms"
                f"  p99 {p99:6.3f} ms"
            )
    finally:
        os.environ.pop(ENV_VAR, None)
        stop(upstream)


if __name__ == "__main__":
    main()
