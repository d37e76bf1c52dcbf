"""The first call's cold start: what a fresh process pays before its first routed answer.

    python benchmarks/bench_cold_start.py [--runs 7]

Each run is a fresh interpreter talking to a scripted server that runs in another process
(so the server's own start is not counted). It times, in order: ``from tiered_router import
Router, Turn``; building the Router from a two-backend policy; the first ``complete`` (which
imports the openai SDK and httpx2, builds the backend's client and opens the connection);
and a second ``complete`` on the warm router. Printed: median and range per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
from tiered_router import Router, Turn
t1 = time.perf_counter()
url = sys.argv[1]
backend = {"base_url": url, "api_key": "k", "max_retries": 0, "price": {"output_per_mtok": 1}}
router = Router({
    "version": 1,
    "backends": {"fast": {**backend, "model": "fast-model"}, "big": {**backend, "model": "big"}},
    "tiers": {"fast": "fast", "frontier": "big"},
})
t2 = time.perf_counter()
turn = Turn([{"role": "user", "content": "hi"}])
router.complete(turn)
t3 = time.perf_counter()
router.complete(turn)
t4 = time.perf_counter()
router.close()
phases = {"import": t1 - t0, "router": t2 - t1, "first_call": t3 - t2, "second_call": t4 - t3}
print(json.dumps(phases))
"""

_SERVER = r"""
import sys, time
from tiered_router.testing import ScriptedServer
with ScriptedServer() as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        runs = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-c", _PROBE, url],
                env=ENV,
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(out.stdout))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
    print(f"{args.runs} fresh processes, scripted server on 127.0.0.1 (ms: median [min-max])")
    for phase in ("import", "router", "first_call", "second_call"):
        values = sorted(r[phase] * 1000 for r in runs)
        median = statistics.median(values)
        print(f"  {phase:<12} {median:8.1f}  [{values[0]:.1f}-{values[-1]:.1f}]")


if __name__ == "__main__":
    main()
