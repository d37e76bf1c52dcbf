"""``tiered-router eval`` and ``calibrate`` through the real CLI app."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation import evaluate, load_sample, render_html
from tiered_router.evaluation.calibration import Target, load_policy_offline, write_threshold
from tiered_router.evaluation.sources import bundled_policy_path
from tiered_router.exceptions import PolicyError
from tiered_router.policy import load_policy

ROOT = Path(__file__).parents[1]
runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(build_app(), list(args))
    return result.exit_code, result.output


def test_eval_with_no_arguments_prints_real_figures() -> None:
    code, out = _invoke("eval")
    assert code == 0, out
    assert "default policy on sample (500 turns)" in out
    for metric in (
        "quality retained",
        "cost saved",
        "latency p95",
        "fast share",
        "APGR",
        "CPT(50%)",
    ):
        assert metric in out
    assert re.search(r"quality retained\s*│\s*\d+\.\d%", out)
    assert "fast = Mixtral-8x7B-Instruct, frontier = gpt-4-1106-preview" in out
    # GSM8K's recorded responses go through the gate
    assert re.search(r"gate: P\(wrong \| pass\)\s*│\s*\d+\.\d%\s*│\s*200 drafts", out)
    # the policy's row is marked in the sweep, and compared with baselines at its share
    assert "policy ->" in out
    assert "at the policy's frontier share" in out and "prompt length" in out
    assert "verdict: the policy keeps" in out


def test_eval_main_job_runs_as_a_module_without_keys() -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "tiered_router.cli", "eval", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["summary"]["n"] == 500
    assert done.stderr == ""  # no progress bar when not a terminal


def test_eval_json_output_parses(tmp_path: Path) -> None:
    code, out = _invoke("eval", "--json", "--report", str(tmp_path / "r.html"))
    assert code == 0
    data = json.loads(out)
    s = data["summary"]
    assert data["dataset"] == "sample" and s["n"] == 500
    names = [b["name"] for b in data["baselines"]]
    assert names == ["random", "prompt length"]
    for b in data["baselines"]:
        assert abs(b["frontier_share"] - s["frontier_call_share"]) < 0.01
    assert 0 < s["quality"] <= s["quality_frontier"] <= 1
    assert s["apgr_random"] == 0.5 and s["apgr"] is not None and s["cpt50"] is not None
    assert {"p_wrong_given_pass", "p_fail_given_wrong", "p_fail_given_right"} <= set(s["gate"])
    assert len(data["sweep"]) > 10 and data["report"].endswith("r.html")


def test_eval_report_contains_the_chart(tmp_path: Path) -> None:
    report = tmp_path / "out.html"
    code, out = _invoke("eval", "--report", str(report))
    assert code == 0 and f"report written to {report}" in out.replace("\n", "")
    page = report.read_text()
    assert '<svg id="cost-quality"' in page and '<svg id="pgr-curve"' in page
    for series in ("policy", "random", "oracle", "chosen"):
        assert f'data-series="{series}"' in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert "https://" not in page


def test_eval_report_shows_escalation_breakdown() -> None:
    result = evaluate(load_policy_offline(bundled_policy_path()), load_sample())
    html = render_html(result, title="t")
    assert 'id="escalations"' in html and 'id="failed-checks"' in html
    assert "<title>t</title>" in html


def test_eval_errors_are_clear() -> None:
    code, out = _invoke("eval", "--data", "no-such-data")
    assert code == 1 and "not a file and not a known name" in out
    code, out = _invoke("eval", "missing-policy.yaml")
    assert code == 1 and "missing-policy.yaml" in out
    assert out.startswith("error: ") and "Traceback" not in out


def test_eval_reports_a_policy_the_router_cannot_build(tmp_path: Path) -> None:
    path = _policy_copy(tmp_path)
    path.write_text(
        path.read_text().replace("type: transfer", "type: transfer\n  options: {nope: 1}")
    )
    code, out = _invoke("eval", str(path))
    assert code == 1 and "nope" in out and "Traceback" not in out


def _policy_copy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    text = bundled_policy_path().read_text()
    text = re.sub(r"threshold: [0-9.]+", "threshold: 0.5   # hand-set, to calibrate", text)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--target-fast-share", "0.6"), ("--target-quality-retained", "0.9"), ("--max-cost", "50%")],
)
def test_calibrate_meets_each_target(tmp_path: Path, flag: str, value: str) -> None:
    policy = _policy_copy(tmp_path)
    code, out = _invoke("calibrate", str(policy), "--data", "sample", flag, value, "--json")
    assert code == 0, out
    data = json.loads(out)
    e = data["expected"]
    if flag == "--target-fast-share":
        assert e["fast_share"] >= 0.6
    elif flag == "--target-quality-retained":
        assert e["quality_retained"] >= 0.9 - 1e-9
    else:
        assert e["cost_saved"] >= 0.5 - 1e-9
    assert data["written"] is False
    assert "threshold: 0.5" in policy.read_text()  # not written without --write


def test_calibrate_write_preserves_comments(tmp_path: Path) -> None:
    policy = _policy_copy(tmp_path)
    before = policy.read_text()
    code, out = _invoke("calibrate", str(policy), "--target-fast-share", "0.6")
    assert code == 0, out
    assert "calibrated for fast share >= 60.0%" in out.replace("\n", " ")
    code, out = _invoke("calibrate", str(policy), "--target-fast-share", "0.6", "--write")
    assert code == 0, out
    after = policy.read_text()
    assert after != before
    assert "# hand-set, to calibrate" in after and "# used only where the data" in after
    assert after.splitlines()[0] == before.splitlines()[0]  # the header comment is kept
    threshold = load_policy(str(policy)).scoring.threshold
    assert threshold != 0.5 and f"wrote scoring.threshold: {threshold:g}" in out.replace("\n", "")
    changed = [
        (a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == 1 and "threshold:" in changed[0][1]


def test_write_threshold_adds_a_missing_key_and_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "# my policy\nversion: 1\nbackends:\n  a: {model: m}  # the only one\n"
        "tiers: {fast: a, frontier: a}\n"
    )
    write_threshold(path, 0.42)
    text = path.read_text()
    assert "# my policy" in text and "# the only one" in text
    assert load_policy(str(path)).scoring.threshold == 0.42
    path.write_text("version: 1\nbackends: {}\n")
    with pytest.raises(PolicyError):
        write_threshold(path, 0.3)
    assert path.read_text() == "version: 1\nbackends: {}\n"  # never left half-written


def test_calibrate_needs_exactly_one_target(tmp_path: Path) -> None:
    policy = _policy_copy(tmp_path)
    code, out = _invoke("calibrate", str(policy))
    assert code == 2 and "exactly one target" in out
    code, out = _invoke("calibrate", str(policy), "--target-fast-share", "0.5", "--max-cost", "1")
    assert code == 2
    code, out = _invoke("calibrate", str(policy), "--target-fast-share", "1.5")
    assert code == 2 and "[0, 1]" in out
    code, out = _invoke("calibrate", str(policy), "--max-cost", "0")
    assert code == 1 and "cheapest" in out


def test_target_parses_max_cost() -> None:
    assert Target.max_cost("40%").max_cost_share == pytest.approx(0.4)
    assert Target.max_cost("$0.002").max_cost_per_turn == pytest.approx(0.002)
    with pytest.raises(ValueError, match="--max-cost"):
        Target.max_cost("cheap")


def test_offline_loading_fills_unset_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TR_TEST_KEY", raising=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\nbackends:\n  a: {model: m, base_url: '${TR_TEST_KEY}'}\n"
        "tiers: {fast: a, frontier: a}\nscoring: {threshold: '${TR_T:-0.3}'}\n"
    )
    with pytest.raises(PolicyError):
        load_policy(str(path))
    policy = load_policy_offline(path)
    assert policy.scoring.threshold == 0.3  # defaults still apply


def test_eval_price_and_latency_options() -> None:
    code, out = _invoke("eval", "--prices", "cheap")
    assert code == 2 and "--prices" in out
    code, out = _invoke("eval", "--latency", "fast")
    assert code == 2 and "--latency" in out
    code, out = _invoke("eval", "--json", "--prices", "policy", "--latency", "model")
    assert code == 0
    assert json.loads(out)["summary"]["n"] == 500


def test_eval_on_shared_bfcl_data_uses_recorded_latency() -> None:
    from tiered_router.evaluation import find_data_dir

    if find_data_dir() is None:
        pytest.skip("shared data folder (../shared/data) absent")
    code, out = _invoke("eval", "--data", "bfcl", "--json")
    assert code == 0, out
    recorded = json.loads(out)["summary"]
    code, out = _invoke("eval", "--data", "bfcl", "--json", "--latency", "model")
    modelled = json.loads(out)["summary"]
    assert recorded["latency_mean_s"] != modelled["latency_mean_s"]
    assert recorded["gate"]["drafts"] == recorded["n"]  # every BFCL draft is checked
    assert json.loads(out)["fast_model"] == "gpt-4o-mini-2024-07-18-FC"


def test_eval_picks_models_by_option() -> None:
    code, out = _invoke(
        "eval",
        "--json",
        "--fast-model",
        "gpt-4-1106-preview",
        "--frontier-model",
        "gpt-4-1106-preview",
    )
    assert code == 0, out
    s = json.loads(out)["summary"]
    assert s["q_weak"] == s["q_strong"] and s["apgr"] is None
    code, out = _invoke("eval", "--fast-model", "nope")
    assert code == 1 and "no outcomes for model 'nope'" in out


def test_eval_suggests_calibrate_or_another_scorer_when_a_baseline_wins(tmp_path: Path) -> None:
    path = _policy_copy(tmp_path)
    # a scorer that ranks turns backwards by length loses to the prompt-length router
    path.write_text(
        path.read_text().replace(
            "type: transfer", "type: heuristic\n  weights: {prompt_tokens: -8.0, bias: 2.0}"
        )
    )
    code, out = _invoke("calibrate", str(path), "--target-fast-share", "0.6", "--write")
    assert code == 0, out
    code, out = _invoke("eval", str(path))
    assert code == 0, out
    flat = " ".join(out.split())
    assert "verdict: the policy keeps LESS quality than" in flat
    assert "tiered-router calibrate" in flat and "another scorer" in flat
    assert "tiered-router fit-scorer" in flat


def test_eval_verdict_when_the_threshold_sends_every_turn_to_one_tier(tmp_path: Path) -> None:
    path = _policy_copy(tmp_path)
    path.write_text(path.read_text().replace("threshold: 0.5 ", "threshold: 1.0 "))
    code, out = _invoke("eval", str(path))
    assert code == 0, out
    flat = " ".join(out.split())
    # the verdict names the shares as the table does: decided fast, then answered fast
    answered = re.search(r"fast share \(answered fast\)\s*│\s*([\d.]+%)", out)
    assert answered is not None
    assert "the scores decide every turn for the fast tier on this data" in flat
    assert f"(answered fast: {answered.group(1)};" in flat
    assert "sends every turn" not in flat
    assert "tiered-router calibrate" in flat


def _three_models(tmp_path: Path) -> Path:
    """Rows recording models a, b and c (default pair a -> b); c is right where b is wrong."""
    header = {"format": "tiered-router-eval", "version": 1, "name": "three"}
    header |= {"fast_model": "a", "frontier_model": "b"}
    rows = [
        {
            "id": f"r{i}",
            "messages": [{"role": "user", "content": f"question {i}"}],
            "outcomes": {
                "a": {"quality": 0.0, "cost": 0.001},
                "b": {"quality": 0.0, "cost": 0.01},
                "c": {"quality": 1.0, "cost": 0.02},
            },
        }
        for i in range(20)
    ]
    path = tmp_path / "three.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header, *rows]) + "\n", encoding="utf-8")
    return path


def _replaying(tmp_path: Path, data: str, fast: str, frontier: str) -> Path:
    path = tmp_path / "named.yaml"
    path.write_text(
        "version: 1\nbackends:\n"
        f"  f: {{type: replay, model: {fast}, options: {{data: {data!r}}}}}\n"
        f"  s: {{type: replay, model: {frontier}, options: {{data: {data!r}}}}}\n"
        "tiers: {fast: f, frontier: s}\nscoring: {type: heuristic, threshold: 0.0}\n",
        encoding="utf-8",
    )
    return path


def test_eval_and_calibrate_replay_the_models_the_policy_names(tmp_path: Path) -> None:
    data = str(_three_models(tmp_path))
    policy = _replaying(tmp_path, data, "a", "c")
    code, out = _invoke("eval", str(policy), "--data", data, "--json")
    assert code == 0, out
    shown = json.loads(out)
    # was the data's pair (a -> b), quality 0 on the frontier
    assert (shown["fast_model"], shown["frontier_model"]) == ("a", "c")
    assert shown["summary"]["quality_frontier"] == 1.0
    # a pair spelled in --data still wins over the policy's models
    code, out = _invoke("eval", str(policy), "--data", f"{data}:a->b", "--json")
    assert code == 0, out
    assert json.loads(out)["frontier_model"] == "b"
    code, out = _invoke("calibrate", str(policy), "--data", data, "--target-fast-share", "0.5")
    assert code == 0, out
    assert "replaying three: fast = a, frontier = c" in out
    # a model the data does not record leaves the data's pair in place
    other = _replaying(tmp_path, data, "a", "nope")
    code, out = _invoke("eval", str(other), "--data", data, "--json")
    assert code == 0, out
    assert json.loads(out)["frontier_model"] == "b"


def test_eval_on_bfcl_replays_a_panel_of_the_policys_recorded_models(tmp_path: Path) -> None:
    from tiered_router.evaluation import find_data_dir

    if find_data_dir() is None:
        pytest.skip("shared data folder (../shared/data) absent")
    policy = tmp_path / "panel3.yaml"
    policy.write_text(
        "version: 1\nbackends:\n"
        "  mini: {type: replay, model: gpt-4o-mini-2024-07-18-FC, options: {data: bfcl}}\n"
        "  mini-text: {type: replay, model: gpt-4o-mini-2024-07-18, options: {data: bfcl}}\n"
        "  gpt35: {type: replay, model: gpt-3.5-turbo-0125-FC, options: {data: bfcl}}\n"
        "  big: {type: replay, model: gpt-4-turbo-2024-04-09-FC, options: {data: bfcl}}\n"
        "tiers: {fast: mini, frontier: big}\nscoring: {type: heuristic, threshold: 1.0}\n"
        "drafts: {k: 3, backends: [mini, mini-text, gpt35], min_agreement: 0.67}\n",
        encoding="utf-8",
    )
    code, out = _invoke("eval", str(policy), "--data", "bfcl", "--json")
    assert code == 0, out
    shown = json.loads(out)
    assert shown["frontier_model"] == "gpt-4-turbo-2024-04-09-FC"  # not the data's gpt-4o
    assert shown["panel"]["k"] == 3 and shown["panel"]["missing_drafts"] == 0
