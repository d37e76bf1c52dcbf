"""deploy/'s Grafana dashboard and Prometheus alert rules: every metric they name is exported by
a real ``tiered-router serve --stand-in`` after traffic with escalations, a panel and a failing
backend; the rules pass ``promtool`` where it is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from proxyproc import CLIENT_KEY, ProxyProcess  # noqa: E402

from tiered_router import _http  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "tiered-router.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}

MONITOR_METRICS = frozenset(
    {
        "tiered_router_monitor_matched_share",
        "tiered_router_monitor_lower_bound",
        "tiered_router_monitor_target",
        "tiered_router_monitor_enforcing",
        "tiered_router_monitor_compared_total",
        "tiered_router_monitor_matched_total",
        "tiered_router_monitor_shadow_calls_total",
    }
)
"""The quality monitor's metrics (labels ``kind``; shadow calls also ``outcome``)."""


_NAME = re.compile(r"\btiered_router_[a-z_]+\b")
_GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}


def dashboard_exprs() -> list[str]:
    """Every PromQL query of the dashboard's panels."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in board["panels"] for t in p.get("targets", ())]


def alert_exprs() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def named(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in _NAME.findall(expr)}


def _data_file(directory: Path) -> Path:
    """A recorded dataset with one row, so the ``recorded`` drafter fails every live turn."""
    header = {"format": "tiered-router-eval", "version": 1, "name": "one"}
    row = {
        "id": "r0",
        "messages": [{"role": "user", "content": "a turn nobody sends"}],
        "outcomes": {"recorded-model": {"quality": 1.0, "text": "ok"}},
    }
    path = directory / "one.jsonl"
    path.write_text(f"{json.dumps(header)}\n{json.dumps(row)}\n", encoding="utf-8")
    return path


def _policy(directory: Path) -> dict[str, Any]:
    # `--stand-in` points the OpenAI-compatible backends at its scripted upstream; the
    # replay backend is left alone and fails (no recorded row): backend errors, an open breaker
    openai = {"base_url": "https://api.openai.com/v1", "api_key": "${NO_SUCH_KEY:-unused}"}
    policy: dict[str, Any] = {
        "version": 1,
        "backends": {
            "fast": {
                **openai,
                "model": "fast-a",
                "kind": "diffusion",
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
            },
            "fast-b": {
                **openai,
                "model": "fast-b",
                "kind": "diffusion",
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
            },
            "recorded": {
                "type": "replay",
                "model": "recorded-model",
                "kind": "diffusion",
                "options": {"data": str(_data_file(directory))},
            },
            "frontier": {
                **openai,
                "model": "frontier-model",
                "price": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"type": "heuristic", "threshold": 0.99},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
        "gate": {"checks": ["non_empty", "json_schema", "tool_arguments"]},
        "drafts": {
            "k": 3,
            "backends": ["fast", "fast-b", "recorded"],
            "min_agreement": 0.6,
            "when": ["tools"],
            "early": False,
        },
        "resilience": {
            "retry": {"base_s": 0, "max_s": 0},
            "breaker": {"consecutive_failures": 2, "cooldown_s": 600},
        },
    }
    policy["monitor"] = {"shadow_rate": 1.0}  # every accepted fast answer is compared
    return policy


_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
_TOO_SHORT = {  # the stand-in writes "example": too short for both tiers, so the gate fails
    "type": "json_schema",
    "json_schema": {
        "name": "code",
        "schema": {
            "type": "object",
            "properties": {"code": {"type": "string", "minLength": 12}},
            "required": ["code"],
        },
    },
}


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """``{sample name with labels: value}`` of /metrics after varied traffic."""
    from prometheus_client.parser import text_string_to_metric_families

    directory = tmp_path_factory.mktemp("dashboard")
    proxy = ProxyProcess(_policy(directory), directory, args=("--stand-in",))
    proxy.start()
    try:
        with _http.build_client() as http:
            assert proxy.chat(http, "Say hi.").status_code == 200
            final = proxy.chat(http, "Sum it up.", tiered_router={"final": True})
            assert final.headers["x-tiered-router-tier"] == "frontier"
            failed = proxy.chat(http, "Give a code.", response_format=_TOO_SHORT)
            assert failed.status_code == 200
            assert failed.headers["x-tiered-router-escalated"] == "true"
            for _ in range(3):  # panels: two drafts agree, the recorded one fails
                tools = proxy.chat(http, "Weather in Paris?", tools=[_TOOL])
                assert tools.status_code == 200, tools.text
            response = http.get(f"{proxy.url}/metrics", headers=AUTH)
            assert response.status_code == 200
    finally:
        proxy.stop()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def _exported(scrape: dict[str, float]) -> set[str]:
    return {key.split("{", 1)[0] for key in scrape}


def test_dashboard_and_alerts_name_the_metrics_they_promise() -> None:
    board, alerts = named(dashboard_exprs()), named(alert_exprs())
    for name in (
        "tiered_router_requests_total",
        "tiered_router_turn_latency_seconds_bucket",
        "tiered_router_escalations_total",
        "tiered_router_cost_usd_total",
        "tiered_router_cost_all_frontier_usd_total",
        "tiered_router_breaker_state",
        "tiered_router_panels_total",
    ):
        assert name in board, name
    assert board >= MONITOR_METRICS  # every monitor metric has a panel
    assert {"tiered_router_breaker_state", "tiered_router_monitor_lower_bound"} <= alerts


def test_every_metric_the_dashboard_and_alerts_name_is_exported(
    scrape: dict[str, float],
) -> None:
    exported = _exported(scrape)
    wanted = named(dashboard_exprs()) | named(alert_exprs())
    assert MONITOR_METRICS <= wanted  # the monitor is on the dashboard or in an alert
    assert wanted - exported == set()
    # the traffic reached what the panels show, not only empty series
    assert scrape['tiered_router_escalations_total{reason="gate_failed"}'] >= 1
    assert scrape['tiered_router_panels_total{result="agreed"}'] == 3
    assert scrape['tiered_router_breaker_state{backend="recorded",state="open"}'] == 1
    assert scrape['tiered_router_breaker_state{backend="fast",state="closed"}'] == 1
    errors = scrape['tiered_router_backend_errors_total{backend="recorded",error="BackendError"}']
    assert errors == 2  # then its breaker refused the third draft
    spent = sum(v for k, v in scrape.items() if k.startswith("tiered_router_cost_usd_total"))
    all_frontier = scrape["tiered_router_cost_all_frontier_usd_total{}"]
    assert 0 < spent < all_frontier  # fast answers were cheaper than the frontier's


def _balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    pairs = {")": "(", "}": "{", "]": "["}
    text = re.sub(r'"[^"]*"', '""', expr)
    for char in text:
        if char in depth:
            depth[char] += 1
        elif char in pairs:
            depth[pairs[char]] -= 1
            if depth[pairs[char]] < 0:
                return False
    return not any(depth.values()) and text.count('"') % 2 == 0


def test_every_query_is_well_formed() -> None:
    exprs = dashboard_exprs() + alert_exprs()
    assert [e for e in exprs if not _balanced(e)] == []
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert rule["alert"].startswith("TieredRouter") and rule["annotations"]["summary"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}


def _promtool() -> str:
    found = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not found:
        pytest.skip("promtool not installed (Debian package prometheus; or set $PROMTOOL)")
    return found


def test_alert_rules_and_dashboard_queries_pass_promtool(tmp_path: Path) -> None:
    promtool = _promtool()
    done = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the dashboard's queries, with Grafana's variables filled in, as recording rules
    records = []
    for i, expr in enumerate(dashboard_exprs()):
        for var, value in _GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        records.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": records}]}), "utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # and the scrape configuration, its container paths pointed at this checkout
    config = (DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8")
    key = tmp_path / "client-key"
    key.write_text("k", encoding="utf-8")
    config = config.replace("/etc/prometheus/alerts.yml", str(ALERTS))
    config = config.replace("/prometheus/client-key", str(key))
    (tmp_path / "prometheus.yml").write_text(config, encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
