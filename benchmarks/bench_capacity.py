"""A burst of concurrent turns against a one-slot fast backend: capacity routing vs queueing.

The scripted server on 127.0.0.1 plays a diffusion server that runs one request at a time
(SGLang in dLLM mode by default) and takes 1 s per reply; the frontier model answers in
0.3 s. After one warm-up fast turn (its latency is measured), 50 turns are sent at once with
a 4.5 s deadline each, under three policies at the same prices:

- ``capacity``: the fast backend declares ``max_concurrency: 1``; turns its queue would
  make late go to the frontier before any call (rule ``capacity.fast``);
- ``queue`` (the naive baseline): no ``max_concurrency``, every turn queues on the slot;
- ``all-frontier``: every turn pinned to the frontier.

Prints, per policy: wall time, turns answered within the deadline, failed turns, fast
answers, turns sent on by the capacity rule, p50 and max turn latency, and the cost of
the answered turns:

    python benchmarks/bench_capacity.py [--turns 50] [--deadline 4.5] [--fast-s 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

from tiered_router import Router, Turn
from tiered_router.exceptions import TieredRouterError
from tiered_router.testing import Reply, ScriptedServer

USER = [{"role": "user", "content": "Summarise the ticket in one line."}]


def one_slot(seconds: float, frontier_s: float) -> Any:
    """Serve ``fast`` one request at a time, ``seconds`` each; ``big`` at once."""
    lock = threading.Lock()
    free_at = [0.0]

    def reply(body: dict[str, Any]) -> Reply:
        if body.get("model") != "fast":
            return Reply.slow(frontier_s, Reply.text("frontier answer"))
        with lock:
            now = time.monotonic()
            done = max(now, free_at[0]) + seconds
            free_at[0] = done
        return Reply.slow(done - now, Reply.text("fast answer"))

    return reply


def policy(base_url: str, *, deadline_s: float, capacity: bool) -> dict[str, Any]:
    fast: dict[str, Any] = {"preset": "sglang", "base_url": base_url, "model": "fast"}
    fast.update(max_retries=0, price={"input_per_mtok": 0.1, "output_per_mtok": 0.3})
    if not capacity:
        fast["max_concurrency"] = None
    big = {"base_url": base_url, "model": "big", "api_key": "k", "max_retries": 0}
    big["price"] = {"input_per_mtok": 2.5, "output_per_mtok": 10.0}
    return {
        "version": 1,
        "backends": {"fast": fast, "big": big},
        "tiers": {"fast": "fast", "frontier": "big"},
        "scoring": {"threshold": 1.0},
        "gate": {"checks": ["non_empty"]},
        "resilience": {"deadline_s": deadline_s},
    }


async def _one(router: Router, tier: str | None) -> tuple[float, Any]:
    start = time.monotonic()
    try:
        result = await router.acomplete(Turn(messages=USER), tier=tier)  # type: ignore[arg-type]
    except TieredRouterError as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, result


def run(name: str, args: argparse.Namespace) -> None:
    with ScriptedServer() as server:
        server.default = one_slot(args.fast_s, args.frontier_s)
        config = policy(server.base_url, deadline_s=args.deadline, capacity=name == "capacity")
        router = Router(config)
        tier = "frontier" if name == "all-frontier" else None

        async def burst() -> tuple[float, list[tuple[float, Any]], Any]:
            await router.acomplete(Turn(messages=USER), tier="frontier")  # warm the HTTP stack
            if tier is None:
                await router.acomplete(Turn(messages=USER), tier="fast")  # measured once
            measured = router.latency.measured("fast")
            start = time.monotonic()
            out = await asyncio.gather(*(_one(router, tier) for _ in range(args.turns)))
            return time.monotonic() - start, out, measured

        wall, out, measured = asyncio.run(burst())
        router.close()
    ok = [(lat, r) for lat, r in out if not isinstance(r, Exception)]
    failed = len(out) - len(ok)
    in_time = sum(1 for lat, _ in ok if lat <= args.deadline)
    fast = sum(1 for _, r in ok if r.tier == "fast")
    routed = sum(1 for _, r in ok if r.decision.rule == "capacity.fast")
    lats = sorted(lat for lat, _ in out)
    cost = sum(r.trace.cost for _, r in ok)
    print(
        f"{name:13s} wall {wall:6.2f} s  within deadline {in_time:3d}/{len(out)}  "
        f"failed {failed:3d}  fast {fast:3d}  capacity.fast {routed:3d}  "
        f"p50 {statistics.median(lats):5.2f} s  max {lats[-1]:5.2f} s  cost ${cost:.6f}"
        + (f"  (warm-up fast call {measured.latency_s:.2f} s)" if measured else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--deadline", type=float, default=4.5)
    parser.add_argument("--fast-s", type=float, default=1.0)
    parser.add_argument("--frontier-s", type=float, default=0.3)
    args = parser.parse_args()
    print(
        f"{args.turns} concurrent turns, one-slot fast backend ({args.fast_s:g} s a reply), "
        f"frontier {args.frontier_s:g} s, deadline {args.deadline:g} s per turn"
    )
    for name in ("capacity", "queue", "all-frontier"):
        run(name, args)


if __name__ == "__main__":
    main()
