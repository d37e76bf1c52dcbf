"""``serve --workers N``: /metrics adds up every worker's numbers."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import ProxyProcess  # noqa: E402
from routerkit import make_policy  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server._workers import METRICS_DIR_ENV, SharedMetrics, worker_metrics  # noqa: E402
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
            key = 'tiered_router_requests_total{tier="fast",escalated="false"}'
            values = _wait_for(proxy, http, key, len(ok))
            # a second scrape may land on the other worker: it must say the same
            again = proxy.metrics(http)
    finally:
        proxy.stop()
    assert len(ok) == REQUESTS and set(ok) == {"fast"}
    assert values[key] == REQUESTS
    assert again[key] == REQUESTS
    code = 'tiered_router_http_responses_total{path="/v1/chat/completions",code="200"}'
    assert values[code] == REQUESTS
    assert values["tiered_router_workers"] == 2
    assert len(server.requests) == REQUESTS


def test_shared_metrics_sum_files_and_skip_dead_workers(tmp_path: Path) -> None:
    first = SharedMetrics(tmp_path)
    first.response("/v1/chat/completions", 200)
    first.overhead.observe(0.001)
    first.in_flight = 2
    first.flush()
    # a worker that died: its counts stay, its in-flight gauge does not
    dead = {
        "pid": 2**22 + 12345,
        "counters": {"responses": [[["/v1/chat/completions", "200"], 3]]},
        "histograms": {"overhead": [[[], first.snapshot()["histograms"]["overhead"][0][1]]]},
        "in_flight": 5,
    }
    (tmp_path / "worker-999999999.json").write_text(json.dumps(dead), encoding="utf-8")
    (tmp_path / "worker-1.json").write_text("{torn", encoding="utf-8")
    total, alive = first.totals()
    assert total.responses.values[("/v1/chat/completions", "200")] == 4
    assert total.overhead.series[()][-1] == 2  # two observations
    assert total.in_flight == 2
    assert alive == 1
    text = first.render()
    assert "tiered_router_workers 1\n" in text
    assert 'tiered_router_http_responses_total{path="/v1/chat/completions",code="200"} 4' in text


def test_worker_metrics_follow_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(METRICS_DIR_ENV, raising=False)
    assert type(worker_metrics()).__name__ == "Metrics"
    monkeypatch.setenv(METRICS_DIR_ENV, str(tmp_path / "m"))
    shared = worker_metrics()
    assert isinstance(shared, SharedMetrics)
    assert (tmp_path / "m" / f"worker-{os.getpid()}.json").exists()
    shared.close()


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
