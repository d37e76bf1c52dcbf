"""Exactness of shared task totals in Redis under load: every turn sent is a step recorded.

Everything runs on 127.0.0.1: a redis-server, the scripted upstream (its own process), and
``tiered-router serve`` with ``state: {type: redis}`` at the policy's defaults (``timeout_s``
0.05 s). Two parts:

1. **Through the proxy**, 1 and 2 workers, at concurrency 1, 8, 32 and 64: ``--turns``
   turns spread over ``--tasks`` tasks (``tiered_router: {task_id}``; each run its own task
   ids). Printed per run: turns sent, answered 200, steps Redis holds for the run's tasks,
   and the state-store fallbacks the proxy counted (``tiered_router_state_fallbacks_total``).
2. **In process, a cold burst**: a new :class:`~tiered_router.Router` (its Redis pool not yet
   open) takes 5, 50 and 200 concurrent turns of one task at once. Printed: turns, steps in
   Redis, fallbacks (the router's in-process answers plus records Redis did not confirm).

A row is ``exact`` when the steps equal the turns and nothing fell back. Figures are printed,
never asserted here (``tests/test_task_redis_sweep.py`` runs a smaller sweep and asserts it);
``--json`` prints the rows as one JSON document instead of the table.

Run:

    PYTHONPATH=. python benchmarks/bench_task_redis.py [--turns 1000] [--tasks 10]
        [--workers 1 2] [--concurrency 1 8 32 64] [--bursts 5 50 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import _one, free_port, request_bytes, start_upstream, stop  # noqa: E402
from bench_scale import CLIENT_KEY, MESSAGES, POLICY, serve, start_redis  # noqa: E402

FALLBACKS = re.compile(rb"^tiered_router_state_fallbacks_total(?:\{[^}]*\})? (\S+)$", re.M)


def fallbacks(port: int) -> float:
    """The proxy's ``tiered_router_state_fallbacks_total`` (all workers), 0 when absent."""
    from tiered_router import _http

    with _http.build_client() as http:
        text = http.get(
            f"http://127.0.0.1:{port}/metrics",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        ).content
    return sum(float(m) for m in FALLBACKS.findall(text))


async def send(port: int, task_ids: list[str], *, turns: int, concurrency: int) -> list[int]:
    """Send ``turns`` task turns over ``concurrency`` keep-alive connections; the statuses."""
    payloads = [
        request_bytes(
            "/v1/chat/completions",
            {"model": "auto", "messages": MESSAGES, "tiered_router": {"task_id": task_id}},
            port,
            CLIENT_KEY,
        )
        for task_id in task_ids
    ]
    statuses: list[int] = []
    next_turn = 0

    async def worker() -> None:
        nonlocal next_turn
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while next_turn < turns:
                i, next_turn = next_turn, next_turn + 1
                status, _, _ = await _one(reader, writer, payloads[i % len(payloads)])
                statuses.append(status)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def steps_in_redis(url: str, prefix: str, task_ids: list[str]) -> int:
    from tiered_router.state.redis_store import RedisStateStore

    store = RedisStateStore(url, prefix=prefix, timeout_s=5.0)
    try:
        return sum(store.task_snapshot(task_id).steps for task_id in task_ids)
    finally:
        store.close()


