"""The quality monitor's gauges on /metrics: defined with ``serve --workers N``, silent before a
verdict.

Each worker sets its gauges from every comparison it records; the multiprocess modes export
the worst live worker's matched share and bound (``livemin``) and whether any worker has a
verdict or is enforcing (``livemax``). A worker, or a kind, with no verdict exports no bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import ProxyProcess, parse_metrics  # noqa: E402
from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server._metrics import MULTIPROC_DIR_ENV  # noqa: E402
from tiered_router.state import wilson_lower  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
Z95 = 1.6448536269514722

_WORKERS = """
import multiprocessing, sys
from tiered_router.server._metrics import worker_metrics

def worker(info, ready, done):
    metrics = worker_metrics()
    metrics.watch_monitor(["tools", "json"]).count(info)
    ready.set()
    done.wait(30)  # alive while the parent scrapes: live* gauges are the live workers'

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Event()
    infos = [
        {"kind": "tools", "outcome": "matched", "compared": 100, "matched": 99,
         "lower_bound": 0.95, "target": 0.9, "state": "ok", "judged": True},
        {"kind": "tools", "outcome": "mismatched", "compared": 100, "matched": 80,
         "lower_bound": 0.73, "target": 0.9, "state": "enforcing", "judged": True},
        {"kind": "json", "outcome": "matched", "compared": 2, "matched": 2,
         "lower_bound": 0.42, "target": 0.9, "state": "ok", "judged": False},
    ]
    children = []
    for info in infos:
        ready = ctx.Event()
        child = ctx.Process(target=worker, args=(info, ready, done))
        child.start()
        assert ready.wait(30)
        children.append(child)
    metrics = worker_metrics()  # this worker has compared nothing
    metrics.watch_monitor(["tools", "json"])
    sys.stdout.write(metrics.render())
    done.set()
    for child in children:
        child.join()
"""


def test_each_gauge_has_a_defined_value_across_workers(tmp_path: Path) -> None:
    # prometheus_client picks its multiprocess mode at import: run in a fresh interpreter
    script = tmp_path / "workers.py"
    script.write_text(_WORKERS, encoding="utf-8")
    (tmp_path / "m").mkdir()
    env = {**os.environ, MULTIPROC_DIR_ENV: str(tmp_path / "m")}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    values = parse_metrics(done.stdout)
    # the worst worker with a verdict; the worker without one does not drag it to 0
    assert values['tiered_router_monitor_lower_bound{kind="tools"}'] == 0.73
    assert values['tiered_router_monitor_matched_share{kind="tools"}'] == 0.8
    assert values['tiered_router_monitor_enforcing{kind="tools"}'] == 1  # some worker is
    assert values['tiered_router_monitor_judged{kind="tools"}'] == 1
    assert values['tiered_router_monitor_target{kind="tools"}'] == 0.9
    # json: no worker has a verdict, so no bound at all (an alert on it cannot fire)
    assert values['tiered_router_monitor_judged{kind="json"}'] == 0
    assert 'tiered_router_monitor_lower_bound{kind="json"}' not in values
    assert 'tiered_router_monitor_matched_share{kind="json"}' not in values
    calls = 'tiered_router_monitor_shadow_calls_total{kind="tools",outcome="%s"}'
    assert values[calls % "matched"] == 1 and values[calls % "mismatched"] == 1


def test_two_workers_export_the_worst_workers_bound(server: ScriptedServer, tmp_path: Path) -> None:
    # every fast answer matches: each worker's bound is wilson(n, n) over its own n
    # comparisons (in-process state), so the worker with fewer comparisons is the worst
    server.default = Reply.tool_calls([("get_weather", {"city": "Paris"})])
    policy = make_policy(server)
    policy["monitor"] = {"shadow_rate": 1.0, "target": 0.5, "min_compared": 3, "window": 100}
    traces = tmp_path / "traces.jsonl"
    proxy = ProxyProcess(policy, tmp_path, workers=2, args=("--trace-file", str(traces)))
    proxy.start()
    turns = 30
    try:
        with _http.build_client() as http:
            for i in range(turns):
                asked = proxy.chat(http, f"Weather in Paris ({i})?", tools=TOOLS)
                assert asked.status_code == 200, asked.text
            deadline = time.monotonic() + 20
            while True:  # shadow calls run in the background: wait for all of them
                shadows = _shadow_infos(traces)
                if len(shadows) >= turns or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            scrapes = [proxy.metrics(http) for _ in range(8)]  # any worker may answer each
    finally:
        proxy.stop()
    assert len(shadows) == turns
    # each worker's records count 1, 2, ... its n: a count seen twice was reached by both
    seen = Counter(info["compared"] for info in shadows)
    both = sum(1 for n in seen.values() if n == 2)
    fewest = both if both else max(seen)  # all on one worker: the other has no verdict
    want = round(wilson_lower(fewest, fewest, Z95), 6)
    key = 'tiered_router_monitor_lower_bound{kind="tools"}'
    assert {s[key] for s in scrapes} == {want}  # the same value whichever worker answers
    assert all(s['tiered_router_monitor_judged{kind="tools"}'] == 1 for s in scrapes)
    assert all(s['tiered_router_monitor_matched_share{kind="tools"}'] == 1 for s in scrapes)


def _shadow_infos(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            trace = json.loads(line)
        except ValueError:
            continue  # a line still being written
        info = (trace.get("metadata") or {}).get("monitor")
        if info and "compared" in info:
            found.append(info)
    return found
