"""Profile the proxy under load: where its CPU goes per request, by module, with py-spy.

Starts the scripted upstream and ``tiered-router serve`` (one worker) as ``bench_proxy.py``
does, drives JSON or SSE requests at a given concurrency, and samples the proxy with py-spy
(``pip install py-spy``) for the length of the load. Prints the share of samples whose
innermost Python frame is in each part (the proxy's server code, the router and engine, the
upstream leg's aiohttp, uvicorn, the event loop...), and the inclusive share of a few
functions; and the proxy's CPU per request split into user and system time. py-spy samples
wall time while a thread is not waiting for I/O, so on a loaded machine a ``write`` that
wakes the process on the other end (and is preempted by it) gets samples that are not CPU
this process spends: the user/system split says how much of the CPU is system calls.
``--svg PATH`` also writes a flame graph (not committed: it is large, and another
run on another machine draws another one).

Run (from the repository root):

    PYTHONPATH=. python benchmarks/profile_proxy.py --kind json --concurrency 32 [--svg f.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import (  # noqa: E402
    CLK_TCK,
    POLICY,
    drive,
    free_port,
    payloads,
    start,
    start_upstream,
    stop,
    wait_http,
)

PARTS = [
    ("tiered_router/server/", "proxy: server/"),
    ("tiered_router/engine/", "router: engine/"),
    ("tiered_router/backends/", "router: backends/"),
    ("tiered_router/_http/", "router: _http/ (upstream leg)"),
    ("tiered_router/openai/", "router: openai/_wire (request, response shapes)"),
    ("tiered_router/gate/", "router: gate/"),
    ("tiered_router/scoring/", "router: scoring/"),
    ("tiered_router/", "router: the rest of tiered_router"),
    ("aiohttp/", "aiohttp client"),
    ("uvicorn/", "uvicorn"),
    ("starlette/", "starlette"),
    ("granian/", "granian"),
    ("prometheus_client/", "prometheus_client"),
    ("asyncio/", "event loop (asyncio, uvloop)"),
    ("uvloop/", "event loop (asyncio, uvloop)"),
    ("logging/", "logging"),
]
FUNCTIONS = [
    "chat (tiered_router/server/_proxy.py",
    "read (tiered_router/server/_read.py",
    "acomplete (tiered_router/router.py",
    "astream (tiered_router/router.py",
    "emit (tiered_router/server/_metrics.py",
    "data_received (uvicorn/",
    "run_asgi (uvicorn/",
]


def part_of(frame: str) -> str:
    """The part of the code a py-spy frame (``name (path:line)``) is in."""
    for needle, name in PARTS:
        if needle in frame:
            return name
    return "other (standard library, C calls from Python frames)"


def summarise(raw: str, top: int = 0) -> None:
    """Print self shares by part and inclusive shares of :data:`FUNCTIONS`."""
    leaf: Counter[str] = Counter()
    frames_seen: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf[part_of(frames[-1])] += n
        frames_seen[frames[-1]] += n
        for fn in FUNCTIONS:
            if any(fn in f for f in frames):
                inclusive[fn] += n
    print(f"{total} samples; innermost frame by part:")
    for name, n in leaf.most_common():
        print(f"  {n / total:6.1%}  {name}")
    print("inclusive (a frame anywhere on the stack):")
    for fn in FUNCTIONS:
        print(f"  {inclusive[fn] / total:6.1%}  {fn.split(' (')[0]} ({fn.split(' (')[1]})")
    if top:
        print(f"the {top} innermost frames with most samples:")
        for frame, n in frames_seen.most_common(top):
            print(f"  {n / total:6.1%}  {frame}")


def user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("json", "sse"), default="json")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--svg", help="also write a flame graph here")
    parser.add_argument("--top", type=int, default=0, help="also list the N busiest frames")
    parser.add_argument("--stacks", help="also keep the sampled stacks (collapsed) here")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("profile_proxy.py needs py-spy: pip install py-spy")
    up_port, port = free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="profile-proxy-"))
    upstream = start_upstream(up_port)
    proxy = None
    try:
        policy = tmp / "policy.yaml"
        policy.write_text(POLICY.format(port=up_port), encoding="utf-8")
        cmd = [sys.executable, "-c", "from tiered_router.cli import main; main()", "serve"]
        cmd += [str(policy), "--port", str(port), "--log-level", "warning"]
        proxy = start(cmd, env={**os.environ, "PYTHONPATH": os.getcwd()})
        wait_http(port, "/healthz")
        pay = payloads(port, "/v1/chat/completions", "bench-client-key", "auto")[args.kind]
        asyncio.run(drive(port, pay, requests=2000, concurrency=args.concurrency))  # warm up
        raw = tmp / "stacks.txt"
        record = [spy, "record", "--pid", str(proxy.pid), "--rate", str(args.rate)]
        record += ["--duration", str(int(args.seconds)), "--nonblocking"]
        spies = [subprocess.Popen([*record, "--format", "raw", "--output", str(raw)])]
        if args.svg:
            spies.append(subprocess.Popen([*record, "--output", args.svg]))
        time.sleep(1.0)
        user0, system0 = user_system_s(proxy.pid)
        run = asyncio.run(
            drive(
                port,
                pay,
                requests=10**9,
                concurrency=args.concurrency,
                max_seconds=args.seconds,
                pid=proxy.pid,
            )
        )
        user1, system1 = user_system_s(proxy.pid)
        for s in spies:
            s.wait(60)
        n = max(len(run.samples), 1)
        user_ms, system_ms = (user1 - user0) / n * 1000, (system1 - system0) / n * 1000
        print(
            f"{args.kind.upper()} C={args.concurrency}: {run.rps:.0f} req/s,"
            f" {run.cpu_ms_per_request:.3f} ms CPU per request"
            f" (user {user_ms:.3f} ms, system {system_ms:.3f} ms;"
            f" load average {os.getloadavg()[0]:.1f})"
        )
        summarise(raw.read_text(), args.top)
        if args.stacks:
            shutil.copy(raw, args.stacks)
    finally:
        if proxy is not None:
            stop(proxy)
        if upstream.stdin is not None:
            upstream.stdin.close()
        stop(upstream)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
