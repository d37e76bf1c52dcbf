"""Scale benchmark: 1 vs 2 workers, in-process vs Redis state, against the local upstream.

Everything runs on 127.0.0.1, each server in its own process:

- upstream: :class:`tiered_router.testing.ScriptedServer` (answers at once);
- redis-server (Debian's ``redis-server``; the Redis rows are skipped without it);
- ``tiered-router serve --workers N`` with ``state: {type: memory}`` or
  ``state: {type: redis}`` in the policy.

Measured per configuration:

1. concurrency 1, plain turns (no task: the breaker's admission and record only) and task
   turns (``tiered_router: {task_id}``: the task's totals are read and written too):
   latency p50 / p99, and what the proxy adds over a direct upstream call;
2. concurrency 32, task turns: requests per second (and p50 / p99 under load).

Redis runs three ways: ``redis`` (a task turn's record sent before the turn returns,
confirmed in the background: the default), ``redis-c`` (``confirm_writes: true``, the record
awaited) and ``redis-tc`` (``task_cache_s: 30``: a task's repeat turns on one process use its
copy of the totals instead of reading them; every turn here repeats one task).

Then, in this process, the state operations of one turn (``breaker_allow`` +
``breaker_record`` + ``task_record``) on :class:`MemoryStateStore` and on
:class:`RedisStateStore`: p50 / p99 per turn, and what Redis adds. The target is Redis
adding <= 0.3 ms p50 per request. Figures are printed, never asserted.

Run:

    PYTHONPATH=. python benchmarks/bench_scale.py [--n1 1500] [--n32 6000] [--ops 3000] [--rounds 3]
        [--against TREE]   # a checkout of another version, side by side (redis@base)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import (  # noqa: E402
    MESSAGES,
    Run,
    drive,
    free_port,
    request_bytes,
    start,
    start_upstream,
    stop,
    wait_http,
)

CLIENT_KEY = "bench-client-key"

POLICY = """\
version: 1
backends:
  fast: {{type: openai, base_url: "http://127.0.0.1:{port}/v1", api_key: sk-bench-upstream,
         model: fast-model, kind: diffusion}}
  frontier: {{type: openai, base_url: "http://127.0.0.1:{port}/v1", api_key: sk-bench-upstream,
             model: frontier-model}}
