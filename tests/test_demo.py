"""``tiered-router demo``, ``--version`` and ScriptedServer.stand_in: trying it with no keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router import Router, Turn
from tiered_router.cli import build_app
from tiered_router.cli._demo import run_demo
from tiered_router.testing import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "INCEPTION_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def test_demo_shows_decisions_a_failed_draft_the_escalation_and_the_trace(tmp_path: Path) -> None:
    lines: list[str] = []
    results = run_demo(lines.append, trace_file=tmp_path / "traces.jsonl")
    assert [r.tier for r in results] == ["fast", "frontier", "frontier"]
    assert [r.escalated for r in results] == [False, True, False]
    text = "\n".join(lines)
    assert "turn 2: decided fast" in text
    assert 'gate FAILED: tool_arguments: tool_calls[0] (get_weather): $.days: "two"' in text
    assert "escalated: gate_failed -> answered by frontier" in text
    assert "turn 3: decided frontier (score" in text and "final-answer" in text
    trace = json.loads(
        text[text.index("trace of the escalated turn:") :]
        .split("\n", 1)[1]
        .split("\ntraces written")[0]
    )
    assert trace["escalations"] == ["gate_failed"]
    assert [a["tier"] for a in trace["attempts"]] == ["fast", "frontier"]
    assert all(a["cost"] > 0 for a in trace["attempts"])  # the table prices both models
    written = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert len(written) == 3


def test_demo_command_and_version() -> None:
    runner = CliRunner()
    result = runner.invoke(build_app(), ["demo"])
    assert result.exit_code == 0, result.output
    assert "escalated: gate_failed" in result.output
    version = runner.invoke(build_app(), ["--version"])
    assert version.exit_code == 0 and version.output.startswith("tiered-router ")


def test_stand_in_runs_the_example_policy_without_keys() -> None:
    with ScriptedServer() as upstream:
        upstream.script([Reply.json({"a": 1})], model="mercury-2")
        policy = upstream.stand_in(ROOT / "examples" / "policy.yaml")
        assert {b.base_url for b in policy.backends.values()} == {upstream.base_url}
        assert policy.backends["mercury"].preset == "mercury-2"
        with Router(policy) as router:
            result = router.complete(Turn([{"role": "user", "content": "hi"}]))
        assert result.completion.text == '{"a": 1}'
        assert result.trace.attempts[0].cost > 0


def test_readme_offline_quick_start_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"### Offline, with no keys\n.*?```python\n(.*?)```", readme, re.S)
    assert match is not None
    monkeypatch.chdir(ROOT)
    exec(compile(match.group(1), "README.md", "exec"), {})  # noqa: S102 - our own README
    out = capsys.readouterr().out
    assert "frontier True ('gate_failed',)" in out and '{"city": "Lyon"}' in out


def test_explain_and_validate_need_no_keys() -> None:
    runner = CliRunner()
    policy = str(ROOT / "examples" / "policy.yaml")
    explained = runner.invoke(build_app(), ["explain", policy, "--prompt", "hi", "--json"])
    assert explained.exit_code == 0, explained.output
    assert json.loads(explained.output)["tier"] == "fast"
    validated = runner.invoke(build_app(), ["validate", policy])
    assert validated.exit_code == 0, validated.output
    assert "INCEPTION_API_KEY" in validated.output
    assert "gpt-5.2 (autoregressive) at https://api.openai.com/v1" in validated.output
    assert "$1.75 in / $14 out per 1M tokens (from backends.frontier.price)" in validated.output


def test_validate_names_a_backend_without_a_price(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\n"
        "backends:\n"
        "  mine: {base_url: 'http://127.0.0.1:9/v1', model: my-model, api_key: k}\n"
        "  big: {model: gpt-4o, api_key: k}\n"
        "tiers: {fast: mine, frontier: big}\n"
    )
    result = CliRunner().invoke(build_app(), ["validate", str(policy), "--json"])
    assert result.exit_code == 0, result.output
    backends = json.loads(result.output)["backends"]
    assert backends["mine"]["price"] is None
    assert backends["big"]["price"]["output_per_mtok"] == 10.0
    shown = CliRunner().invoke(build_app(), ["validate", str(policy)])
    assert "no price: its calls count as $0" in shown.output


def test_readme_cli_commands_run_in_order_with_no_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"Use the CLI .*?```bash\n(.*?)```", readme, re.S)
    assert match is not None
    monkeypatch.chdir(tmp_path)
    app = build_app()
    for line in match.group(1).splitlines():
        words = shlex.split(line, comments=True)
        assert words[0] == "tiered-router", line
        args = [str(ROOT / w) if w.startswith("examples/") else w for w in words[1:]]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{line}\n{result.output}"
    assert (tmp_path / "report.html").is_file()
    assert (tmp_path / "my_traffic.jsonl").is_file()
