"""Choose the proxy's server layer by measurement: the same proxy under different servers.

Targets, each in its own process on 127.0.0.1 in front of the same scripted upstream
(:class:`tiered_router.testing.ScriptedServer`, answering at once), one worker each:

- ``direct``: the upstream itself (the floor, for the added latency at concurrency 1);
- ``starlette/uvicorn``: the tree given with ``--before PATH`` (a checkout whose chat path
  is a Starlette request and response), served by its own ``tiered-router serve`` (uvicorn
  with httptools and uvloop);
- ``asgi/uvicorn``: this tree's ``tiered-router serve`` (the chat path a plain ASGI app,
  the other routes Starlette's), uvicorn with httptools and uvloop;
- ``asgi/granian``: this tree's app served by granian (ASGI interface, single-threaded
  runtime, uvloop), when granian is installed (``pip install granian``);
- ``starlette/granian``: the ``--before`` tree's app on granian, the same way.

For JSON and SSE at concurrency 1, 32 and 64, every phase runs each target in turn (the
order rotating), ``--reps`` times, so that load from other processes hits all targets alike.
Printed per target: the median over the reps and the spread (min-max) of requests per
second, CPU per request (user + system time of the server's process and every process under
it, all threads, from ``/proc``), and at concurrency 1 the latency p50 / p99 and the SSE time
to first byte, each minus the ``direct`` figure of the same rep. Figures are printed, never
asserted.

``--copies N`` starts every target N times and pools the figures by target: one server
process's CPU per request moves by a few per cent with where its memory landed, which
interleaving the reps does not even out.

Run (from the repository root):

    git archive <commit> | tar -x -C /tmp/proxy-base     # the tree to compare with
    PYTHONPATH=. python benchmarks/bench_server_layer.py --before /tmp/proxy-base [--reps 3]
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
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import (  # noqa: E402
    POLICY,
    Run,
    drive,
    free_port,
    payloads,
    start,
    start_upstream,
    stop,
    wait_http,
)

PHASES = [(kind, c) for kind in ("json", "sse") for c in (1, 32, 64)]


@dataclass
class Target:
    """A server to measure: its port, its process and what to send it."""

    name: str
    port: int
    proc: subprocess.Popen[bytes] | None
    pay: dict[str, bytes]


def _serve(tree: Path, policy: Path, port: int) -> subprocess.Popen[bytes]:
    """``tiered-router serve`` of ``tree`` (uvicorn + httptools + uvloop, one worker)."""
    cmd = [sys.executable, "-c", "from tiered_router.cli import main; main()", "serve"]
    cmd += [str(policy), "--port", str(port), "--log-level", "warning"]
    return start(cmd, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=str(tree))


def _granian(tree: Path, policy: Path, port: int) -> subprocess.Popen[bytes]:
    """``tree``'s app on granian: ASGI, single-threaded runtime, uvloop, one worker.

    The app is built in the worker by the same factory ``serve --workers N`` uses.
    """
    spec = {"policy": str(policy), "max_body_bytes": None, "log_level": "warning"}
    env = {**os.environ, "PYTHONPATH": str(tree), "TIERED_ROUTER_SERVE_POLICY": json.dumps(spec)}
    granian = str(Path(sys.executable).with_name("granian"))
    cmd = [granian, "--interface", "asgi", "--runtime-mode", "st", "--loop", "uvloop"]
    cmd += ["--workers", "1", "--host", "127.0.0.1", "--port", str(port), "--no-ws"]
    cmd += ["--log-level", "warning", "--factory", "tiered_router.server:_app_from_environment"]
    return start(cmd, env=env, cwd=str(tree))


def start_targets(args: argparse.Namespace, up: subprocess.Popen[bytes], up_port: int, tmp: Path):  # type: ignore[no-untyped-def]
    """Start every target; return them (``direct`` first)."""
    policy = tmp / "policy.yaml"
    policy.write_text(POLICY.format(port=up_port), encoding="utf-8")
    here = Path.cwd()
    chat = "/v1/chat/completions"
    plan: list[tuple[str, Path, object]] = [("asgi/uvicorn", here, _serve)]
    have_granian = Path(sys.executable).with_name("granian").exists() and not args.no_granian
    if have_granian:
        plan.append(("asgi/granian", here, _granian))
    if args.before:
        before = Path(args.before).resolve()
        plan.insert(0, (args.before_name, before, _serve))
        if have_granian and args.granian_before:
            plan.append(("starlette/granian", before, _granian))
    targets = [Target("direct", up_port, up, payloads(up_port, chat, None, "fast-model"))]
    for _ in range(args.copies):
        for name, tree, how in plan:
            if name not in args.only and args.only:
                continue
            port = free_port()
            proc = how(tree, policy, port)  # type: ignore[operator]
            wait_http(port, "/healthz")
            pay = payloads(port, chat, "bench-client-key", "auto")
            targets.append(Target(name, port, proc, pay))
    return targets


async def one_phase(target: Target, kind: str, c: int, args: argparse.Namespace) -> Run:
    pid = target.proc.pid if target.proc is not None else None
    pay = target.pay[kind]
    await drive(target.port, pay, requests=20 * c, concurrency=c)  # warm the connections
    n = args.n1 if c == 1 else args.n
    return await drive(
        target.port, pay, requests=n, concurrency=c, max_seconds=args.max_seconds, pid=pid
    )


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="tree of the Starlette chat path to compare with")
    parser.add_argument("--before-name", default="starlette/uvicorn", help="its label")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 32, 64])
    parser.add_argument("--no-granian", action="store_true", help="leave granian out")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n1", type=int, default=600, help="requests per rep at concurrency 1")
    parser.add_argument("--n", type=int, default=3000, help="requests per rep at C=32 and 64")
    parser.add_argument("--max-seconds", type=float, default=8.0, help="time limit per run")
    parser.add_argument("--granian-before", action="store_true", help="the --before tree too")
    parser.add_argument("--only", nargs="*", default=[], help="targets to run (names)")
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        help="server processes per target (a process's figure moves with where its memory "
        "landed; each copy is measured every rep, and the figures are pooled by target)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-layer-"))
    up_port = free_port()
    upstream = start_upstream(up_port)
    targets: list[Target] = []
    try:
        targets = start_targets(args, upstream, up_port, tmp)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
        runs: dict[tuple[str, int, str], list[Run]] = defaultdict(list)
        added: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
        for rep in range(args.reps):
            for kind, c in [(k, c) for k, c in PHASES if c in args.concurrency]:
                order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
                got: dict[str, list[Run]] = defaultdict(list)
                for target in order:
                    if c > 1 and target.name == "direct":
                        continue
                    run = asyncio.run(one_phase(target, kind, c, args))
                    got[target.name].append(run)
                    runs[kind, c, target.name].append(run)
                if c == 1 and "direct" in got:
                    base = got["direct"][0]
                    for name, each in got.items():
                        added[kind, name].extend(
                            (
                                run.pct(0.5) - base.pct(0.5),
                                run.pct(0.99) - base.pct(0.99),
                                run.pct(0.5, True) - base.pct(0.5, True),
                            )
                            for run in each
                        )
            print(f"rep {rep + 1}/{args.reps} done, load average {os.getloadavg()[0]:.1f}")
        report(targets, runs, added)
    finally:
        for target in targets[1:]:
            if target.proc is not None:
                stop(target.proc)
        if upstream.stdin is not None:
            upstream.stdin.close()
        stop(upstream)
        shutil.rmtree(tmp, ignore_errors=True)


def report(
    targets: list[Target],
    runs: dict[tuple[str, int, str], list[Run]],
    added: dict[tuple[str, str], list[tuple[float, float, float]]],
) -> None:
    """Print medians over the reps, with the spread (min-max) in brackets."""
    names = list(dict.fromkeys(t.name for t in targets if t.name != "direct"))
    for kind in ("json", "sse"):
        print(f"\n{kind.upper()}: C=1 added over direct (ms), median (min-max) over reps")
        for name in names if added else []:
            rows = added[kind, name]
            line = f"  {name:<18} p50 {spread([r[0] for r in rows], '{:+.2f}')}"
            line += f"  p99 {spread([r[1] for r in rows], '{:+.2f}')}"
            if kind == "sse":
                line += f"  ttfb p50 {spread([r[2] for r in rows], '{:+.2f}')}"
            print(line)
        for c in (1, 32, 64):
            if not runs.get((kind, c, names[0])):
                continue
            print(f"{kind.upper()}  C={c}: requests/s and CPU per request (ms)")
            for name in names:
                rs = runs[kind, c, name]
                errors = sum(r.errors for r in rs)
                print(
                    f"  {name:<18} {spread([r.rps for r in rs])} req/s"
                    f"  cpu {spread([r.cpu_ms_per_request for r in rs], '{:.3f}')} ms/req"
                    + (f"  ({errors} errors)" if errors else "")
                )


if __name__ == "__main__":
    main()
