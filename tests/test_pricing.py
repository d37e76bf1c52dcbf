"""Prices: the built-in table, YAML overrides, the one-time warning, keys read at first call."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tiered_router import Router, Turn, load_policy
from tiered_router.backends.presets import PRESETS
from tiered_router.exceptions import PolicyError
from tiered_router.openai._wire import model_ids, resolve_model
from tiered_router.pricing import (
    PRICE_TABLE,
    PRICES_AS_OF,
    cost_of,
    listed_price,
    table_rows,
    warn_unpriced,
)
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import Usage


def _policy(frontier: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "backends": {"m": {"preset": "mercury-2", "api_key": "k"}, "f": frontier},
        "tiers": {"fast": "m", "frontier": "f"},
        **extra,
    }


def test_the_table_is_dated_and_every_row_names_a_preset() -> None:
    assert PRICES_AS_OF.count("-") == 2
    rows = table_rows()
    assert len(rows) == len(PRICE_TABLE) >= 30
    for row in rows:
        assert row.preset in PRESETS, row
        assert row.price.output_per_mtok > 0
    providers = {row.preset for row in rows}
    assert {"openai", "anthropic", "gemini", "mercury-2", "together", "groq"} <= providers
    assert {"fireworks", "deepinfra"} <= providers


def test_listed_price_finds_dated_snapshots() -> None:
    mini = listed_price("openai", "gpt-4o-mini-2024-07-18")
    assert mini is not None and mini.output_per_mtok == 0.6
    assert listed_price("anthropic", "claude-haiku-4-5-20251001") == listed_price(
        "anthropic", "claude-haiku-4-5"
    )
    assert listed_price("openai", "no-such-model") is None
    assert listed_price(None, "gpt-4o") is None


def test_frontier_default_price_comes_from_the_table() -> None:
    router = Router(_policy({"model": "gpt-5.2", "api_key": "k"}))
    config = router.backend_config("f")
    assert config is not None and config.price.input_per_mtok == 1.75
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost_of(usage, config.price) == pytest.approx(1.75 + 14.0)


def test_yaml_overrides_win_over_the_table() -> None:
    prices = {"gpt-5.2": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    router = Router(_policy({"model": "gpt-5.2", "api_key": "k"}, prices=prices))
    config = router.backend_config("f")
    assert config is not None and config.price.output_per_mtok == 2.0
    own = {"model": "gpt-5.2", "api_key": "k", "price": {"output_per_mtok": 3.0}}
    config = Router(_policy(own, prices=prices)).backend_config("f")
    assert config is not None and config.price.output_per_mtok == 3.0


def test_hosted_presets_infer_from_base_url_and_price_open_models() -> None:
    frontier = {"base_url": "https://api.groq.com/openai/v1", "model": "openai/gpt-oss-120b"}
    router = Router(_policy({**frontier, "api_key": "k"}))
    config = router.backend_config("f")
    assert config is not None and config.price.input_per_mtok == 0.15
    for name in ("anthropic", "gemini", "together", "groq", "fireworks", "deepinfra"):
        preset = PRESETS[name]
        assert preset.base_url is not None and preset.base_url.startswith("https://")
        assert preset.api_key_env is not None and preset.api_key_env.endswith("_API_KEY")


def test_an_unpriced_backend_is_named_in_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    frontier = {"base_url": "http://127.0.0.1:9/v1", "model": "my-own-model-xyz", "api_key": "k"}
    caplog.set_level(logging.WARNING, logger="tiered_router.pricing")
    Router(_policy(frontier)).backend_config("f")
    Router(_policy(frontier)).backend_config("f")
    warnings = [r for r in caplog.records if "has no price" in r.getMessage()]
    assert len(warnings) == 1
    assert "'f'" in warnings[0].getMessage() and "my-own-model-xyz" in warnings[0].getMessage()
    assert warn_unpriced("f", model="my-own-model-xyz", base_url="http://127.0.0.1:9/v1") is False


def test_a_router_and_decide_need_no_keys_and_the_first_call_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("INCEPTION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    policy = load_policy(
        {
            "version": 1,
            "backends": {
                "m": {"preset": "mercury-2", "api_key": "${INCEPTION_API_KEY}"},
                "f": {"model": "gpt-5.2", "api_key": "${OPENAI_API_KEY}"},
            },
            "tiers": {"fast": "m", "frontier": "f"},
        }
    )
    assert policy.backends["m"].api_key is None
    assert policy.backends["m"].api_key_env == "INCEPTION_API_KEY"
    router = Router(policy)
    turn = Turn([{"role": "user", "content": "hi"}])
    assert router.decide(turn).tier == "fast"
    with pytest.raises(PolicyError, match="INCEPTION_API_KEY") as info:
        router.complete(turn)
    assert "api_key" in str(info.value)


def test_a_key_set_after_loading_is_read_at_the_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MY_LOCAL_KEY", raising=False)
    with ScriptedServer() as server:
        server.script([Reply.text("hello")], model="local")
        policy = load_policy(
            {
                "version": 1,
                "backends": {
                    "l": {
                        "base_url": server.base_url,
                        "model": "local",
                        "api_key": "${MY_LOCAL_KEY}",
                    },
                },
                "tiers": {"fast": "l", "frontier": "l"},
            }
        )
        monkeypatch.setenv("MY_LOCAL_KEY", "sk-late")
        with Router(policy) as router:
            result = router.complete(Turn([{"role": "user", "content": "hi"}]))
        assert result.completion.text == "hello"
        assert server.requests[0].headers["authorization"] == "Bearer sk-late"


def test_a_preset_model_name_pins_its_tier() -> None:
    policy = load_policy(_policy({"model": "gpt-5.2", "api_key": "k"}))
    assert resolve_model(policy, "mercury-2") == "fast"
    assert resolve_model(policy, "gpt-5.2") == "frontier"
    assert "mercury-2" in model_ids(policy)
