"""What eval, calibrate and the report may claim: verdicts, sample size, the threshold's spread."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation import evaluate, load_sample
from tiered_router.evaluation.calibration import Target, calibrate_policy, load_policy_offline
from tiered_router.evaluation.report import render_html
from tiered_router.evaluation.sources import bundled_policy_path
from tiered_router.evaluation.verdict import (
    MIN_CALIBRATION_ROWS,
    ORACLE_MEANING,
    judge,
    small_sample,
    threshold_interval,
)

runner = CliRunner()


def _result(rows: int | None = None):  # type: ignore[no-untyped-def]
    sample = load_sample()
    if rows is not None:
        sample = dataclasses.replace(sample, rows=sample.rows[::7][:rows])  # every source
    return evaluate(load_policy_offline(bundled_policy_path()), sample)


def test_small_samples_are_flagged_below_the_floor() -> None:
    assert MIN_CALIBRATION_ROWS == 200
    assert small_sample(200) is None
    warning = small_sample(12)
    assert warning is not None and warning.startswith("only 12 turn(s)")


def test_the_threshold_interval_contains_the_calibrated_threshold_and_is_seeded() -> None:
    result = _result()
    target = Target(quality_retained=0.95)
    point = calibrate_policy(result, target)
    interval = threshold_interval(result, target)
    assert interval is not None and interval.resamples == 200
    assert interval.low <= point.threshold <= interval.high
    assert interval == threshold_interval(result, target)
    wide = threshold_interval(_result(40), target)
    assert wide is not None and wide.high - wide.low >= interval.high - interval.low


def test_the_report_carries_verdict_names_warning_and_oracle() -> None:
    small = _result(60)
    page = render_html(small, policy="my-policy.yaml", scorer="transfer")
    assert "my-policy.yaml" in page and "scorer <b>transfer</b>" in page
    assert 'id="small-sample"' in page and "only 60 turn(s)" in page
    verdict = judge(small)
    assert verdict is not None
    text = verdict.text.removeprefix("verdict: ")
    assert text.replace("'", "&#x27;") in page
    assert ORACLE_MEANING.replace("'", "&#x27;") in page
    full = render_html(_result())
    assert 'id="small-sample"' not in full and 'id="verdict"' in full


def test_eval_json_carries_the_verdict_and_the_sample_warning(tmp_path: Path) -> None:
    result = runner.invoke(build_app(), ["eval", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["small_sample"] is None
    assert out["verdict"]["outcome"] in {"better", "equal", "worse"}
    assert out["verdict"]["text"].startswith("verdict: the policy keeps")
