"""Benchmark the proxy against a direct call and against LiteLLM's proxy, same upstream.

Everything runs on 127.0.0.1, each server in its own process:

- upstream: :class:`tiered_router.testing.ScriptedServer` (answers ``ok`` at once);
- ``tiered-router serve`` (one worker) in front of it, policy with two tiers on it;
- LiteLLM's proxy (``litellm --config``): ``--litellm PATH``, ``$LITELLM`` or the venv
  :data:`LITELLM_VENV`; when none has it (or that venv holds another version), the script
  installs ``litellm[proxy]==``:data:`LITELLM_VERSION` from PyPI into that venv itself (a few
  minutes, once), so anyone can rerun the comparison. The LiteLLM version compared with is
  printed at the start and in the summary.

Measured, for JSON and for SSE (``stream: true``):

1. concurrency 1: latency p50 / p99 of direct, proxy and LiteLLM calls, and the latency each
   proxy adds over the direct call (for SSE also the time to the first body byte);
2. concurrency 32: requests per second and the server process's CPU time per request.

The load generator is a lean keep-alive HTTP/1.1 client on asyncio streams (an httpx-based
one spends as much CPU per request as the proxy, and would be the bottleneck). Request
counts and a time limit per phase bound the run. Figures are printed, never asserted.

The summary at the end prints what the proxy adds at concurrency 1 (p50 / p99 over the
direct call), and its requests per second and CPU per request at concurrency 32 against
LiteLLM's. The proxy's upstream calls go over its one async transport (aiohttp's, see
``tiered_router._http``); ``bench_http.py`` measures that transport alone.

Run:

    PYTHONPATH=. python benchmarks/bench_proxy.py [--n1 2000] [--n32 6000] [--no-litellm]
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

    cpu0 = process_cpu_s(pid) if pid else 0.0
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.wall_s = time.perf_counter() - started
    run.cpu_s = (process_cpu_s(pid) - cpu0) if pid else 0.0
    return run


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live child processes."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
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
"""The LiteLLM the script installs: the newest whose proxy installs from PyPI with
``litellm[proxy]`` (1.110 moved the proxy into a separate ``litellm-proxy`` package)."""

LITELLM_VENV = Path(tempfile.gettempdir()) / "tiered-router-litellm"
"""Where the script installs LiteLLM when it finds none."""


def find_litellm(explicit: str | None) -> str | None:
    """Return a ``litellm`` executable: the given one, ``$LITELLM``, or LITELLM_VENV's.

    The script's own venv counts only when it holds :data:`LITELLM_VERSION`.
    """
    for candidate in (explicit, os.environ.get("LITELLM")):
        if candidate and Path(candidate).exists():
            return candidate
    own = LITELLM_VENV / "bin" / "litellm"
    if own.exists() and litellm_version(str(own)) == LITELLM_VERSION:
        return str(own)
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


def install_litellm() -> str:
    """Install ``litellm[proxy]`` (LITELLM_VERSION) into LITELLM_VENV; return its executable."""
    print(f"LiteLLM: installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} (once)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(LITELLM_VENV)], check=True)
    pip = str(LITELLM_VENV / "bin" / "pip")
    subprocess.run([pip, "install", "--quiet", f"litellm[proxy]=={LITELLM_VERSION}"], check=True)
    return str(LITELLM_VENV / "bin" / "litellm")


def payloads(port: int, path: str, key: str | None, model: str) -> dict[str, bytes]:
    body = {"model": model, "messages": MESSAGES}
    stream = {**body, "stream": True}
    return {
        "json": request_bytes(path, body, port, key),
        "sse": request_bytes(path, stream, port, key),
    }


def row(name: str, run: Run, base: Run | None, sse: bool) -> str:
    p50, p99 = run.pct(0.5), run.pct(0.99)
    text = f"  {name:<13} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"
    if sse:
        text += f"  ttfb p50 {run.pct(0.5, True):7.2f} ms"
    if base is not None:
        text += f"  | added p50 {p50 - base.pct(0.5):+6.2f} ms  p99 {p99 - base.pct(0.99):+6.2f} ms"
        if sse:
            text += f"  ttfb p50 {run.pct(0.5, True) - base.pct(0.5, True):+6.2f} ms"
    if run.errors:
        text += f"  ({run.errors} errors)"
    return text


def summary(
    c1: dict[tuple[str, str], Run], c32: dict[tuple[str, str], Run], lite_version: str | None
) -> None:
    """Print the figures the proxy's targets are stated in."""
    print(
        "\nSUMMARY (targets: added p50 <= 1 ms, p99 <= 3 ms at C=1; at C=32 >= 25x LiteLLM's"
        " req/s and >= 30x less CPU per request)"
    )
    if lite_version is not None:
        print(f"  compared with LiteLLM {lite_version}")
    for kind in ("json", "sse"):
        ours, direct = c1.get((kind, "tiered-router")), c1.get((kind, "direct"))
        if ours is None or direct is None:
            continue
        line = (
            f"  {kind.upper():<4} C=1 added p50 {ours.pct(0.5) - direct.pct(0.5):+.2f} ms"
            f"  p99 {ours.pct(0.99) - direct.pct(0.99):+.2f} ms"
        )
        mine, lite = c32.get((kind, "tiered-router")), c32.get((kind, "litellm"))
        if mine is not None:
            line += f" | C=32 {mine.rps:.0f} req/s"
        if mine is not None and lite is not None and lite.rps:
            line += f" vs LiteLLM {lite.rps:.0f} req/s = {mine.rps / lite.rps:.1f}x"
            if mine.cpu_s and lite.cpu_s:
                ratio = lite.cpu_ms_per_request / mine.cpu_ms_per_request
                line += (
                    f" | CPU {mine.cpu_ms_per_request:.2f} vs {lite.cpu_ms_per_request:.2f}"
                    f" ms/req = {ratio:.1f}x less"
                )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n1", type=int, default=2000, help="requests per target, concurrency 1")
    parser.add_argument("--n32", type=int, default=6000, help="requests per target, concurrency 32")
    parser.add_argument("--litellm-n1", type=int, default=500)
    parser.add_argument("--litellm-n32", type=int, default=1500)
    parser.add_argument("--litellm", help="path of the litellm executable")
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
            litellm = find_litellm(args.litellm) or install_litellm()
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
        print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
        c1: dict[tuple[str, str], Run] = {}
        c32: dict[tuple[str, str], Run] = {}
        for kind in ("json", "sse"):
            sse = kind == "sse"
            print(f"\n{kind.upper()}  concurrency 1")
            base: Run | None = None
            for name, (port, pay, _pid) in targets.items():
                n = args.litellm_n1 if name == "litellm" else args.n1
                asyncio.run(drive(port, pay[kind], requests=min(50, n), concurrency=1))  # warm up
                run = asyncio.run(
                    drive(port, pay[kind], requests=n, concurrency=1, max_seconds=args.max_seconds)
                )
                print(row(name, run, base, sse))
                base = base or run
                c1[kind, name] = run
            print(f"{kind.upper()}  concurrency 32")
            for name, (port, pay, pid) in targets.items():
                if name == "direct":
                    continue
                n = args.litellm_n32 if name == "litellm" else args.n32
                run = asyncio.run(
                    drive(
                        port,
                        pay[kind],
                        requests=n,
                        concurrency=32,
                        max_seconds=args.max_seconds,
                        pid=pid,
                    )
                )
                c32[kind, name] = run
                print(
                    f"  {name:<13} {run.rps:7.0f} req/s  cpu {run.cpu_ms_per_request:6.2f} ms/req"
                    f"  p50 {run.pct(0.5):7.2f} ms  p99 {run.pct(0.99):7.2f} ms"
                    + (f"  ({run.errors} errors)" if run.errors else "")
                )
        summary(c1, c32, lite_version)
    finally:
        for proc in reversed(procs):
            if proc.stdin is not None:
                proc.stdin.close()
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