tiers: {{fast: fast, frontier: frontier}}
server: {{api_keys: [{key}]}}
state: {state}
"""


def start_redis(port: int, directory: Path) -> subprocess.Popen[bytes] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        print("redis-server: not installed (apt-get install redis-server); Redis rows skipped")
        return None
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    proc = start([*args, "--appendonly", "no", "--dir", str(directory)])
    import socket

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def proxy_payload(port: int, task_id: str | None) -> bytes:
    body: dict[str, Any] = {"model": "auto", "messages": MESSAGES}
    if task_id is not None:
        body["tiered_router"] = {"task_id": task_id}
    return request_bytes("/v1/chat/completions", body, port, CLIENT_KEY)


def serve(
    policy: Path, port: int, workers: int, tree: str | None = None
) -> subprocess.Popen[bytes]:
    """``tiered-router serve`` from this checkout, or from another one (``tree``)."""
    root = tree or os.getcwd()
    env = {**os.environ, "PYTHONPATH": root}
    cmd = [sys.executable, "-c", "from tiered_router.cli import main; main()", "serve"]
    cmd += [str(policy), "--port", str(port), "--workers", str(workers), "--log-level", "warning"]
    proc = start(cmd, env=env, cwd=root)
    wait_http(port, "/readyz")
    return proc


def store_ops(store: Any, n: int, task_prefix: str, *, task: bool) -> list[float]:
    """Seconds per turn's state operations, ``n`` turns.

    A turn without a task: breaker allow + record. With a task, as the proxy does it: the
    task's snapshot when it opens (the turn reuses it), then allow + record + the task's
    record.
    """
    from tiered_router.policy import BreakerConfig
    from tiered_router.state import TaskDelta, TaskRules

    config = BreakerConfig()
    rules = TaskRules()
    delta = TaskDelta(cost=0.0001, latency_s=0.01, fast_decided=True, fast_served=True, clean=True)

    async def main() -> list[float]:
        out: list[float] = []
        for i in range(n):
            task_id = f"{task_prefix}-{i % 64}"
            started = time.perf_counter()
            if task:
                await store.atask_snapshot(task_id)
            admission = await store.abreaker_allow("fast", now=time.monotonic(), config=config)
            await store.abreaker_record(
                "fast", "success", now=time.monotonic(), config=config, token=admission.token
            )
            if task:
                await store.atask_record(task_id, delta, rules=rules)
            out.append(time.perf_counter() - started)
        if hasattr(store, "flush"):
            await store.flush()
        if getattr(store, "task_cache", None) is not None:
            await store.task_cache.aclose()  # its listener belongs to this loop
        return out

    return asyncio.run(main())


def ping_rtt(url: str, n: int, *, idle_s: float = 0.0) -> list[float]:
    """Seconds per PING on a redis.asyncio client: the floor of any Redis operation here.

    ``idle_s``: sleep that long before each PING, as a proxy at concurrency 1 leaves Redis
    idle between turns (an idle server, and on a VM its idle vCPU, answers slower).
    """
    import redis.asyncio as aioredis

    async def main() -> list[float]:
        client = aioredis.Redis.from_url(url)
        out: list[float] = []
        for _ in range(n):
            if idle_s:
                time.sleep(idle_s)
            started = time.perf_counter()
            await client.ping()
            out.append(time.perf_counter() - started)
        await client.aclose()
        return out

    return asyncio.run(main())


def interleaved(
    tmp: Path,
    up_port: int,
    states: dict[str, str],
    n: int,
    batch: int = 100,
    trees: dict[str, str] | None = None,
) -> None:
    """Task turns at C=1 through one proxy per state, all running, taking turns in batches.

    The single runs above drift with the machine by more than the difference between the
    Redis modes; here every batch of one proxy sits next to a batch of each other, and each
    figure is the median of the batches' p50s.
    """
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, state in states.items():
            policy = tmp / f"policy-ab-{name}.yaml"
            policy.write_text(
                POLICY.format(port=up_port, key=CLIENT_KEY, state=state), encoding="utf-8"
            )
            port = free_port()
            procs[name] = (serve(policy, port, 1, (trees or {}).get(name)), port)
        p50s: dict[str, list[float]] = {name: [] for name in procs}
        for name, (_, port) in procs.items():  # warm up
            asyncio.run(drive(port, proxy_payload(port, f"ab-{name}"), requests=200, concurrency=1))
        for _ in range(max(1, n // batch)):
            for name, (_, port) in procs.items():
                run = asyncio.run(
                    drive(port, proxy_payload(port, f"ab-{name}"), requests=batch, concurrency=1)
                )
                p50s[name].append(run.pct(0.5))
        base = statistics.median(p50s["memory"])
        print(f"\ninterleaved, 1 worker, C=1 task turns ({len(p50s['memory'])} batches of {batch})")
        for name, values in p50s.items():
            p50 = statistics.median(values)
            extra = "" if name == "memory" else f"  -> {p50 - base:+.3f} ms over memory"
            print(f"  {name:<10} median batch p50 {p50:.3f} ms{extra}")
    finally:
        for proc, _ in procs.values():
            stop(proc)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n1", type=int, default=1500, help="requests at concurrency 1")
    parser.add_argument("--n32", type=int, default=6000, help="requests at concurrency 32")
    parser.add_argument("--ops", type=int, default=3000, help="turns of store operations")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of store operations")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time limit per phase")
    parser.add_argument(
        "--against",
        metavar="TREE",
        help="another checkout (git worktree add /tmp/base <commit>): its proxy with the "
        "default Redis state joins the side-by-side batches as redis@base",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        up_port, redis_port = free_port(), free_port()
        upstream = start_upstream(up_port)
        procs.append(upstream)
        redis_proc = start_redis(redis_port, tmp)
        if redis_proc is not None:
            procs.append(redis_proc)
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        states = {"memory": "{type: memory}"}
        if redis_proc is not None:
            # a prefix each: the task-write notes of one configuration's records would
            # otherwise wake the redis-tc proxy's listener while another one is measured
            redis_state = {"type": "redis", "url": redis_url, "prefix": "bench"}
            states["redis"] = json.dumps(redis_state)
            # the task record awaited instead of sent (state.confirm_writes: true)
            states["redis-c"] = json.dumps(
                {**redis_state, "prefix": "bench-c", "confirm_writes": True}
            )
            # a task's repeat turns reuse this process's copy (state.task_cache_s)
            states["redis-tc"] = json.dumps(
                {**redis_state, "prefix": "bench-tc", "task_cache_s": 30}
            )
        print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")

        direct = request_bytes(
            "/v1/chat/completions", {"model": "fast-model", "messages": MESSAGES}, up_port
        )
        asyncio.run(drive(up_port, direct, requests=100, concurrency=1))
        base = asyncio.run(
            drive(up_port, direct, requests=args.n1, concurrency=1, max_seconds=args.max_seconds)
        )
        print(f"\ndirect upstream  C=1  p50 {base.pct(0.5):6.2f} ms  p99 {base.pct(0.99):6.2f} ms")

        results: dict[tuple[str, int], tuple[Run, Run, Run]] = {}
        for state_name, state in states.items():
            for workers in (1, 2):
                policy = tmp / f"policy-{state_name}.yaml"
                policy.write_text(
                    POLICY.format(port=up_port, key=CLIENT_KEY, state=state), encoding="utf-8"
                )
                port = free_port()
                proxy = serve(policy, port, workers)
                try:
                    pay = proxy_payload(port, f"bench-{state_name}-{workers}")
                    plain = proxy_payload(port, None)
                    asyncio.run(drive(port, pay, requests=200, concurrency=4))  # warm up
                    bare = asyncio.run(
                        drive(
                            port,
                            plain,
                            requests=args.n1,
                            concurrency=1,
                            max_seconds=args.max_seconds,
                        )
                    )
                    one = asyncio.run(
                        drive(
                            port,
                            pay,
                            requests=args.n1,
                            concurrency=1,
                            max_seconds=args.max_seconds,
                        )
                    )
                    many = asyncio.run(
                        drive(
                            port,
                            pay,
                            requests=args.n32,
                            concurrency=32,
                            max_seconds=args.max_seconds,
                            pid=proxy.pid,
                        )
                    )
                finally:
                    stop(proxy)
                results[(state_name, workers)] = (bare, one, many)
                errors = bare.errors + one.errors + many.errors
                print(
                    f"{state_name:<6} workers {workers}  C=1 plain turn p50 {bare.pct(0.5):6.2f} ms"
                    f" p99 {bare.pct(0.99):6.2f} ms (adds {bare.pct(0.5) - base.pct(0.5):+5.2f} ms"
                    " p50)"
                )
                print(
                    f"{state_name:<6} workers {workers}  C=1 task turn  p50 {one.pct(0.5):6.2f} ms "
                    f"p99 {one.pct(0.99):6.2f} ms (adds {one.pct(0.5) - base.pct(0.5):+5.2f} ms"
                    f" p50)  |  C=32 {many.rps:6.0f} req/s  p50 {many.pct(0.5):6.2f} ms  "
                    f"p99 {many.pct(0.99):6.2f} ms" + (f"  ({errors} errors)" if errors else "")
                )
        for workers in (1, 2):
            for name in ("redis", "redis-c", "redis-tc"):
                if (name, workers) not in results:
                    continue
                for i, label in ((0, "plain turn"), (1, "task turn")):
                    mem, red = results[("memory", workers)][i], results[(name, workers)][i]
                    print(
                        f"{name} vs memory, workers {workers}, C=1 {label}: "
                        f"{red.pct(0.5) - mem.pct(0.5):+.3f} ms p50, "
                        f"{red.pct(0.99) - mem.pct(0.99):+.3f} ms p99"
                    )

        if redis_proc is not None:
            trees: dict[str, str] = {}
            if args.against:
                base_state = {"type": "redis", "url": redis_url, "prefix": "bench-base"}
                states = {**states, "redis@base": json.dumps(base_state)}
                trees["redis@base"] = str(Path(args.against).resolve())
            interleaved(tmp, up_port, states, args.n1, trees=trees)

        from tiered_router.state import MemoryStateStore

        print(f"\nstate operations per turn, in this process, {args.ops} turns each")
        if redis_proc is not None:
            rtt = ping_rtt(redis_url, args.ops)
            print(
                f"  redis PING round trip   p50 {pct(rtt, 0.5):.3f} ms  p99 {pct(rtt, 0.99):.3f} ms"
            )
            idle = ping_rtt(redis_url, min(args.ops, 1000), idle_s=0.001)
            print(
                f"  ... after 1 ms idle     p50 {pct(idle, 0.5):.3f} ms  p99 "
                f"{pct(idle, 0.99):.3f} ms  (what a turn at concurrency 1 meets)"
            )
        # the machine's speed drifts over minutes: the stores take turns, round after round,
        # and each figure is the median of the rounds' p50s (and of their p99s)
        for task in (False, True):
            label = "task turn" if task else "plain turn"
            stores: dict[str, Any] = {"memory": lambda: MemoryStateStore()}
            if redis_proc is not None:
                from tiered_router.state.redis_store import RedisStateStore

                stores["redis"] = lambda: RedisStateStore(redis_url, prefix="ops", timeout_s=1.0)
                if task:  # only task records are sent or confirmed
                    stores["redis-c"] = lambda: RedisStateStore(
                        redis_url, prefix="ops", timeout_s=1.0, confirm_writes=True
                    )
                    stores["redis-tc"] = lambda: RedisStateStore(
                        redis_url, prefix="ops", timeout_s=1.0, task_cache_s=30
                    )
            p50s: dict[str, list[float]] = {name: [] for name in stores}
            p99s: dict[str, list[float]] = {name: [] for name in stores}
            for _ in range(args.rounds):
                for name, make in stores.items():
                    store = make()
                    store_ops(store, 200, "warm", task=task)
                    times = store_ops(store, args.ops, "r", task=task)
                    if hasattr(store, "close"):
                        store.close()
                    p50s[name].append(pct(times, 0.5))
                    p99s[name].append(pct(times, 0.99))
            base = statistics.median(p50s["memory"])
            for name in stores:
                p50, p99 = statistics.median(p50s[name]), statistics.median(p99s[name])
                rounds = ", ".join(f"{v:.3f}" for v in p50s[name])
                line = f"  {name:<9}{label:<11} p50 {p50:.3f} ms  p99 {p99:.3f} ms"
                if name != "memory":
                    line += f"  -> redis adds {p50 - base:.3f} ms p50 (target <= 0.3 ms)"
                print(line + f"   [round p50s: {rounds}]")
    finally:
        for proc in reversed(procs):
            if proc.stdin is not None:
                proc.stdin.close()
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
