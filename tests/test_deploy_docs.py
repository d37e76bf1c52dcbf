"""docs/deploy.md and deploy/: every policy loads, the compose setup hangs together."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tiered_router import Router, load_policy
from tiered_router.exceptions import PolicyError

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
ENV = {
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "INCEPTION_API_KEY": "sk-inception-test",
    "OPENAI_API_KEY": "sk-openai-test",
}
BASE: dict[str, Any] = {
    "version": 1,
    "backends": {"fast": {"model": "f", "kind": "diffusion"}, "frontier": {"model": "b"}},
    "tiers": {"fast": "fast", "frontier": "frontier"},
}


def yaml_blocks(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def test_the_state_section_of_the_page_loads_and_builds_a_redis_store() -> None:
    pytest.importorskip("redis")
    (block,) = yaml_blocks("deploy.md")
    policy = load_policy({**BASE, **yaml.safe_load(block)}, env=ENV)
    assert policy.state.type == "redis"
    assert "6379" not in repr(policy.state)  # the URL may hold a password: never shown
    router = Router(policy)
    assert type(router.state).__name__ == "SafeStateStore"
    assert (
        repr(router.state)
        == "SafeStateStore(RedisStateStore('127.0.0.1:6379', prefix='tiered_router'))"
    )
    router.close()


def test_redis_state_needs_a_url() -> None:
    with pytest.raises(PolicyError, match="state.url"):
        load_policy({**BASE, "state": {"type": "redis"}})
    with pytest.raises(PolicyError, match="state.type"):
        load_policy({**BASE, "state": {"type": "memcached"}})


def test_the_example_policy_loads() -> None:
    policy = load_policy(DEPLOY / "policy.yaml", env=ENV)
    assert policy.state.type == "redis"
    assert policy.state.url is not None and policy.state.url.get_secret_value() == ENV["REDIS_URL"]
    assert policy.server.host == "0.0.0.0"


def test_the_compose_file_wires_router_redis_collector_and_balancer() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"router", "lb", "redis", "otel-collector", "prometheus", "grafana"}
    router = services["router"]
    command = " ".join(router["command"].split())
    assert "--otel" in command and "/etc/tiered-router/policy.yaml" in command
    assert "/src[cli,server,redis,otel]" in command  # the checkout, not a guessed index name
    assert router["environment"]["REDIS_URL"].startswith("redis://redis:")
    assert router["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert "/readyz" in " ".join(router["healthcheck"]["test"])
    for mount in (
        *router["volumes"],
        *services["lb"]["volumes"],
        *services["otel-collector"]["volumes"],
        *services["prometheus"]["volumes"],
        *services["grafana"]["volumes"],
    ):
        assert (DEPLOY / mount.split(":")[0]).exists(), mount
    collector = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))
    assert set(collector["service"]["pipelines"]) == {"traces", "metrics"}
    assert "router:8000" in (DEPLOY / "nginx.conf").read_text(encoding="utf-8")


def test_prometheus_scrapes_the_replicas_and_grafana_gets_the_dashboard() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))["services"]
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text("utf-8"))
    (job,) = prometheus["scrape_configs"]
    assert job["dns_sd_configs"] == [{"names": ["router"], "type": "A", "port": 8000}]
    # the key file prometheus.yml reads is the one the container writes at start
    key_file = job["authorization"]["credentials_file"]
    assert f"> {key_file}" in services["prometheus"]["command"][0]
    mounted = {m.split(":")[1] for m in services["prometheus"]["volumes"]}
    assert set(prometheus["rule_files"]) <= mounted
    grafana = {m.split(":")[1]: m.split(":")[0] for m in services["grafana"]["volumes"]}
    provider = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/tiered-router.yaml").read_text("utf-8")
    )
    folder = provider["providers"][0]["options"]["path"]
    assert (DEPLOY / grafana[folder] / "tiered-router.json").is_file()
    source = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text("utf-8")
    )["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    dashboard = (DEPLOY / grafana[folder] / "tiered-router.json").read_text(encoding="utf-8")
    assert f'"uid": "{source["uid"]}"' in dashboard
