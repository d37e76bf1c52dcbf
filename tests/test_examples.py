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
