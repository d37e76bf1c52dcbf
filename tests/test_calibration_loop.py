"""Traces -> dataset -> calibrate: the loop of docs/calibration.md, run as the page shows it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tiered_router import JSONLSink, MemorySink, Router, Turn, load_policy
from tiered_router.cli import build_app
from tiered_router.evaluation.dataset import DatasetError, read_dataset
from tiered_router.evaluation.traces import dataset_from_traces, read_labels
from tiered_router.testing import Reply, ScriptedServer

PAGE = Path(__file__).resolve().parents[1] / "docs" / "calibration.md"


def _walkthrough() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    return str(blocks[0])


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "INCEPTION_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    exec(compile(_walkthrough(), "docs/calibration.md", "exec"), {})  # noqa: S102
    return tmp_path


def test_traces_to_dataset_to_calibrate_and_write(recorded: Path) -> None:
    runner = CliRunner()
    app = build_app()
    built = runner.invoke(app, ["dataset", "from-traces", "traces.jsonl", "-o", "my_traffic.jsonl"])
    assert built.exit_code == 0, built.output
    assert "wrote 40 rows" in built.output and "20 with outcomes of both tiers" in built.output
    dataset = read_dataset(recorded / "my_traffic.jsonl")
    assert (dataset.fast_model, dataset.frontier_model) == ("mercury-2", "gpt-5.2")
    hard = [r for r in dataset.rows if len(r.outcomes) == 2 and "Prove" in str(r.turn.messages)]
    assert hard and all(r.outcomes["mercury-2"].quality == 0.0 for r in hard)
    assert all(r.outcomes["gpt-5.2"].quality == 1.0 for r in hard)

    # the optional step: twenty labelled turns are too few to fit a scorer, as the page says
    fit = runner.invoke(
        app, ["fit-scorer", "policy.yaml", "--data", "my_traffic.jsonl", "-o", "scorer.json"]
    )
    assert fit.exit_code == 1
    shown = re.search(r"fit-scorer policy.yaml .*\n(error: .*)\n", PAGE.read_text("utf-8"))
    assert shown is not None and fit.output.strip() == shown.group(1)
    assert not (recorded / "scorer.json").exists()

    args = ["calibrate", "policy.yaml", "--data", "my_traffic.jsonl"]
    # twenty labelled turns: too few to write a threshold without --force, as the page shows
    refused = runner.invoke(app, [*args, "--target-quality-retained", "0.95", "--write"])
    assert refused.exit_code == 1
    page = " ".join(PAGE.read_text("utf-8").split())
    shown = refused.output.strip().splitlines()[-1]
    assert shown.startswith("error: not writing the threshold 0.6: it comes from 20 turn(s)")
    assert "bootstrap interval" in shown and " ".join(shown.split()) in page
    assert load_policy(recorded / "policy.yaml").scoring.threshold == 0.05
    result = runner.invoke(
        app, [*args, "--target-quality-retained", "0.95", "--write", "--force", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["written"] is True and out["pair_differs_from_policy"] == []
    assert out["small_sample"].startswith("only 20 turn(s)")
    interval = out["threshold_interval"]
    assert interval["low"] <= out["expected"]["threshold"] <= interval["high"]
    assert out["previous_threshold"] == 0.05
    expected = out["expected"]
    assert expected["quality_retained"] >= 0.95 and expected["fast_share"] > 0
    assert expected["cost_saved"] > 0
    written = load_policy(recorded / "policy.yaml").scoring.threshold
    assert written == expected["threshold"] > 0.05

    refused = runner.invoke(
        app, [*args[:2], "--data", "sample", "--target-fast-share", "0.5", "--write"]
    )
    assert refused.exit_code == 1
    assert "not writing the threshold" in refused.output
    assert "warning: the data replays gpt-4-1106-preview on the frontier tier" in refused.output
    assert load_policy(recorded / "policy.yaml").scoring.threshold == written
    forced = runner.invoke(
        app,
        [
            *args[:2],
            "--data",
            "sample",
            "--target-fast-share",
            "0.5",
            "--write",
            "--force",
            "--json",
        ],
    )
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.output)["pair_differs_from_policy"]


def test_eval_names_the_pair_and_prices(recorded: Path) -> None:
    runner = CliRunner()
    app = build_app()
    runner.invoke(app, ["dataset", "from-traces", "traces.jsonl", "-o", "d.jsonl"])
    result = runner.invoke(app, ["eval", "policy.yaml", "--data", "d.jsonl"])
    assert result.exit_code == 0, result.output
    assert "replaying traces: fast = mercury-2, frontier = gpt-5.2" in result.output
    assert "($1.75 in / $14 out per 1M tokens)" in result.output
    assert "warning: the data replays" not in result.output  # the policy's own pair
    assert "warning: only 20 turn(s) with outcomes of both tiers" in result.output


def _record_one(tmp_path: Path, record: Any, **labels: float) -> tuple[Path, MemorySink]:
    sink = MemorySink()
    with ScriptedServer() as server:
        server.script([Reply.bad_json()], model="fast-m")
        server.script([Reply.json({"a": 1})], model="big-m")
        policy = {
            "version": 1,
            "backends": {
                "f": {"base_url": server.base_url, "model": "fast-m", "api_key": "k"},
                "b": {"base_url": server.base_url, "model": "big-m", "api_key": "k"},
            },
            "tiers": {"fast": "f", "frontier": "b"},
        }
        path = tmp_path / "t.jsonl"
        with Router(policy, sinks=[sink, JSONLSink(path)], record=record) as router:
            turn = Turn(
                [{"role": "user", "content": "Mail bob@example.com the JSON"}],
                response_format={"type": "json_object"},
                id="t1",
            )
            router.complete(turn)
    return path, sink


def test_record_holds_the_request_and_each_output_and_the_hook_redacts(tmp_path: Path) -> None:
    def redact(record: dict[str, Any]) -> dict[str, Any]:
        for m in record["request"]["messages"]:
            m["content"] = m["content"].replace("bob@example.com", "<email>")
        return record

    path, sink = _record_one(tmp_path, redact)
    trace = sink.traces[-1]
    assert trace.record is not None
    assert trace.record["request"]["messages"][0]["content"] == "Mail <email> the JSON"
    assert trace.record["request"]["response_format"] == {"type": "json_object"}
    outputs = trace.record["outputs"]
    assert len(outputs) == len(trace.attempts) == 2
    assert outputs[0]["text"] == '{"answer": 4' and outputs[1]["text"] == '{"a": 1}'
    line = json.loads(path.read_text().splitlines()[0])
    assert "bob@example.com" not in json.dumps(line) and line["record"]["outputs"]

    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        '{"turn_id": "t1", "quality": 0.5}\n{"turn_id": "t1", "model": "fast-m", "quality": 0.25}\n'
    )
    dataset, stats = dataset_from_traces([path], labels=labels)
    assert stats.rows == 1 and stats.both == 1 and stats.labelled == 2
    outcomes = dataset.rows[0].outcomes
    assert outcomes["fast-m"].quality == 0.25 and outcomes["big-m"].quality == 0.5
    assert read_labels(labels)[("t1", None)] == 0.5


def test_no_record_without_opt_in_and_hooks_that_fail_or_drop(tmp_path: Path) -> None:
    _, sink = _record_one(tmp_path, False)
    assert sink.traces[-1].record is None
    assert "record" not in sink.traces[-1].to_dict()
    _, sink = _record_one(tmp_path, lambda record: None)
    assert sink.traces[-1].record is None

    def broken(record: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("oops")

    path, sink = _record_one(tmp_path, broken)
    assert sink.traces[-1].record is None
    with pytest.raises(DatasetError, match="record=True"):
        dataset_from_traces([path])


def test_bad_trace_and_label_files_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(DatasetError, match="bad.jsonl:1"):
        dataset_from_traces([bad])
    with pytest.raises(DatasetError, match="no such trace file"):
        dataset_from_traces([tmp_path / "missing.jsonl"])
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"turn_id": "x", "quality": 2}\n')
    with pytest.raises(DatasetError, match="labels.jsonl:1: quality"):
        read_labels(labels)
    result = CliRunner().invoke(build_app(), ["dataset", "from-traces", str(bad)])
    assert result.exit_code == 1 and "error:" in result.output


def test_the_shipped_learned_scorer_on_its_training_data_is_flagged(tmp_path: Path) -> None:
    policy = tmp_path / "learned.yaml"
    policy.write_text(
        "version: 1\n"
        "backends:\n"
        "  fast: {type: replay, model: 'Mixtral-8x7B-Instruct',"
        " options: {data: sample}}\n"
        "  frontier: {type: replay, model: 'gpt-4-1106-preview',"
        " options: {data: sample}}\n"
        "tiers: {fast: fast, frontier: frontier}\n"
        "scoring: {type: learned, threshold: 0.5}\n"
    )
    runner = CliRunner()
    shown = runner.invoke(build_app(), ["eval", str(policy)])
    assert shown.exit_code == 0, shown.output
    assert "in-sample (optimistic)" in shown.output
    assert "warning: the data replays" not in shown.output  # the pair is the policy's
    as_json = runner.invoke(build_app(), ["eval", str(policy), "--json"])
    assert json.loads(as_json.output)["in_sample"] is True
    heuristic = policy.read_text().replace("type: learned", "type: heuristic")
    policy.write_text(heuristic)
    plain = runner.invoke(build_app(), ["eval", str(policy), "--json"])
    assert json.loads(plain.output)["in_sample"] is False
