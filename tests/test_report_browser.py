"""The HTML report rendered in headless Chromium: the charts are in the rendered DOM."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiered_router.evaluation import evaluate, load_sample, render_html
from tiered_router.evaluation.calibration import load_policy_offline
from tiered_router.evaluation.sources import bundled_policy_path


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


CHROMIUM = _chromium()


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = evaluate(load_policy_offline(bundled_policy_path()), load_sample())
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(result), encoding="utf-8")
    return path


def test_chart_is_in_the_rendered_dom(report: Path, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("no Chromium found (install the Debian packages chromium and chromium-driver)")
    done = _run(["--dump-dom", report.as_uri()], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert re.search(r'<svg[^>]*id="cost-quality"', dom)
    assert re.search(r'<svg[^>]*id="pgr-curve"', dom)
    for series in ("policy", "random", "oracle"):
        match = re.search(rf'<polyline[^>]*data-series="{series}"[^>]*points="([^"]+)"', dom)
        assert match, f"series {series} missing from the rendered chart"
        assert len(match.group(1).split()) >= 2
    assert re.search(r'<circle[^>]*data-series="chosen"', dom)
    assert "Escalations" in dom


def test_report_renders_to_a_screenshot(report: Path, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("no Chromium found (install the Debian packages chromium and chromium-driver)")
    shot = tmp_path / "shot.png"
    done = _run(["--window-size=1000,1200", f"--screenshot={shot}", report.as_uri()], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
