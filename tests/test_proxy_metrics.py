"""The proxy's /metrics: every response counted, every routed request timed, dropped traces,
and every metric docs/proxy.md names present in a real scrape (one and two workers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import CLIENT_KEY, ProxyProcess, parse_metrics  # noqa: E402
from routerkit import make_policy  # noqa: E402
from test_server import running  # noqa: E402

from tiered_router import _http  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402
from tiered_router.trace import Trace  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "proxy.md"
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


def _chat(http: _http.Client, url: str, **body: Any) -> _http.Response:
    payload = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}], **body}
    return http.post(f"{url}/v1/chat/completions", json=payload, headers=AUTH)


def _scrape(http: _http.Client, url: str) -> dict[str, float]:
    response = http.get(f"{url}/metrics", headers=AUTH)
    assert response.status_code == 200
    return parse_metrics(response.text)


def _responses(path: str, code: int) -> str:
    return f'tiered_router_http_responses_total{{code="{code}",path="{path}"}}'


def _app(server: ScriptedServer, **kwargs: Any) -> Any:
    policy = make_policy(server, retries=(0, 0), server={"api_keys": [CLIENT_KEY]})
    return create_app(policy, env={}, **kwargs)


def test_every_response_is_counted(server: ScriptedServer) -> None:
    server.default = Reply.text("hello")
    with running(_app(server)) as url, _http.build_client() as http:
        assert http.get(f"{url}/v1/models", headers=AUTH).status_code == 200
        assert http.get(f"{url}/v1/models").status_code == 401
        assert http.get(f"{url}/healthz").status_code == 200
        assert http.get(f"{url}/readyz").status_code == 200
        assert http.get(f"{url}/nowhere").status_code == 404
        assert http.get(f"{url}/v1/chat/completions").status_code == 405  # wrong method
        assert _chat(http, url).status_code == 200
        http.get(f"{url}/metrics", headers=AUTH)
        values = _scrape(http, url)
    assert values[_responses("/v1/models", 200)] == 1
    assert values[_responses("/v1/models", 401)] == 1
    assert values[_responses("/healthz", 200)] == 1
    assert values[_responses("/readyz", 200)] == 1
    assert values[_responses("other", 404)] == 1
    assert values[_responses("/v1/chat/completions", 405)] == 1
    assert values[_responses("/v1/chat/completions", 200)] == 1
    assert values[_responses("/metrics", 200)] == 1  # the scrape before this one


def test_the_overhead_histogram_counts_every_routed_request(server: ScriptedServer) -> None:
    server.default = Reply.text("hello")
    with running(_app(server)) as url, _http.build_client() as http:
        assert _chat(http, url).status_code == 200
        assert _chat(http, url, stream=True).status_code == 200
        server.script([Reply.status(500)], model="fast-model")
        server.script([Reply.status(500)], model="frontier-model")
        assert _chat(http, url).status_code == 502
        assert _chat(http, url, model="no-such-model").status_code == 404  # never routed
        values = _scrape(http, url)
    assert values["tiered_router_overhead_seconds_count"] == 3
    assert values['tiered_router_overhead_seconds_bucket{le="+Inf"}'] == 3


@pytest.mark.parametrize("clients", [32, 64])
def test_counts_of_concurrent_requests_add_up_exactly(server: ScriptedServer, clients: int) -> None:
    # one process counts in plain numbers under one lock; every upstream call ends its
    # waits by the call's deadline on its own pooled connection
    from concurrent.futures import ThreadPoolExecutor

    server.default = Reply.text("hello")
    with running(_app(server)) as url, _http.build_client() as http:
        with ThreadPoolExecutor(clients) as pool:
            codes = list(pool.map(lambda _: _chat(http, url).status_code, range(clients * 2)))
        values = _scrape(http, url)
    assert codes == [200] * (clients * 2)
    assert values['tiered_router_requests_total{escalated="false",tier="fast"}'] == clients * 2
    assert values[_responses("/v1/chat/completions", 200)] == clients * 2
    assert values["tiered_router_overhead_seconds_count"] == clients * 2
    assert values['tiered_router_turn_latency_seconds_count{tier="fast"}'] == clients * 2
    assert values["tiered_router_in_flight"] == 0
    tokens = values['tiered_router_tokens_total{backend="fast",direction="input"}']
    assert tokens > 0 and tokens % (clients * 2) == 0  # the same count from every request
    assert len(server.requests) == clients * 2


class _LossySink:
    """A trace sink that drops every other trace and counts what it dropped."""

    def __init__(self) -> None:
        self.kept: list[Trace] = []
        self.seen = 0

    @property
    def dropped(self) -> int:
        return self.seen - len(self.kept)

    def emit(self, trace: Trace) -> None:
        self.seen += 1
        if self.seen % 2:
            self.kept.append(trace)


def test_traces_dropped_by_sinks_are_counted(server: ScriptedServer) -> None:
    server.default = Reply.text("hello")
    sink = _LossySink()
    with running(_app(server, sinks=[sink])) as url, _http.build_client() as http:
        assert _scrape(http, url)["tiered_router_traces_dropped_total"] == 0
        for _ in range(4):
            assert _chat(http, url).status_code == 200
        values = _scrape(http, url)
    assert sink.dropped == 2
    assert values["tiered_router_traces_dropped_total"] == 2


def _documented() -> set[str]:
    section = DOCS.read_text(encoding="utf-8").split("## Metrics\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(tiered_router_[a-z_]+)`", section, flags=re.MULTILINE))


@pytest.mark.parametrize("workers", [1, 2])
def test_every_documented_metric_is_in_a_real_scrape(
    server: ScriptedServer, tmp_path: Path, workers: int
) -> None:
    documented = _documented()
    assert len(documented) >= 15
    server.default = Reply.text("hello")
    proxy = ProxyProcess(make_policy(server, retries=(0, 0)), tmp_path, workers=workers)
    proxy.start()
    try:
        with _http.build_client() as http:
            assert proxy.chat(http).status_code == 200
            server.script([Reply.empty()], model="fast-model")  # gate failure, escalation
            assert proxy.chat(http).status_code == 200
            server.script([Reply.status(500)], model="fast-model")  # backend error
            assert proxy.chat(http).status_code == 200
            text = http.get(f"{proxy.url}/metrics", headers=AUTH).text
    finally:
        proxy.stop()
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    exposed = {n for n in names if re.fullmatch(r"tiered_router_[a-z_]+", n)}
    exposed = {n for n in exposed if not n.endswith(("_bucket", "_count", "_sum"))}
    if workers == 1:
        documented.discard("tiered_router_workers")  # documented for --workers > 1 only
    assert documented - names == set()
    # and nothing undocumented: counters appear as <name> and <name>_total
    assert {n for n in exposed if f"{n}_total" not in names} - documented == set()
