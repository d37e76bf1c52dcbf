"""``Policy.to_yaml()``: the text loads back into the same policy and never holds a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_router import Router, Turn, load_policy
from tiered_router.exceptions import PolicyError
from tiered_router.testing import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    "name", ["policy.yaml", "local_diffusion.yaml", "dlmserve.yaml"], ids=lambda n: n
)
def test_the_examples_round_trip_with_their_references(name: str) -> None:
    env = {"OPENAI_API_KEY": KEY, "INCEPTION_API_KEY": KEY + "-i", "LOCAL_MODEL": "m"}
    policy = load_policy(ROOT / "examples" / name, env=env)
    text = policy.to_yaml()
    assert KEY not in text
    assert load_policy(text, env=env) == policy
    assert load_policy(text, env=env).to_yaml() == text


def test_a_reference_is_written_as_written_and_a_changed_value_as_it_is() -> None:
    text = (
        "version: 1\n"
        "backends:\n"
        "  a: {model: m, base_url: '${URL:-http://127.0.0.1:9/v1}', api_key: '${K}',\n"
        "      headers: {x-team: '${TEAM}'}}\n"
        "tiers: {fast: a, frontier: a}\n"
        "state: {type: redis, url: '${REDIS_URL}'}\n"
        "server: {api_keys: ['${CLIENT_KEY}']}\n"
    )
    env = {"K": KEY, "TEAM": "blue", "REDIS_URL": "redis://:pw@h:6379/0", "CLIENT_KEY": "ck-1"}
    policy = load_policy(text, env=env)
    out = policy.to_yaml()
    for reference in ("${URL:-http://127.0.0.1:9/v1}", "${K}", "${TEAM}", "${REDIS_URL}"):
        assert reference in out
    assert "${CLIENT_KEY}" in out and "pw@" not in out and "ck-1" not in out
    moved = policy.model_copy(
        update={
            "backends": {
                "a": policy.backends["a"].model_copy(update={"base_url": "http://other/v1"})
            }
        }
    )
    assert "base_url: http://other/v1" in moved.to_yaml()


def test_a_secret_in_clear_is_refused_naming_the_field() -> None:
    clear = load_policy(
        f"version: 1\nbackends:\n  a: {{model: m, api_key: {KEY}}}\n"
        "tiers: {fast: a, frontier: a}\n"
    )
    with pytest.raises(PolicyError) as info:
        clear.to_yaml()
    assert info.value.field == "backends.a.api_key" and KEY not in str(info.value)
    header = load_policy(
        "version: 1\nbackends:\n  a: {model: m, headers: {Authorization: Bearer x}}\n"
        "tiers: {fast: a, frontier: a}\n"
    )
    with pytest.raises(PolicyError, match="backends.a.headers.Authorization"):
        header.to_yaml()


def test_a_stand_in_policy_is_written_and_runs_from_its_yaml(tmp_path: Path) -> None:
    with ScriptedServer(default=Reply.json({"city": "Lyon"})) as upstream:
        policy = upstream.stand_in(ROOT / "examples" / "policy.yaml")
        path = tmp_path / "stand_in.yaml"
        path.write_text(policy.to_yaml(), encoding="utf-8")
        assert "${SCRIPTED_SERVER_KEY:-scripted-test-key}" in path.read_text()
        reloaded = load_policy(path, env={})
        assert reloaded == policy
        with Router(reloaded) as router:
            result = router.complete(Turn([{"role": "user", "content": "Where?"}]))
        assert result.completion.text == '{"city": "Lyon"}'
