"""The validate, explain, run and serve commands, through Typer's test runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.testing import Reply, ScriptedServer

runner = CliRunner()

SECRET = "sk-test-SECRET-0123456789"


def write_policy(tmp_path: Path, base_url: str, extra: str = "") -> Path:
    text = f"""\
version: 1
backends:
  fast:
    type: openai
    base_url: {base_url}
    api_key: {SECRET}
    model: fast-model
    kind: diffusion
    max_retries: 0
  frontier:
    type: openai
    base_url: {base_url}
    api_key: {SECRET}
    model: frontier-model
    max_retries: 0
tiers: {{fast: fast, frontier: frontier}}
scoring: {{type: heuristic, threshold: 0.6}}
rules:
  - {{name: final-answer, when: {{final: true}}, tier: frontier}}
{extra}"""
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def policy(tmp_path: Path, server: ScriptedServer) -> Path:
    return write_policy(tmp_path, server.base_url)


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(build_app(), [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", ["validate", "explain", "run", "serve"])
def test_help_on_every_command(command: str) -> None:
    code, out, _ = invoke(command, "--help")
    assert code == 0
    assert f"tiered-router {command}" in out


def test_validate_ok(policy: Path) -> None:
    code, out, _ = invoke("validate", policy)
    assert code == 0
    assert "ok" in out and "fast=fast" in out and "final-answer" in out
    code, out, _ = invoke("validate", policy, "--json")
    assert code == 0 and json.loads(out)["tiers"] == {"fast": "fast", "frontier": "frontier"}
    assert SECRET not in out


def test_validate_reports_file_line_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nbackends:\n  fast: {type: openai, model: m, timeout_s: -1}\n"
        "tiers: {fast: fast, frontier: fast}\n",
        encoding="utf-8",
    )
    code, out, err = invoke("validate", bad)
    assert code == 1
    assert err.strip().splitlines() == [
        f"{bad}:3: backends.fast.timeout_s: Input should be greater than 0 (input: -1)"
    ]
    assert "Traceback" not in out + err


def test_validate_missing_file_and_missing_key(tmp_path: Path) -> None:
    code, _, err = invoke("validate", tmp_path / "nope.yaml")
    assert code == 1 and "no such policy file" in err and len(err.strip().splitlines()) == 1
    keyless = tmp_path / "keyless.yaml"
    keyless.write_text(
        "version: 1\nbackends:\n  fast: {preset: mercury-2}\ntiers: {fast: fast, frontier: fast}\n",
        encoding="utf-8",
    )
    # keys are checked at a backend's first call: validate notes a missing one...
    code, out, err = invoke("validate", keyless)
    assert code == 0 and "note backends.fast.api_key" in out and "INCEPTION_API_KEY" in out
    code, out, _ = invoke("validate", keyless, "--json")
    assert code == 0 and "INCEPTION_API_KEY" in json.loads(out)["notes"][0]
    # ...and fails on it when asked to
    code, _, err = invoke("validate", keyless, "--check-keys")
    assert code == 1 and "INCEPTION_API_KEY" in err and "Traceback" not in err
    assert err.startswith(f"{keyless}: backends.fast.api_key: ")


def test_validate_shows_what_every_backend_resolves_to(tmp_path: Path) -> None:
    path = tmp_path / "presets.yaml"
    path.write_text(
        "version: 1\n"
        "backends:\n"
        "  mercury: {preset: mercury-2, api_key: k}\n"  # everything from the preset
        "  local: {preset: dlmserve}\n"
        "  listed: {model: gpt-4o-mini, api_key: k}\n"  # the built-in price table
        "  mine: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key: k, tools: false}\n"
        "  priced: {model: gpt-4o, api_key: k}\n"
        "  replayed: {type: replay, options: {data: sample},\n"
        "             model: Mixtral-8x7B-Instruct}\n"
        "prices: {gpt-4o: {input_per_mtok: 1, output_per_mtok: 2}}\n"
        "tiers: {fast: mercury, frontier: listed}\n",
        encoding="utf-8",
    )
    code, out, _ = invoke("validate", path, "--json")
    assert code == 0, out
    backends = json.loads(out)["backends"]
    assert backends["mercury"] == {
        "type": "openai",
        "preset": "mercury-2",
        "kind": "diffusion",
        "model": "mercury-2",
        "base_url": "https://api.inceptionlabs.ai/v1",
        "dialect": "mercury-2",
        "tools": "native",
        "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75, "cached_input_per_mtok": 0.025},
        "price_source": "preset mercury-2",
    }
    assert backends["local"]["tools"] == "prompted" and backends["local"]["dialect"] == "dlmserve"
    assert backends["local"]["base_url"] == "http://127.0.0.1:8000/v1"
    assert backends["listed"]["price_source"] == "built-in price table (openai, gpt-4o-mini)"
    assert backends["listed"]["base_url"] == "https://api.openai.com/v1"
    assert backends["mine"]["preset"] is None and backends["mine"]["tools"] == "none"
    assert backends["mine"]["price"] is None and backends["mine"]["kind"] == "autoregressive"
    assert backends["priced"]["price_source"] == "prices.gpt-4o"
    assert backends["replayed"]["dialect"] is None and "Mixtral" in backends["replayed"]["model"]
    assert all(info["kind"] is not None for info in backends.values())
    code, out, _ = invoke("validate", path)
    assert code == 0
    assert (
        "backend mercury: openai mercury-2 (diffusion) at https://api.inceptionlabs.ai/v1, "
        "preset mercury-2, dialect mercury-2, tools native, $0.25 in / $0.75 out per 1M tokens "
        "(from preset mercury-2)"
    ) in out
    assert (
        "backend mine: openai m (autoregressive) at http://127.0.0.1:9/v1, dialect openai, " in out
    )
    assert "(default)" not in out


def test_explain_table_and_json(policy: Path) -> None:
    code, out, _ = invoke("explain", policy, "--prompt", "Say hi.")
    assert code == 0
    assert "tier" in out and "score" in out and "feature" in out and "contribution" in out
    code, out, _ = invoke("explain", policy, "--prompt", "Say hi.", "--final", "--json")
    decision = json.loads(out)
    assert code == 0 and decision["tier"] == "frontier" and decision["rule"] == "final-answer"
    assert set(decision) >= {"score", "threshold", "reasons", "features", "contributions"}


def test_explain_from_messages_and_tools_files(policy: Path, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"model": "auto", "messages": [{"role": "user", "content": "find x"}]}),
        encoding="utf-8",
    )
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps([{"type": "function", "function": {"name": f"t{i}"}} for i in range(3)]),
        encoding="utf-8",
    )
    code, out, _ = invoke("explain", policy, "--messages", request, "--tools", tools, "--json")
    assert code == 0 and json.loads(out)["features"]["tools"] == 3


def test_explain_input_errors_are_one_line(policy: Path, tmp_path: Path) -> None:
    code, _, err = invoke("explain", policy)
    assert (
        code == 1 and err.strip() == "error: give exactly one of --prompt TEXT and --messages FILE"
    )
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    code, _, err = invoke("explain", policy, "--messages", broken)
    assert code == 1 and "not valid JSON" in err and len(err.strip().splitlines()) == 1


def test_run_prints_answer_and_trace(policy: Path, server: ScriptedServer) -> None:
    server.script([Reply.empty()], model="fast-model")
    server.script([Reply.text("the frontier answer")], model="frontier-model")
    code, out, _ = invoke("run", policy, "--prompt", "Say hi.")
    assert code == 0
    assert "the frontier answer" in out
    assert "non_empty" in out and "escalations: gate_failed" in out
    server.script([Reply.text("json answer")], model="fast-model")
    code, out, _ = invoke("run", policy, "--prompt", "Say hi.", "--json")
    result = json.loads(out)
    assert result["text"] == "json answer" and result["tier"] == "fast"
    assert result["trace"]["attempts"][0]["backend"] == "fast"
    assert SECRET not in out


def test_run_pinned_model(policy: Path, server: ScriptedServer) -> None:
    code, out, _ = invoke("run", policy, "--prompt", "Say hi.", "--model", "frontier", "--json")
    assert code == 0 and json.loads(out)["tier"] == "frontier"
    code, _, err = invoke("run", policy, "--prompt", "Say hi.", "--model", "gpt-4o")
    assert code == 1 and "unknown model 'gpt-4o'" in err


def test_run_failure_names_each_tiers_own_error(tmp_path: Path) -> None:
    closed = ScriptedServer().start()
    url = closed.base_url
    closed.stop()  # nothing listens there any more: connection refused
    policy = write_policy(tmp_path, url)
    code, out, err = invoke("run", policy, "--prompt", "Say hi.")
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: AllTiersFailed: no tier produced a completion")
    assert lines[1].startswith("  fast (fast): connection failed") and "refused" in lines[1]
    assert lines[2].startswith("  frontier (frontier): connection failed")
    assert "Traceback" not in out + err and SECRET not in err


def test_run_needs_only_the_keys_of_the_tiers_it_calls(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BIG_KEY", raising=False)
    closed = ScriptedServer().start()
    down = closed.base_url
    closed.stop()
    path = tmp_path / "local.yaml"
    text = (
        "version: 1\n"
        "backends:\n"
        "  local: {{base_url: '{url}', model: fast-model, kind: diffusion, max_retries: 0}}\n"
        "  big: {{model: gpt-5.2, api_key: '${{BIG_KEY}}'}}\n"
        "tiers: {{fast: local, frontier: big}}\n"
    )
    # the local server answers: no frontier key needed
    path.write_text(text.format(url=server.base_url), encoding="utf-8")
    server.script([Reply.text("hi")], model="fast-model")
    code, out, err = invoke("run", path, "--prompt", "Say hi.", "--json")
    assert code == 0, err
    assert json.loads(out)["tier"] == "fast"
    # the local server is down: its own error shows, then the frontier's missing key
    path.write_text(text.format(url=down), encoding="utf-8")
    code, _, err = invoke("run", path, "--prompt", "Say hi.")
    assert code == 1
    lines = err.strip().splitlines()
    assert "refused" in lines[1] and lines[1].startswith("  fast (local): ")
    assert lines[2].startswith("  frontier (big): not called: backend 'big' needs an API key")
    assert "BIG_KEY" in lines[2]


def test_serve_refuses_public_bind_without_keys(policy: Path) -> None:
    code, out, err = invoke("serve", policy, "--host", "0.0.0.0")
    assert code == 1
    assert "refusing to bind 0.0.0.0" in err and "server.api_keys" in err
    assert "Traceback" not in out + err
