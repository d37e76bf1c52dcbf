"""What the pages claim and count is what the code does.

policy.md's preset and check lists and counts, its error examples; cli.md's validate,
explain and run outputs, its exit codes and its cold-start sentence; the framework pages'
code and their printed output. (proxy.md's log lines per request are counted on a real
proxy in tests/test_offline.py.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router.backends.presets import PRESETS
from tiered_router.cli import build_app
from tiered_router.gate import default_registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
KEYS = ("OPENAI_API_KEY", "INCEPTION_API_KEY", "OPENAI_BASE_URL")
BUILTINS = default_registry().names()  # before any test registers a check


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _section(page: str, heading: str) -> str:
    text = _page(page)
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    end = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(heading) + 2 :], re.M)
    return text[start : start + len(heading) + 2 + (end.start() if end else len(text))]


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in KEYS:
        monkeypatch.delenv(var, raising=False)


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args))
    return result.exit_code, result.output


# -- policy.md ----------------------------------------------------------------------------


def test_policy_page_lists_every_preset_and_says_how_many() -> None:
    table = _section("policy.md", "### Presets")
    listed = re.findall(r"^\| `([\w-]+)` \|", table, re.M)
    assert sorted(listed) == sorted(PRESETS)
    count = re.search(r"the (\d+) of \[Presets\]", _page("policy.md"))
    assert count is not None and int(count.group(1)) == len(PRESETS)
    assert "routing.md" not in table  # the local presets' dialects are in backends.md


def test_policy_page_documents_every_builtin_check_and_says_how_many() -> None:
    gate = _section("policy.md", "## `gate`")
    listed = re.findall(r"^\| `(\w+)` \| (?!bool|list)", gate, re.M)
    assert sorted(listed) == sorted(BUILTINS)
    count = re.search(r"all (\d+) built-in checks", gate)
    assert count is not None and int(count.group(1)) == len(BUILTINS)


@pytest.mark.parametrize(
    ("row", "backend"),
    [
        ("unknown preset", "{model: m, preset: mercury2}"),
        ("unknown backend option", "{model: m, options: {quirk: x}}"),
        ("retired option", "{model: m, options: {quirks: mercury}}"),
    ],
)
def test_policy_page_error_examples_are_the_loaders(row: str, backend: str) -> None:
    from tiered_router import load_policy
    from tiered_router.exceptions import PolicyError

    shown = re.search(rf"^\| {row} \| `policy\.yaml:\d+: (.*)` \|$", _page("policy.md"), re.M)
    assert shown is not None, row
    text = f"version: 1\nbackends:\n  big: {backend}\ntiers: {{fast: big, frontier: big}}\n"
    with pytest.raises(PolicyError) as info:
        load_policy(text)
    ((_, field, message),) = info.value.problems
    assert f"{field}: {message}" == shown.group(1)


# -- cli.md -------------------------------------------------------------------------------


def _shown(page: str, command: str) -> list[str]:
    """The lines a page shows after ``$ command`` in a fenced block, up to the next ``$``."""
    text = _page(page)
    start = text.index(f"$ {command}\n") + len(f"$ {command}\n")
    block = text[start : text.index("```", start)]
    return block.split("\n$ ", 1)[0].rstrip("\n").splitlines()


def test_cli_page_shows_what_validate_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "250")
    code, out = _run("validate", "examples/policy.yaml")
    assert code == 0
    assert out.rstrip("\n").splitlines() == _shown(
        "cli.md", "tiered-router validate examples/policy.yaml"
    )
    broken = tmp_path / "broken.yaml"
    policy = (ROOT / "examples" / "policy.yaml").read_text(encoding="utf-8")
    broken.write_text(
        "version: 1\nbackends:\n  mercury:\n    preset: mercury-2\n"
        "    api_key: ${INCEPTION_API_KEY}\n    timeout_s: -1\n  frontier:\n"
        "    model: gpt-5.2\n    api_key: ${OPENAI_API_KEY}\n    retries: 2\n"
        "tiers: {fast: mercury, frontier: frontier}\n",
        encoding="utf-8",
    )
    assert "version: 1" in policy
    monkeypatch.chdir(tmp_path)
    code, out = _run("validate", "broken.yaml")
    shown = _shown("cli.md", "tiered-router validate broken.yaml; echo $?")
    assert [*out.rstrip("\n").splitlines(), str(code)] == shown


def test_cli_page_shows_what_explain_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    command = (
        'explain examples/policy.yaml --prompt "Prove that sqrt 2 is irrational, step by step"'
    )
    code, out = _run(
        *["explain", "examples/policy.yaml", "--prompt"],
        "Prove that sqrt 2 is irrational, step by step",
    )
    assert code == 0
    got = [line.rstrip() for line in out.rstrip("\n").splitlines()]
    assert got == _shown("cli.md", f"tiered-router {command}")


def test_cli_page_shows_each_tiers_error_when_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 30000)) == 0:
            pytest.skip("something listens on 127.0.0.1:30000")
    monkeypatch.chdir(ROOT)
    code, out = _run("run", "examples/local_diffusion.yaml", "--prompt", "hi")
    assert code == 1
    command = 'tiered-router run examples/local_diffusion.yaml --prompt "hi"'
    shown = _shown("cli.md", f"{command}      # no server, no OPENAI_API_KEY")
    assert out.rstrip("\n").splitlines() == shown


def test_cli_page_exit_codes(tmp_path: Path) -> None:
    table = _page("cli.md").split("## validate", 1)[0]
    assert re.search(r"^\| 1 \|", table, re.M) and re.search(r"^\| 2 \|", table, re.M)
    assert _run("validate", str(tmp_path / "missing.yaml"))[0] == 1
    assert _run("eval", "--prices", "nope")[0] == 2
    assert _run("calibrate", str(ROOT / "examples" / "policy.yaml"))[0] == 2
    assert _run("validate", "--no-such-option")[0] == 2


def test_the_first_call_does_not_import_the_openai_sdk() -> None:
    # cli.md and routing.md: the cold start is the HTTP stack and the first connection
    assert "openai SDK is not imported" in _page("cli.md")
    code = (
        "import sys\n"
        "from tiered_router import Router, Turn\n"
        "from tiered_router.testing import Reply, ScriptedServer\n"
        "with ScriptedServer(default=Reply.text('hi')) as s:\n"
        "    policy = {'backends': {'f': {'model': 'm', 'base_url': s.base_url, 'api_key': 'k'}},"
        " 'tiers': {'fast': 'f', 'frontier': 'f'}}\n"
        "    with Router(policy) as r:\n"
        "        r.complete(Turn([{'role': 'user', 'content': 'hi'}]))\n"
        "print('openai' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- the framework pages ------------------------------------------------------------------

FRAMEWORKS = [
    ("pydantic_ai.md", "pydantic_ai_example", "pydantic_ai"),
    ("openai_agents.md", "openai_agents_example", "agents"),
    ("langchain.md", "langgraph_agent", "langgraph"),
]


@pytest.mark.parametrize(("page", "example", "needs"), FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_a_framework_page_runs_on_the_stand_in_and_prints_what_it_says(
    page: str,
    example: str,
    needs: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed")
    from tiered_router.testing import ScriptedServer

    spec = importlib.util.spec_from_file_location(
        f"ex_{example}", ROOT / "examples" / f"{example}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = _page(page)
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    with ScriptedServer(default=module.stand_in_reply) as upstream:
        path = tmp_path / "policy.yaml"
        path.write_text(upstream.stand_in(ROOT / "examples" / "policy.yaml").to_yaml())
        source = code.group(1).replace('"policy.yaml"', repr(str(path)))
        monkeypatch.chdir(tmp_path)
        exec(compile(source, page, "exec"), {"__name__": f"page_{example}"})  # noqa: S102
        asyncio.set_event_loop(None)
    printed = capsys.readouterr().out.splitlines()
    # an inline "# ..." after a print shows its output, unless it only describes it
    for line in code.group(1).splitlines():
        match = re.match(r"\s*print\((.*)\)\s+# (.*)$", line)
        if match and "..." not in match.group(2):
            assert match.group(2) in printed, (match.group(2), printed)