def proxy_sweep(
    tmp: Path,
    up_port: int,
    redis_url: str,
    *,
    workers: list[int],
    concurrency: list[int],
    turns: int,
    tasks: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n_workers in workers:
        prefix = f"sweep{n_workers}"
        state = f'{{type: redis, url: "{redis_url}", prefix: {prefix}}}'
        policy = tmp / f"policy-w{n_workers}.yaml"
        policy.write_text(POLICY.format(port=up_port, key=CLIENT_KEY, state=state), "utf-8")
        port = free_port()
        proc = serve(policy, port, n_workers)
        try:
            for c in concurrency:
                task_ids = [f"w{n_workers}-c{c}-{i}-{time.time_ns()}" for i in range(tasks)]
                before = fallbacks(port)
                started = time.perf_counter()
                statuses = asyncio.run(send(port, task_ids, turns=turns, concurrency=c))
                wall = time.perf_counter() - started
                time.sleep(0.2)  # the last records' answers, read in the background
                rows.append(
                    {
                        "part": "proxy",
                        "workers": n_workers,
                        "concurrency": c,
                        "turns": turns,
                        "ok": statuses.count(200),
                        "steps": steps_in_redis(redis_url, prefix, task_ids),
                        "fallbacks": fallbacks(port) - before,
                        "rps": turns / wall,
                    }
                )
        finally:
            stop(proc)
    return rows


def burst(up_port: int, redis_url: str, size: int) -> dict[str, Any]:
    """``size`` concurrent turns of one task on a new router (cold pool)."""
    import yaml

    from tiered_router import Router, Turn

    state = f'{{type: redis, url: "{redis_url}", prefix: burst}}'
    policy = yaml.safe_load(POLICY.format(port=up_port, key=CLIENT_KEY, state=state))
    task_id = f"burst-{size}-{time.time_ns()}"

    async def main() -> tuple[int, int]:
        router = Router(policy)
        turn = Turn(MESSAGES)

        async def one() -> None:
            async with router.task(task_id):
                await router.acomplete(turn.with_updates(id=None))

        try:
            await asyncio.gather(*(one() for _ in range(size)))
        finally:
            store = router.state.store  # type: ignore[attr-defined]
            await store.flush()
            lost = int(router.state.failures) + int(store.background_failures)  # type: ignore[attr-defined]
            await router.aclose()
        return size, lost

    import logging

    # what the store said when something fell back (one warning per 30 s), for a failed row
    said: list[str] = []
    catcher = logging.Handler(logging.WARNING)
    catcher.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    store_log = logging.getLogger("tiered_router.state")
    store_log.addHandler(catcher)
    try:
        turns, lost = asyncio.run(main())
    finally:
        store_log.removeHandler(catcher)
    return {
        "part": "burst",
        "workers": 0,
        "concurrency": size,
        "turns": turns,
        "ok": turns,
        "steps": steps_in_redis(redis_url, "burst", [task_id]),
        "fallbacks": lost,
        "rps": 0.0,
        "said": said[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--bursts", type=int, nargs="*", default=[5, 50, 200])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-task-redis-") as directory:
        tmp = Path(directory)
        redis_port, up_port = free_port(), free_port()
        redis_proc = start_redis(redis_port, tmp)
        if redis_proc is None:
            sys.exit(1)
        upstream = start_upstream(up_port)
        url = f"redis://127.0.0.1:{redis_port}/0"
        try:
            rows = [burst(up_port, url, size) for size in args.bursts]
            rows += proxy_sweep(
                tmp,
                up_port,
                url,
                workers=args.workers,
                concurrency=args.concurrency,
                turns=args.turns,
                tasks=args.tasks,
            )
        finally:
            stop(upstream)
            stop(redis_proc)
    for row in rows:
        row["exact"] = row["steps"] == row["turns"] == row["ok"] and row["fallbacks"] == 0
    if args.json:
        print(json.dumps(rows))
        return
    print(
        f"{'part':<6} {'workers':>7} {'conc.':>5} {'turns':>6} {'200s':>6} {'steps':>6} "
        f"{'fallbacks':>9} {'req/s':>7}  exact"
    )
    for r in rows:
        workers = r["workers"] or "-"
        print(
            f"{r['part']:<6} {workers:>7} {r['concurrency']:>5} {r['turns']:>6} {r['ok']:>6} "
            f"{r['steps']:>6} {r['fallbacks']:>9.0f} {r['rps']:>7.0f}  "
            f"{'yes' if r['exact'] else 'NO'}"
        )
    for r in rows:
        for line in r.get("said") or ():
            if not r["exact"]:
                print(f"  {r['part']} {r['concurrency']}: {line}")
    exact = sum(r["exact"] for r in rows)
    print(f"\n{exact} of {len(rows)} runs exact (steps in Redis == turns sent, 0 fallbacks)")


if __name__ == "__main__":
    main()
