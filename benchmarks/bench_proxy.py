"""Benchmark the proxy against a direct call and against LiteLLM's proxy, same upstream.

Everything runs on 127.0.0.1, each server in its own process:

- upstream: :class:`tiered_router.testing.ScriptedServer` (answers ``ok`` at once);
- ``tiered-router serve`` (one worker) in front of it, policy with two tiers on it;
- LiteLLM's proxy (``litellm --config``, one worker): ``--litellm PATH``, ``$LITELLM`` or
  the venv of ``--litellm-version`` (default :data:`LITELLM_VERSION`, the newest whose proxy
  installs with ``litellm[proxy]``); when none has it, the script installs that version from
  the registry into its own venv under the temporary directory (a few minutes, once; never
  into this project's environment), so anyone can rerun the comparison. The LiteLLM
  version compared with is printed at the start and in the table.

Measured, for JSON and for SSE (``stream: true``), ``--reps`` rounds with the targets
interleaved (the order rotating), so that load from other processes hits all alike:

1. concurrency 1: the latency each proxy adds over the direct call of the same round, p50
   and p99, and for SSE the time to the first body byte;
2. concurrency 32: requests per second and CPU per request (user + system time of the
   server's process and every process under it, all threads, from ``/proc``).

Printed: the median over the rounds with the spread (min-max), and the ratios to LiteLLM at
concurrency 32. The load generator is a lean keep-alive HTTP/1.1 client on asyncio streams
(an httpx-based one spends as much CPU per request as the proxy, and would be the
bottleneck). Figures are printed, never asserted.

Run:

    PYTHONPATH=. python benchmarks/bench_proxy.py [--reps 3] [--litellm-version 1.108.7]
        [--no-litellm]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def request_bytes(path: str, body: dict[str, Any], port: int, key: str | None = None) -> bytes:
    data = json.dumps(body).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"host: 127.0.0.1:{port}",
        "content-type: application/json",
        f"content-length: {len(data)}",
    ]
    if key:
        head.append(f"authorization: Bearer {key}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


@dataclass
class Sample:
    latency_s: float
    ttfb_s: float


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def pct(self, q: float, ttfb: bool = False) -> float:
        values = sorted(s.ttfb_s if ttfb else s.latency_s for s in self.samples)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))] * 1000

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(s.latency_s for s in self.samples) * 1000

    @property
    def rps(self) -> float:
        return len(self.samples) / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s / len(self.samples) * 1000 if self.samples else float("nan")


async def _one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes
) -> tuple[int, float, float]:
    started = time.perf_counter()
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    first = 0.0
    if b"transfer-encoding: chunked" in lower:
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0], 16)
            if not first:
                first = time.perf_counter()
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            await reader.readexactly(size + 2)
    else:
        at = lower.find(b"content-length:")
        length = int(lower[at + 15 : lower.find(b"\r\n", at)]) if at >= 0 else 0
        await reader.readexactly(length)
        first = time.perf_counter()
    done = time.perf_counter()
    return status, done - started, first - started


async def drive(
    port: int,
    payload: bytes,
    *,
    requests: int,
    concurrency: int,
    max_seconds: float = 60.0,
    pid: int | None = None,
) -> Run:
    """Send ``requests`` requests with ``concurrency`` connections; stop after ``max_seconds``."""
    run = Run()
    left = requests
    stop_at = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left > 0 and time.perf_counter() < stop_at:
                left -= 1
                status, latency, ttfb = await _one(reader, writer, payload)
                if status == 200:
                    run.samples.append(Sample(latency, ttfb))
                else:
                    run.errors += 1
        finally:
            writer.close()

    cpu0 = process_tree_cpu_s(pid) if pid else 0.0
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.wall_s = time.perf_counter() - started
    run.cpu_s = (process_tree_cpu_s(pid) - cpu0) if pid else 0.0
    return run


def _children(pid: int) -> list[int]:
    """The child processes of every thread of ``pid``."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def process_tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live process under it, all threads."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        todo.extend(_children(p))
    return total


def wait_http(port: int, path: str, timeout_s: float = 60.0) -> None:
    """Wait until ``GET path`` on 127.0.0.1:port answers."""
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(
                    f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode()
                )
                if sock.recv(64).startswith(b"HTTP/1.1 2"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port}{path} within {timeout_s:.0f} s")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, **kwargs
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


UPSTREAM_SCRIPT = """
import sys, time
from tiered_router.testing import ScriptedServer
server = ScriptedServer(port=int(sys.argv[1])).start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


def start_upstream(port: int) -> subprocess.Popen[bytes]:
    """The scripted OpenAI-compatible server in its own process (stops when stdin closes)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM_SCRIPT, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise RuntimeError("the scripted upstream did not start")
    return proc


