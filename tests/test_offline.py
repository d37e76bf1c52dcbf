"""With no keys and no network, every example, docs snippet and README command runs.

One test, one case per thing a new user may run: each file in examples/ (scripts with
``--stand-in``, policies through ``tiered-router run --stand-in``), each fenced Python block of
docs/*.md and README.md (a block marked ``<!-- fragment: needs ... -->`` needs a real provider
or server, and is only compiled), and the README's command-line walk-through in order.
``serve --stand-in`` and ``demo --serve`` are started as processes and answer a request.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from test_docs_examples import PAGES, _documented_output, _every_block, _shown_as
from typer.testing import CliRunner

from tiered_router import _http
from tiered_router.cli import build_app

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("OPENAI_API_KEY", "INCEPTION_API_KEY", "OPENAI_BASE_URL")
# what each example script needs installed (the rest need only the core)
NEEDS = {
    "langgraph_agent.py": "langgraph",
    "pydantic_ai_example.py": "pydantic_ai",
    "openai_agents_example.py": "agents",
}


def _keyless_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _cases() -> list[Any]:
    cases = [
        pytest.param("example", path.name, None, id=f"examples/{path.name}")
        for path in sorted((ROOT / "examples").iterdir())
        if path.suffix in (".py", ".yaml")
    ]
    for block in _every_block():
        page, line, code, fragment = block.values
        cases.append(pytest.param("block", f"{page}:{line}", (code, fragment), id=block.id))
    cases.append(pytest.param("readme-cli", "README.md", None, id="README.md:cli"))
    return cases


def _run_example(name: str) -> None:
    path = ROOT / "examples" / name
    if path.suffix == ".yaml":
        result = CliRunner().invoke(
            build_app(), ["run", str(path), "--stand-in", "--prompt", "Say hi.", "--json"]
        )
        assert result.exit_code == 0, result.output
        return
    module = NEEDS.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    done = subprocess.run(
        [sys.executable, str(path), "--stand-in"],
        env=_keyless_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip()


def _run_block(
    page: str, line: int, code: str, fragment: bool, tmp_path: Path, mp: pytest.MonkeyPatch
) -> None:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    compiled = compile(code, f"{page}:{line}", "exec", flags=flags, dont_inherit=True)
    if fragment or page.removeprefix("docs/") in PAGES:
        return  # a fragment only compiles; gate.md and routing.md blocks run in test_docs_examples
    mp.chdir(ROOT if page == "README.md" else tmp_path)
    module = types.ModuleType(f"docs_block_{line}")
    mp.setitem(sys.modules, module.__name__, module)
    exec(compiled, module.__dict__)  # noqa: S102 - our own docs


def _run_readme_cli(tmp_path: Path, mp: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"Use the CLI .*?```bash\n(.*?)```", readme, re.S)
    assert match is not None
    mp.chdir(tmp_path)
    for line in match.group(1).splitlines():
        words = shlex.split(line, comments=True)
        assert words[0] == "tiered-router", line
        args = [str(ROOT / w) if w.startswith("examples/") else w for w in words[1:]]
        result = CliRunner().invoke(build_app(), args)
        assert result.exit_code == 0, f"{line}\n{result.output}"
        assert "Traceback" not in result.output


@pytest.mark.parametrize(("kind", "name", "data"), _cases())
def test_runs_offline(
    kind: str,
    name: str,
    data: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for var in KEYS:
        monkeypatch.delenv(var, raising=False)
    if kind == "example":
        _run_example(name)
    elif kind == "block":
        page, line = name.rsplit(":", 1)
        code, fragment = data
        _run_block(page, int(line), code, fragment, tmp_path, monkeypatch)
        ran = not fragment and page.removeprefix("docs/") not in PAGES
        expected = _documented_output(code) if ran else []
        if expected:  # the block shows what it prints: it must print that
            printed = capsys.readouterr().out.splitlines()
            assert len(printed) == len(expected), printed
            for got, shown in zip(printed, expected, strict=True):
                assert _shown_as(shown).fullmatch(got), f"printed {got!r}, the page shows {shown!r}"
    else:
        _run_readme_cli(tmp_path, monkeypatch)


def test_every_example_file_is_a_case() -> None:
    names = {c.values[1] for c in _cases() if c.values[0] == "example"}
    files = {p.name for p in (ROOT / "examples").iterdir() if p.is_file()}
    assert names == files


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize(
    "command",
    [["serve", str(ROOT / "examples" / "policy.yaml"), "--stand-in"], ["demo", "--serve"]],
    ids=["serve --stand-in", "demo --serve"],
)
def test_the_proxy_runs_on_a_stand_in_upstream(command: list[str], tmp_path: Path) -> None:
    if importlib.util.find_spec("uvicorn") is None:
        pytest.skip("the server extra is not installed")
    port = _free_port()
    log = tmp_path / "proxy.log"
    args = [sys.executable, "-m", "tiered_router.cli", *command, "--port", str(port)]
    with open(log, "wb") as out:
        process = subprocess.Popen(args, env=_keyless_env(), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with _http.build_client() as http:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                try:
                    if http.get(f"{url}/readyz").status_code == 200:
                        break
                except _http.TransportError:
                    time.sleep(0.05)
            body = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]}
            response = http.post(f"{url}/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
            answer = response.json()["choices"][0]["message"]["content"]
            assert answer.startswith("A stand-in answer from ")
            assert response.headers["x-tiered-router-tier"] in ("fast", "frontier")
            # proxy.md says how many lines a routed request logs: count them
            claim = re.search(
                r"logs (\w+) lines? per routed chat request",
                (ROOT / "docs" / "proxy.md").read_text(),
            )
            assert claim is not None
            turn = response.json()["id"].removeprefix("chatcmpl-tr-")
            said = {"one": 1, "two": 2, "three": 3}[claim.group(1)]
            deadline = time.monotonic() + 5
            while log.read_text().count(turn) < said and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # a line more than the page says would come by now
            lines = [line for line in log.read_text().splitlines() if turn in line]
            assert len(lines) == said, lines
            assert "tiered_router.server" in lines[0] and "attempts=" in lines[0]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    shown = log.read_text()
    assert "scripted upstream" in shown or "stand-in upstream" in shown
    assert "Traceback" not in shown


def test_serving_a_stand_in_without_the_server_extra_names_it_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if the extra were not installed
    for args in (
        ["demo", "--serve"],
        ["serve", str(ROOT / "examples" / "policy.yaml"), "--stand-in"],
    ):
        result = CliRunner().invoke(build_app(), args)
        assert result.exit_code == 1
        assert result.output.strip() == (
            'error: the proxy needs uvicorn, from the server extra: pip install ".[server]"'
        )
