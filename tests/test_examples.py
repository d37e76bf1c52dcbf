"""The example scripts run end to end against the scripted local server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_agent_loop_example_escalates_a_bad_tool_call_and_answers() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("step 0: tier=frontier escalated=True")
    assert "tool_arguments" in lines[1] and '"two" is not of type "integer"' in lines[1]
    assert lines[2].startswith("step 1: tier=frontier") and "rule=final-answer" in lines[2]
    assert lines[-1] == "Lyon: sunny, highs around 24 °C for the next 2 days."


def test_readme_quick_start_runs_against_the_local_server(tmp_path: Path) -> None:
    import re

    from routerkit import policy_file

    from tiered_router.testing import Reply, ScriptedServer

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"## Quick start\n\n(?:<!--[^\n]*-->\n)?```python\n(.*?)```", readme, re.S)
    assert match is not None
    with ScriptedServer(default=Reply.json({"city": "Lyon"})) as server:
        path = policy_file(server, tmp_path / "policy.yaml")
        code = match.group(1).replace('"examples/policy.yaml"', repr(str(path)))
        namespace: dict[str, object] = {}
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
        assert len(server.requests) == 2
    result = namespace["result"]
    assert getattr(result, "completion").text == '{"city": "Lyon"}'  # noqa: B009
    assert getattr(namespace["task"], "steps") == 1  # noqa: B009