POLICY = """\
version: 1
backends:
  fast: {{type: openai, base_url: "http://127.0.0.1:{port}/v1", api_key: sk-bench-upstream,
         model: fast-model, kind: diffusion}}
  frontier: {{type: openai, base_url: "http://127.0.0.1:{port}/v1", api_key: sk-bench-upstream,
             model: frontier-model}}
tiers: {{fast: fast, frontier: frontier}}
server: {{api_keys: [bench-client-key]}}
"""

LITELLM_CONFIG = """\
model_list:
  - model_name: auto
    litellm_params:
      model: openai/fast-model
      api_base: http://127.0.0.1:{port}/v1
      api_key: sk-bench-upstream
litellm_settings:
  drop_params: true
general_settings:
  master_key: sk-bench-client-key
"""

MESSAGES = [{"role": "user", "content": "Say hi to the team and wish them a good week."}]


LITELLM_VERSION = "1.108.7"
"""The LiteLLM compared with by default: the newest whose proxy installs from the registry
with ``litellm[proxy]`` (from 1.110 the proxy is the separate ``litellm-proxy`` package)."""


def litellm_venv(version: str) -> Path:
    """Where the script installs LiteLLM ``version`` when it finds none."""
    return Path(tempfile.gettempdir()) / f"tiered-router-litellm-{version}"


