"""``serve --workers N``: /metrics adds up every worker's numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import ProxyProcess, parse_metrics  # noqa: E402
from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server._metrics import MULTIPROC_DIR_ENV, worker_metrics  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

REQUESTS = 60


def _wait_for(proxy: ProxyProcess, http: _http.Client, name: str, want: float) -> dict[str, float]:
    # other workers write their numbers within 50 ms; poll rather than sleep a fixed time
    deadline = time.monotonic() + 10
    while True:
        values = proxy.metrics(http)
        if values.get(name, 0.0) >= want or time.monotonic() > deadline:
            return values
        time.sleep(0.05)


def test_metrics_add_up_across_two_workers(server: ScriptedServer, tmp_path: Path) -> None:
    server.default = Reply.text("hello")
    proxy = ProxyProcess(make_policy(server), tmp_path, workers=2).start()
    try:
        with _http.build_client() as http:

            def one(i: int) -> tuple[int, str]:
                response = proxy.chat(http, f"Say hi number {i}.")
                return response.status_code, response.headers.get("x-tiered-router-tier", "")

            with ThreadPoolExecutor(8) as pool:
                seen = list(pool.map(one, range(REQUESTS)))
            ok = [tier for status, tier in seen if status == 200]
            key = 'tiered_router_requests_total{escalated="false",tier="fast"}'
            values = _wait_for(proxy, http, key, len(ok))
            # a second scrape may land on the other worker: it must say the same
            again = proxy.metrics(http)
    finally:
        proxy.stop()
    assert len(ok) == REQUESTS and set(ok) == {"fast"}
    assert values[key] == REQUESTS
    assert again[key] == REQUESTS
    code = 'tiered_router_http_responses_total{code="200",path="/v1/chat/completions"}'
    assert values[code] == REQUESTS
    assert values["tiered_router_workers"] == 2
    assert len(server.requests) == REQUESTS


_DEAD_WORKER = """
import multiprocessing, sys
from tiered_router.server._metrics import worker_metrics

def worker():
    metrics = worker_metrics()
    metrics.response("/v1/chat/completions", 200)
    metrics.cost.add(("fast",), 0.1)
    metrics.in_flight.add((), 1.0)  # still "in flight" when it dies

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=worker)
    child.start()
    child.join()
    metrics = worker_metrics()
    assert metrics.multiprocess_dir is not None
    metrics.response("/v1/chat/completions", 200)
    metrics.cost.add(("fast",), 0.2)
    sys.stdout.write(metrics.render())
"""


def test_a_dead_workers_counts_stay_and_its_gauges_go(tmp_path: Path) -> None:
    # prometheus_client picks its multiprocess mode at import: run in a fresh interpreter
    script = tmp_path / "dead_worker.py"
    script.write_text(_DEAD_WORKER, encoding="utf-8")
    env = {**os.environ, MULTIPROC_DIR_ENV: str(tmp_path / "m")}
    (tmp_path / "m").mkdir()
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    values = parse_metrics(done.stdout)
    assert values['tiered_router_http_responses_total{code="200",path="/v1/chat/completions"}'] == 2
    assert (
        values['tiered_router_cost_usd_total{backend="fast"}'] == 0.3
    )  # rounded, not 0.30000000000000004
    assert values["tiered_router_in_flight"] == 0
    assert values["tiered_router_workers"] == 1
    assert "0.30000000000000004" not in done.stdout


def test_one_process_keeps_its_numbers_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MULTIPROC_DIR_ENV, raising=False)
    metrics = worker_metrics()
    assert metrics.multiprocess_dir is None
    assert "tiered_router_workers" not in metrics.render()


def test_a_directory_set_after_prometheus_client_was_imported_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(MULTIPROC_DIR_ENV, str(tmp_path))
    metrics = worker_metrics()  # this test process imported prometheus_client long ago
    assert metrics.multiprocess_dir is None
    assert "set after prometheus_client was imported" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_serve_owns_and_removes_its_metrics_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered_router.server import _metrics_dir

    monkeypatch.delenv(MULTIPROC_DIR_ENV, raising=False)
    with _metrics_dir():
        directory = Path(os.environ[MULTIPROC_DIR_ENV])
        assert directory.is_dir()
    assert MULTIPROC_DIR_ENV not in os.environ
    assert not directory.exists()


def test_readyz_is_up_between_startup_and_shutdown(server: ScriptedServer) -> None:
    from test_server import running

    from tiered_router.server import create_app

    app = create_app(make_policy(server), env={})
    with running(app) as url, _http.build_client() as http:
        response = http.get(f"{url}/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "ready"}
    assert app.state.proxy.ready is False  # shutdown flips it back


def test_worker_protocol_is_importable_by_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn pickles its settings for worker processes: the protocol goes as an import path
    from uvicorn.importer import import_from_string
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from tiered_router.server import _protocol

    monkeypatch.setenv(_protocol.HEADER_TIMEOUT_ENV, "2.5")
    cls = import_from_string(_protocol.PROTOCOL_PATH)
    assert issubclass(cls, HttpToolsProtocol)
    assert cls.header_timeout_s is None  # so each worker reads its limit from the environment
