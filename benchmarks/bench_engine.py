"""The router's own CPU per turn, without HTTP: ``Router.acomplete`` over an in-memory backend.

The fast tier is a backend object that answers at once (one ``await asyncio.sleep(0)``, so
the turn still yields to the loop as a real call does); the frontier is an ``openai``
backend in the policy that is never called (as in the proxy's benchmarks, where the fast
tier answers). What is left is the router's own work on a turn: checking the turn,
scoring, deciding (rules, capability, capacity), the retry loop, the breaker, building the
request, gating the draft, the trace and its sinks. No socket, no parsing of an answer:
the figure moves only with the router's Python, so it is steadier than a proxy's CPU per
request (``bench_server_layer.py``) or an in-process call over HTTP (``bench_overhead.py``).

Run it on two trees to compare them (the package is the one on ``PYTHONPATH``):

    PYTHONPATH=. python benchmarks/bench_engine.py [--n 5000] [--rounds 5]
    PYTHONPATH=/tmp/base python benchmarks/bench_engine.py

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import warnings
from typing import Any

MESSAGES = [{"role": "user", "content": "Say hi to the team and wish them a good week."}]


async def run(n: int, rounds: int) -> list[float]:
    from tiered_router import Router, Turn
    from tiered_router.turn import Completion, Usage

    answer = Completion(
        text="Hi team! Wishing you all a great week ahead.",
        finish_reason="stop",
        usage=Usage(input_tokens=21, output_tokens=12),
    )

    class Instant:
        """A fast backend that answers at once."""

        name = "fast"
        model = "fast-model"
        kind = "diffusion"
        supports_tools = True

        async def acomplete(self, request: Any) -> Completion:
            await asyncio.sleep(0)
            return answer

        def complete(self, request: Any) -> Completion:
            return answer

    unused = "http://127.0.0.1:9/v1"  # never called: the fast tier answers every turn
    policy = {
        "version": 1,
        "backends": {
            "fast": {"type": "openai", "base_url": unused, "model": "fast-model"},
            "frontier": {"type": "openai", "base_url": unused, "model": "frontier-model"},
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no price": the figures do not need one
        router = Router(policy, backends={"fast": Instant()})
        for _ in range(500):  # warm up
            await router.acomplete(Turn(MESSAGES))
    per_turn = []
    for _ in range(rounds):
        c0 = time.process_time()
        for _ in range(n):
            await router.acomplete(Turn(MESSAGES))
        per_turn.append((time.process_time() - c0) / n * 1e6)
    return per_turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="turns per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import uvloop

        figures = uvloop.run(run(args.n, args.rounds))
    except ImportError:  # the server extra brings uvloop; plain asyncio otherwise
        figures = asyncio.run(run(args.n, args.rounds))
    print(f"python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    print(
        f"Router.acomplete, in-memory fast backend: CPU per turn median "
        f"{statistics.median(figures):.1f} us (rounds: {', '.join(f'{f:.1f}' for f in figures)})"
    )


if __name__ == "__main__":
    main()
