"""How fast the circuit breaker routes around a broken fast upstream, on the real clock.

Turns go through ``Router.acomplete`` at a fixed concurrency against a frontier upstream
(:class:`tiered_router.testing.ScriptedServer` on 127.0.0.1, answering at once) and a fast
upstream that is broken in one of three ways:

- ``refused``: nothing listens on the fast port (connection refused at once);
- ``hung``: the fast upstream never answers; the backend's ``timeout_s`` ends each call;
- ``400``: the fast upstream rejects every request with 400 (the request's fault: the
  breaker must *not* open).

For each it prints the seconds from the first turn until the fast breaker opened (``-``
when it never did; the process's cold start is paid on a throwaway router before the clock
starts), the calls the fast upstream received, the turns routed, and the share of turns
served by the frontier tier. The default policy's breaker is used (5 consecutive failures,
or more than half of at least 10 calls in a 10 s window), with ``max_retries: 0`` on the
fast backend.

Run:

    PYTHONPATH=. python benchmarks/bench_breaker.py [--seconds 5] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import time
from typing import Any

from tiered_router import Router, Turn
from tiered_router.testing import Reply, ScriptedServer


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _policy(server: ScriptedServer, fast_url: str, timeout_s: float) -> dict[str, Any]:
    key = "sk-bench"
    return {
        "backends": {
            "fast": {
                "type": "openai",
                "base_url": fast_url,
                "api_key": key,
                "model": "fast-model",
                "max_retries": 0,
                "timeout_s": timeout_s,
            },
            "frontier": {
                "type": "openai",
                "base_url": server.base_url,
                "api_key": key,
                "model": "frontier-model",
                "max_retries": 0,
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
    }


async def _run(router: Router, seconds: float, concurrency: int) -> tuple[float | None, int, int]:
    start = time.perf_counter()
    opened: float | None = None
    turns = frontier = 0
    breaker = router.breaker("fast")

    async def worker(i: int) -> None:
        nonlocal opened, turns, frontier
        n = 0
        while time.perf_counter() - start < seconds:
            n += 1
            turn = Turn([{"role": "user", "content": f"Say hi, number {i}-{n}."}])
            result = await router.acomplete(turn)
            turns += 1
            frontier += result.tier == "frontier"
            if opened is None and breaker.state != "closed":
                opened = time.perf_counter() - start

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return opened, turns, frontier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1.0, help="fast timeout_s (hung)")
    args = parser.parse_args()
    logging.getLogger("tiered_router").setLevel(logging.ERROR)  # no price warnings here
    print(f"{'fault':<8} {'opened after':>13} {'fast calls':>11} {'turns':>7} {'frontier':>9}")
    for fault in ("refused", "hung", "400"):
        with ScriptedServer() as frontier_up, ScriptedServer() as fast_up:
            frontier_up.default = Reply.text("frontier ok")
            if fault == "refused":
                fast_url = f"http://127.0.0.1:{_free_port()}/v1"
            else:
                fast_up.default = Reply.slow(60.0) if fault == "hung" else Reply.status(400)
                fast_url = fast_up.base_url
            # the process's first call pays a cold start (imports, first connections):
            # pay it on a throwaway router so the clock measures the breaker
            with Router(_policy(frontier_up, frontier_up.base_url, args.timeout)) as warm:
                warm.complete(Turn([{"role": "user", "content": "warm up"}]))
            router = Router(_policy(frontier_up, fast_url, args.timeout))
            try:
                opened, turns, frontier = asyncio.run(_run(router, args.seconds, args.concurrency))
            finally:
                router.close()
            fast_calls = len(fast_up.requests) if fault != "refused" else "-"
            shown = f"{opened:.2f} s" if opened is not None else "-"
            share = frontier / turns if turns else 0.0
            print(f"{fault:<8} {shown:>13} {fast_calls!s:>11} {turns:>7} {share:>9.1%}")


if __name__ == "__main__":
    main()
