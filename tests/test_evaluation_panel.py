"""Offline replay of draft panels: ``samples`` in the dataset format, ``eval`` and ``calibrate``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from routerkit import ADD, PAIR_POLICY
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation import (
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    evaluate,
    read_dataset,
    write_dataset,
)
from tiered_router.evaluation.calibration import Target, calibrate_panel
from tiered_router.policy import load_policy


def call(a: int, b: int, *, quality: float, cost: float = 0.001) -> Outcome:
    """A draft that calls add(a, b)."""
    from tiered_router.turn import ToolCall

    args = json.dumps({"a": a, "b": b})
    return Outcome(
        quality=quality,
        tool_calls=(ToolCall(id="c", name="add", arguments=args),),
        finish_reason="tool_calls",
        cost=cost,
        latency_s=0.1,
    )


def dataset(n: int = 10) -> Dataset:
    """Ten rows "add 1 and i": the fast model is right on the first six (``n``: that pattern
    repeated over ``n`` rows).

    Its two samples agree with it where it is right (rows 0-5) and disagree with it and with
    each other where it is wrong (rows 6-9); the second fast model ("other") matches the fast
    model everywhere except rows 6-9, where it is right. The frontier is always right.
    """
    rows = []
    for i in range(n):
        right = i % 10 < 6
        fast = call(1, i if right else i + 1, quality=1.0 if right else 0.0)
        samples = (
            (call(1, i, quality=1.0), call(1, i, quality=1.0))
            if right
            else (call(1, i + 2, quality=0.0), call(1, i, quality=1.0))
        )
        fast = dataclasses.replace(fast, samples=samples)
        rows.append(
            EvalRow.build(
                f"r{i}",
                [{"role": "user", "content": f"add 1 and {i}"}],
                {
                    "fast": fast,
                    "other": call(1, i, quality=1.0, cost=0.002),
                    "big": call(1, i, quality=1.0, cost=0.05),
                },
                tools=[ADD],
            )
        )
    return Dataset(name="adds", rows=tuple(rows), fast_model="fast", frontier_model="big")


POLICY = PAIR_POLICY.split("drafts:")[0]  # the two drafters and the frontier, no panel


def test_samples_and_answers_round_trip_through_the_file(tmp_path: Path) -> None:
    data = dataset()
    path = write_dataset(data, tmp_path / "d.jsonl")
    back = read_dataset(path)
    fast = back.rows[7].outcomes["fast"]
    assert len(fast.samples) == 2 and fast.samples[1].quality == 1.0
    assert fast.samples[0].tool_calls is not None
    line = json.loads(path.read_text().splitlines()[1])
    assert "samples" in line["outcomes"]["fast"] and "samples" not in line["outcomes"]["big"]
    recorded = Outcome.from_dict({"quality": 1, "text": "x", "answer": 18.0})
    assert recorded.answer == "18.0"


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        ({"quality": 1, "samples": {"quality": 1}}, "samples: must be a list"),
        ({"quality": 1, "samples": [{"quality": 1, "samples": []}]}, "cannot have samples"),
        ({"quality": 1, "samples": [{"quality": 2}]}, r"samples\[0\]\.quality"),
        ({"quality": 1, "answer": ["x"]}, "answer: must be a string"),
    ],
)
def test_bad_samples_are_refused_with_where(outcome: dict[str, object], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        Outcome.from_dict(outcome, where="row 3: outcomes.fast")


def test_eval_replays_a_panel_from_samples_and_counts_every_draft() -> None:
    policy = load_policy(POLICY + "drafts: {k: 3, min_agreement: 0.67}\n")
    result = evaluate(policy, dataset())
    panel = result.panel
    assert panel is not None and panel.models == ("fast", "fast", "fast")
    # rows 6-9: three different answers -> disagreement -> the frontier answers
    assert (panel.agreed, panel.disagreed, panel.not_comparable) == (6, 4, 0)
    s = result.summary
    assert s.quality == 1.0 and s.escalation_reasons == {"drafts_disagree": 4}
    assert s.cost == pytest.approx(10 * 3 * 0.001 + 4 * 0.05)  # all drafts, four escalations
    assert panel.draft_cost == pytest.approx(0.03)
    names = [b.name for b in result.baselines]
    assert names == ["random", "prompt length", "random (same cost)", "prompt length (same cost)"]
    same_cost = result.baselines[2]
    assert same_cost.cost == pytest.approx(s.cost)
    assert same_cost.quality < s.quality  # random escalation at the same spend keeps less
    assert result.to_dict()["panel"]["disagreed"] == 4
    assert any("draft panel: k=3" in n for n in result.notes)


def test_without_drafts_nothing_changes() -> None:
    result = evaluate(load_policy(POLICY), dataset())
    assert result.panel is None
    assert result.summary.quality == pytest.approx(0.6)  # the single fast draft, gate passes
    assert [b.name for b in result.baselines] == ["random", "prompt length"]


def test_eval_replays_a_panel_of_several_recorded_models() -> None:
    policy = load_policy(POLICY + "drafts: {k: 2, backends: [fast, other], min_agreement: 1.0}\n")
    result = evaluate(policy, dataset())
    assert result.panel is not None and result.panel.models == ("fast", "other")
    assert (result.panel.agreed, result.panel.disagreed) == (6, 4)
    assert result.summary.cost == pytest.approx(10 * 0.003 + 4 * 0.05)


def test_missing_drafts_count_as_failed_and_are_noted() -> None:
    policy = load_policy(POLICY + "drafts: {k: 5, min_agreement: 0.8}\n")
    result = evaluate(policy, dataset())
    assert result.panel is not None and result.panel.missing_drafts == 10
    assert result.panel.agreed == 0  # 4 of 5 needed, three recorded
    assert (
        evaluate(
            load_policy(POLICY + "drafts: {k: 5, min_agreement: 0.6}\n"), dataset()
        ).panel.agreed
        == 6
    )  # type: ignore[union-attr]  # 3 of 5 suffice
    assert any("fewer than k drafts" in n for n in result.notes)


def test_a_panel_the_data_cannot_replay_is_said_and_left_out() -> None:
    text = POLICY.replace("  big:", "  nope: {model: nope}\n  big:")
    policy = load_policy(text + "drafts: {k: 2, backends: [fast, nope]}\n")
    result = evaluate(policy, dataset())
    assert result.panel is None and result.summary.quality == pytest.approx(0.6)
    assert any("drafts backend 'nope'" in n and "not replayed" in n for n in result.notes)
    rows = tuple(
        dataclasses.replace(
            r,
            outcomes={**r.outcomes, "fast": dataclasses.replace(r.outcomes["fast"], samples=())},
        )
        for r in dataset().rows
    )
    bare = dataclasses.replace(dataset(), rows=rows)
    result = evaluate(load_policy(POLICY + "drafts: {k: 3}\n"), bare)
    assert result.panel is None
    assert any("records no samples of fast" in n for n in result.notes)


def test_calibrate_sweeps_k_and_min_agreement() -> None:
    policy = load_policy(POLICY + "drafts: {k: 2, min_agreement: 1.0}\n")
    data = dataset()
    result = evaluate(policy, data)
    choice = calibrate_panel(result, Target(quality_retained=1.0), policy=policy, dataset=data)
    assert choice.tried > 6  # k = 1, 2, 3 (three drafts recorded) times the agreements
    assert choice.point.quality == 1.0
    # the cheapest panel that keeps everything: k=2 escalates rows 6-9 only (k=3 costs more)
    assert choice.k == 2
    assert choice.point.cost == pytest.approx(10 * 0.002 + 4 * 0.05)


def test_cli_eval_and_calibrate_with_a_panel(tmp_path: Path) -> None:
    # 250 rows: from 200 calibration rows on the bound is Fieller's (fewer get the exact one)
    data = write_dataset(dataset(250), tmp_path / "adds.jsonl")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + "drafts: {k: 3, min_agreement: 0.67}\n")
    app = build_app()
    out = CliRunner().invoke(app, ["eval", str(policy), "--data", str(data), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["panel"]["k"] == 3 and report["summary"]["escalations"] == 100
    text = CliRunner().invoke(app, ["eval", str(policy), "--data", str(data)])
    assert "draft panel: k=3" in text.output and "at the policy's cost" in text.output
    cal = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(policy),
            "--data",
            str(data),
            "--target-quality-retained",
            "1.0",
            "--write",
        ],
    )
    assert cal.exit_code == 0, cal.output
    written = load_policy(policy)
    # calibrate chooses per kind of turn (tools here) and writes drafts.kinds
    assert written.drafts is not None and written.drafts.for_kind("tools")[0] == 2
    assert "wrote scoring.threshold and drafts" in cal.output


def test_calibrate_on_few_rows_warns_refuses_to_write_and_shows_little(tmp_path: Path) -> None:
    data = write_dataset(dataset(), tmp_path / "adds.jsonl")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + "drafts: {k: 3, min_agreement: 0.67}\n")
    args = ["calibrate", str(policy), "--data", str(data), "--target-quality-retained", "0.7"]
    out = CliRunner().invoke(build_app(), args)
    assert out.exit_code == 0, out.output
    assert "warning: only 10 calibration row(s): fewer than 200" in out.output
    assert "fewer than 200 calibration rows for tools (10)" in out.output
    # the six agreed fast rows are all right, but six rows cannot show 100 %
    assert "lower bound 100.0%" not in out.output
    refused = CliRunner().invoke(build_app(), [*args, "--write"])
    assert refused.exit_code == 1 and "not writing" in refused.output
    as_json = json.loads(CliRunner().invoke(build_app(), [*args, "--json"]).output)
    assert len(as_json["warnings"]) == 2


def test_turns_drafts_when_leaves_out_keep_one_draft() -> None:
    policy = load_policy(POLICY + "drafts: {k: 3, min_agreement: 0.67, when: [json]}\n")
    result = evaluate(policy, dataset())
    assert result.panel is not None and result.panel.single_draft_rows == 10
    assert result.panel.agreed == 0 and result.summary.quality == pytest.approx(0.6)
    alone = evaluate(load_policy(POLICY), dataset()).summary
    assert result.summary.cost == pytest.approx(alone.cost)