def find_litellm(explicit: str | None, version: str) -> str | None:
    """Return a ``litellm`` executable: the given one, ``$LITELLM``, or the version's venv."""
    venv = str(litellm_venv(version) / "bin" / "litellm")
    for candidate in (explicit, os.environ.get("LITELLM"), venv):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def litellm_version(executable: str) -> str:
    """The installed litellm version beside ``executable`` (its venv's python), or ``unknown``."""
    python = Path(executable).with_name("python")
    if not python.exists():
        return "unknown"
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def install_litellm(version: str) -> str:
    """Install ``litellm[proxy]==version`` into its own venv (never this project's)."""
    venv = litellm_venv(version)
    print(f"LiteLLM: installing litellm[proxy]=={version} into {venv} (once)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = str(venv / "bin" / "pip")
    subprocess.run([pip, "install", "--quiet", f"litellm[proxy]=={version}"], check=True)
    return str(venv / "bin" / "litellm")


def payloads(port: int, path: str, key: str | None, model: str) -> dict[str, bytes]:
    body = {"model": model, "messages": MESSAGES}
    stream = {**body, "stream": True}
    return {
        "json": request_bytes(path, body, port, key),
        "sse": request_bytes(path, stream, port, key),
    }


def med(values: list[float], fmt: str = "{:.2f}") -> str:
    """The median of ``values`` with their spread: ``median (min-max)``."""
    if not values:
        return "-"
    middle = statistics.median(values)
    return f"{fmt.format(middle)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


@dataclass
class Figures:
    """Per target and request kind, one value per rep."""

    added_p50: list[float] = field(default_factory=list)
    added_p99: list[float] = field(default_factory=list)
    added_ttfb: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    errors: int = 0


def table(figures: dict[tuple[str, str], Figures], litellm: str | None) -> None:
    """Print the comparison: medians over the reps, spread in brackets."""
    print(
        "\ntarget | C=1 added p50 (ms) | added p99 | SSE TTFB added p50 | C=32 requests/s"
        " | CPU per request (ms)"
    )
    names = ["tiered-router"] + (["litellm"] if litellm else [])
    for kind in ("json", "sse"):
        for name in names:
            f = figures.get((kind, name))
            if f is None:
                continue
            label = f"{name} {kind.upper()}" + (f" ({litellm})" if name == "litellm" else "")
            ttfb = med(f.added_ttfb, "{:+.2f}") if kind == "sse" else ""
            print(
                f"  {label:<24} | {med(f.added_p50, '{:+.2f}')} | {med(f.added_p99, '{:+.2f}')}"
                f" | {ttfb} | {med(f.rps, '{:.0f}')} | {med(f.cpu_ms, '{:.3f}')}"
                + (f" | {f.errors} errors" if f.errors else "")
            )
    print("\nSUMMARY at C=32 (targets: >= 25x LiteLLM's requests/s, >= 30x less CPU per request)")
    for kind in ("json", "sse"):
        ours, lite = figures.get((kind, "tiered-router")), figures.get((kind, "litellm"))
        if ours is None or lite is None or not ours.rps or not lite.rps:
            continue
        rps = statistics.median(ours.rps) / statistics.median(lite.rps)
        cpu = statistics.median(lite.cpu_ms) / statistics.median(ours.cpu_ms)
        print(
            f"  {kind.upper():<4} {rps:.1f}x LiteLLM's requests/s, {cpu:.1f}x less CPU per request"
        )
    print(
        "C=1 targets: JSON added <= 1.0 ms p50 and <= 1.5 ms p99, SSE time to first byte added"
        " <= 1.5 ms p50"
    )


async def phase(
    target: tuple[int, dict[str, bytes], int | None], kind: str, n: int, c: int, limit: float
) -> Run:
    """Warm the connections, then send ``n`` requests at concurrency ``c``."""
    port, pay, pid = target
    await drive(port, pay[kind], requests=min(n, 20 * c), concurrency=c)
    return await drive(port, pay[kind], requests=n, concurrency=c, max_seconds=limit, pid=pid)


def measure(
    targets: dict[str, tuple[int, dict[str, bytes], int | None]], args: argparse.Namespace
) -> dict[tuple[str, str], Figures]:
    """Run every phase ``args.reps`` times, the targets in a rotating order each time."""
    figures: dict[tuple[str, str], Figures] = {}
    names = list(targets)
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for kind in ("json", "sse"):
            c1 = {}
            for name in order:
                n = args.litellm_n1 if name == "litellm" else args.n1
                c1[name] = asyncio.run(phase(targets[name], kind, n, 1, args.max_seconds))
            base = c1["direct"]
            for name in order:
                if name == "direct":
                    continue
                f = figures.setdefault((kind, name), Figures())
                run = c1[name]
                f.added_p50.append(run.pct(0.5) - base.pct(0.5))
                f.added_p99.append(run.pct(0.99) - base.pct(0.99))
                f.added_ttfb.append(run.pct(0.5, True) - base.pct(0.5, True))
                n = args.litellm_n32 if name == "litellm" else args.n32
                run = asyncio.run(phase(targets[name], kind, n, 32, args.max_seconds))
                f.rps.append(run.rps)
                f.cpu_ms.append(run.cpu_ms_per_request)
                f.errors += run.errors + c1[name].errors
        load = os.getloadavg()[0]
        print(f"rep {rep + 1}/{args.reps} done (load average {load:.1f})", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n1", type=int, default=1000, help="requests per rep, concurrency 1")
    parser.add_argument("--n32", type=int, default=4000, help="requests per rep, concurrency 32")
    parser.add_argument("--litellm-n1", type=int, default=300)
    parser.add_argument("--litellm-n32", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3, help="rounds, the targets interleaved")
    parser.add_argument("--litellm", help="path of the litellm executable")
    parser.add_argument(
        "--litellm-version",
        default=LITELLM_VERSION,
        help=f"the LiteLLM to compare with (installed in its own venv; {LITELLM_VERSION})",
    )
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time limit per phase")
    args = parser.parse_args()

    up_port, proxy_port, lite_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    try:
        upstream = start_upstream(up_port)
        procs.append(upstream)
        policy = tmp / "policy.yaml"
        policy.write_text(POLICY.format(port=up_port), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        proxy = start(
            [
                sys.executable,
                "-c",
                "from tiered_router.cli import main; main()",
                "serve",
                str(policy),
                "--port",
                str(proxy_port),
                "--log-level",
                "warning",
            ],
            env=env,
        )
        procs.append(proxy)
        wait_http(proxy_port, "/healthz")
        targets: dict[str, tuple[int, dict[str, bytes], int | None]] = {
            "direct": (
                up_port,
                payloads(up_port, "/v1/chat/completions", None, "fast-model"),
                upstream.pid,
            ),
            "tiered-router": (
                proxy_port,
                payloads(proxy_port, "/v1/chat/completions", "bench-client-key", "auto"),
                proxy.pid,
            ),
        }
        litellm = None
        if not args.no_litellm:
            litellm = find_litellm(args.litellm, args.litellm_version) or install_litellm(
                args.litellm_version
            )
        lite_version = None
        if litellm is not None:
            lite_version = litellm_version(litellm)
            print(f"LiteLLM: litellm {lite_version} ({litellm})")
            config = tmp / "litellm.yaml"
            config.write_text(LITELLM_CONFIG.format(port=up_port), encoding="utf-8")
            lite = start(
                [
                    litellm,
                    "--config",
                    str(config),
                    "--port",
                    str(lite_port),
                    "--host",
                    "127.0.0.1",
                    "--num_workers",
                    "1",
                ],
                env={**os.environ, "LITELLM_LOG": "ERROR"},
            )
            procs.append(lite)
            wait_http(lite_port, "/health/liveliness", timeout_s=180)
            targets["litellm"] = (
                lite_port,
                payloads(lite_port, "/v1/chat/completions", "sk-bench-client-key", "auto"),
                lite.pid,
            )
        load = os.getloadavg()[0]
        print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, load {load:.1f}")
        figures = measure(targets, args)
        table(figures, f"LiteLLM {lite_version}" if lite_version is not None else None)
    finally:
        for proc in reversed(procs):
            if proc.stdin is not None:
                proc.stdin.close()
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
