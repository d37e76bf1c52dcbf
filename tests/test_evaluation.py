"""Offline evaluation: dataset format, loaders, metrics, sweep and calibration."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from tiered_router.evaluation import (
    CalibrationError,
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    _bfcl,
    apgr,
    calibrate,
    cpt,
    find_data_dir,
    load_data,
    load_sample,
    pgr,
    read_dataset,
    sweep,
    write_dataset,
)
from tiered_router.evaluation.metrics import (
    CurvePoint,
    gate_confusion,
    oracle_curve,
    percentile,
    random_curve,
    threshold_curve,
)
from tiered_router.evaluation.sources import load_routellm
from tiered_router.evaluation.sweep import PathOutcome, RowRun
from tiered_router.turn import ToolCall, Usage

DATA = find_data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="shared data folder (../shared/data) absent")


# -- dataset format ------------------------------------------------------------------------


def _row(i: int, **outcomes: Outcome) -> EvalRow:
    return EvalRow.build(f"r{i}", [{"role": "user", "content": f"question {i}"}], outcomes)


def test_dataset_round_trips_through_jsonl_and_gzip(tmp_path: Path) -> None:
    calls = (ToolCall(id="c0", name="add", arguments='{"a": 1}'),)
    ds = Dataset(
        name="tiny",
        rows=(
            _row(
                0, weak=Outcome(quality=1.0, text="4", usage=Usage(input_tokens=5, output_tokens=1))
            ),
            _row(1, weak=Outcome(quality=0.0, tool_calls=calls, latency_s=0.5, cost=0.01)),
        ),
        fast_model="weak",
        frontier_model="weak",
    )
    for name in ("d.jsonl", "d.jsonl.gz"):
        path = write_dataset(ds, tmp_path / name)
        back = read_dataset(path)
        assert [r.id for r in back.rows] == ["r0", "r1"]
        assert back.rows[0].outcomes["weak"].text == "4"
        assert back.rows[1].outcomes["weak"].tool_calls == calls
        assert back.rows[1].outcomes["weak"].latency_s == 0.5
        assert back.rows[0].turn.metadata["row_id"] == "r0"
        assert back.fast_model == "weak"
    with gzip.open(tmp_path / "d.jsonl.gz", "rt") as f:
        assert json.loads(f.readline())["format"] == "tiered-router-eval"


def test_read_dataset_names_file_and_line_of_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "messages": [{"role": "user", "content": "x"}], '
        '"outcomes": {"m": {"quality": 1}}}\n'
        '{"id": "b", "messages": [{"role": "user", "content": "x"}], '
        '"outcomes": {"m": {"quality": 7}}}\n'
    )
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: outcomes.m.quality"):
        read_dataset(path)
    path.write_text("not json\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: not JSON"):
        read_dataset(path)


def test_outcome_without_recorded_answer_is_not_recorded() -> None:
    assert not Outcome(quality=1.0).recorded
    assert Outcome(quality=1.0, text="").recorded
    assert Outcome(quality=0.0, text="abcd" * 10).output_tokens() == 10


# -- bundled sample ------------------------------------------------------------------------


def test_bundled_sample_is_redistributable_exam_rows() -> None:
    from tiered_router.evaluation._sample import FAST_KEY, FRONTIER_KEY

    ds = load_sample()
    assert len(ds) == 500
    sources = [r.turn.metadata["source"] for r in ds.rows]
    assert sources.count("mmlu") == 300
    assert sources.count("gsm8k") == 200
    # BFCL-Result's recorded tool calls have no licence file: never bundled
    assert "bfcl" not in sources and "BFCL-Result" not in ds.source
    assert set(ds.models) == {FRONTIER_KEY, FAST_KEY}
    assert "ATTRIBUTION.md" in ds.license
    gsm = next(r for r in ds.rows if r.id.startswith("gsm8k"))
    assert gsm.outcomes[FRONTIER_KEY].text  # responses are kept for GSM8K
    mmlu = next(r for r in ds.rows if r.id.startswith("mmlu"))
    assert not mmlu.outcomes[FRONTIER_KEY].recorded
    assert mmlu.outcomes[FAST_KEY].cost is not None
    # every outcome is priced at its own model's list price, and timed by the policy
    assert all(
        o.cost is not None and o.latency_s is None for r in ds.rows for o in r.outcomes.values()
    )


def test_bundled_sample_has_its_attribution() -> None:
    notice = Path(__file__).parents[1] / "tiered_router" / "evaluation" / "data" / "ATTRIBUTION.md"
    text = notice.read_text()
    assert "lm-sys/RouteLLM" in text and "Apache" in text
    assert "BFCL-Result" in text  # named as what is left out, and why


def test_load_data_sample_and_unknown_name() -> None:
    assert load_data("sample").fast_model == "Mixtral-8x7B-Instruct"
    with pytest.raises(DatasetError, match="known name"):
        load_data("no-such-data")
    with pytest.raises(DatasetError, match="no outcomes for model 'nope'"):
        load_data("sample:nope->gpt-4-1106-preview")


# -- shared data (skipped when absent) -----------------------------------------------------


@needs_data
def test_routellm_loader_drops_contaminated_rows() -> None:
    assert DATA is not None
    mmlu = load_routellm(DATA, "mmlu")
    everything = load_routellm(DATA, "mmlu", include_contaminated=True)
    assert 0 < len(everything) - len(mmlu) <= 5
    gsm = load_data("gsm8k", data_dir=DATA)
    assert all(r.outcomes[gsm.fast_model or ""].text is not None for r in gsm.rows[:50])
    weak = sum(r.outcomes["mistralai/Mixtral-8x7B-Instruct-v0.1"].quality for r in mmlu.rows)
    strong = sum(r.outcomes["gpt-4-1106-preview"].quality for r in mmlu.rows)
    assert weak / len(mmlu) < strong / len(mmlu)  # GPT-4 beats Mixtral on MMLU


@needs_data
def test_routerbench_loader_keeps_recorded_dollar_cost() -> None:
    ds = load_data("arc_challenge", data_dir=DATA)
    row = ds.rows[0]
    assert (
        set(row.outcomes) == {"gpt-3.5-turbo-1106", "gpt-4-1106-preview"} or len(row.outcomes) > 2
    )
    strong = row.outcomes["gpt-4-1106-preview"]
    assert strong.cost is not None and strong.cost > 0 and strong.text
    assert len(load_data("routerbench", data_dir=DATA)) > len(ds)


@needs_data
def test_bfcl_loader_converts_specs_and_calls() -> None:
    ds = load_data("bfcl:gpt-4o-mini-2024-07-18-FC->gpt-4o-2024-08-06-FC", data_dir=DATA)
    row = ds.get("simple_1")
    assert row is not None and row.turn.tools is not None
    tool = row.turn.tools[0]
    assert tool.name == "math_factorial"  # "." becomes "_" as in function-calling mode
    assert tool.parameters["type"] == "object"
    text = json.dumps([t.parameters for r in ds.rows for t in r.turn.tools or ()])
    assert '"type": "dict"' not in text and '"type": "float"' not in text
    answer = row.outcomes["gpt-4o-mini-2024-07-18-FC"]
    assert answer.tool_calls and answer.tool_calls[0].name == "math_factorial"
    assert answer.latency_s is not None and answer.usage is not None and answer.cost is not None
    prompt_mode = load_data("bfcl:gpt-4o-mini-2024-07-18->gpt-4o-2024-08-06", data_dir=DATA)
    parsed = prompt_mode.get("simple_1")
    assert parsed is not None
    assert parsed.outcomes["gpt-4o-mini-2024-07-18"].tool_calls[0].parsed_arguments() == {  # type: ignore[index]
        "number": 5
    }
    fenced = parsed.outcomes["gpt-4o-2024-08-06"]
    assert fenced.tool_calls == () and (fenced.text or "").startswith("```")


@needs_data
def test_alpacaeval_loader_scores_preferences() -> None:
    ds = load_data("alpacaeval", data_dir=DATA)
    assert all(r.outcomes["gpt4_1106_preview"].quality == 0.5 for r in ds.rows)
    weak = [r.outcomes["gpt-3.5-turbo-1106"].quality for r in ds.rows]
    assert all(0 <= q <= 1 for q in weak)
    assert 0.03 < sum(weak) / len(weak) < 0.2  # README: mean win rate 0.092 on the full data


@needs_data
def test_combined_names_concatenate_sources() -> None:
    both = load_data("gsm8k+mbpp", data_dir=DATA)
    gsm, mbpp = load_data("gsm8k", data_dir=DATA), load_data("mbpp", data_dir=DATA)
    assert len(both) == len(gsm) + len(mbpp)
    assert both.name == "gsm8k+mbpp" and both.fast_model is None  # the pairs differ
    paired = load_data("gsm8k+mbpp:gpt-4-1106-preview->gpt-4-1106-preview", data_dir=DATA)
    assert len(paired) == len(both)  # both sources have GPT-4-Turbo outcomes


def test_mt_bench_loader_builds_two_step_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "routellm_evals"
    folder.mkdir()
    (folder / "mt_bench_questions.jsonl").write_text(
        json.dumps(
            {
                "question_id": 81,
                "category": "writing",
                "turns": ["Write.", "Shorter."],
                "reference": None,
                "contaminated": False,
            }
        )
        + "\n"
    )
    lines = [
        {"question_id": 81, "model": m, "turn": t, "score": s}
        for m, t, s in (("weak", 1, 6), ("weak", 2, 4), ("strong", 1, 9), ("strong", 2, 10))
    ]
    (folder / "mt_bench_judgements.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    ds = load_routellm(tmp_path, "mt_bench")
    assert [r.id for r in ds.rows] == ["mt_bench.81.1", "mt_bench.81.2"]
    assert {r.task_id for r in ds.rows} == {"mt_bench.81"}
    assert ds.rows[1].turn.step == 1 and len(ds.rows[1].turn.messages) == 2
    assert ds.rows[0].outcomes["strong"].quality == 0.9


# -- BFCL conversion -----------------------------------------------------------------------


def test_bfcl_types_become_json_schema() -> None:
    spec = {
        "type": "dict",
        "properties": {
            "x": {"type": "float"},
            "pair": {"type": "tuple", "items": {"type": "integer"}},
            "opts": {"type": "dict", "properties": {"deep": {"type": "boolean"}}},
            "thing": {"type": "any", "description": "anything"},
        },
        "required": ["x"],
    }
    schema = _bfcl.to_json_schema(spec)
    assert schema["type"] == "object" and schema["required"] == ["x"]
    props = schema["properties"]
    assert props["x"]["type"] == "number"
    assert props["pair"] == {"type": "array", "items": {"type": "integer"}}
    assert props["opts"]["properties"]["deep"]["type"] == "boolean"
    assert "type" not in props["thing"]
    java = _bfcl.to_json_schema(
        {"type": "dict", "properties": {"n": {"type": "long"}}}, language="java"
    )
    assert java["properties"]["n"]["type"] == "string"


def test_bfcl_results_become_tool_calls_or_text() -> None:
    text, calls = _bfcl.parse_result([{"math_hypot": '{"x": 4, "y": 5}'}])
    assert (
        text == ""
        and calls[0].name == "math_hypot"
        and calls[0].parsed_arguments() == {"x": 4, "y": 5}
    )
    _, calls = _bfcl.parse_result("[math.hypot(x=4, y=5), f(s='a')]")
    assert [c.name for c in calls] == ["math_hypot", "f"]
    assert calls[1].parsed_arguments() == {"s": "a"}
    _, calls = _bfcl.parse_result('{"tool_calls": [{"name": "g", "arguments": {"k": 1}}]}')
    assert calls[0].parsed_arguments() == {"k": 1}
    text, calls = _bfcl.parse_result("```json\n[f(x=1)]\n```")
    assert calls == () and text.startswith("```")


# -- metrics -------------------------------------------------------------------------------


def test_pgr_formula() -> None:
    assert pgr(0.75, 0.5, 1.0) == pytest.approx(0.5)
    assert pgr(0.5, 0.5, 1.0) == 0.0 and pgr(1.0, 0.5, 1.0) == 1.0
    with pytest.raises(ValueError, match="same quality"):
        pgr(0.5, 0.7, 0.7)


def test_apgr_of_random_router_is_one_half() -> None:
    assert apgr(random_curve(0.3, 0.9), q_weak=0.3, q_strong=0.9) == pytest.approx(0.5)
    assert cpt(random_curve(0.3, 0.9), 0.5, q_weak=0.3, q_strong=0.9) == pytest.approx(0.5)
    assert cpt(random_curve(0.3, 0.9), 0.8, q_weak=0.3, q_strong=0.9) == pytest.approx(0.8)


def test_apgr_and_cpt_of_oracle_on_hand_made_rows() -> None:
    weak = [0.0, 0.0, 0.0, 1.0]
    strong = [1.0, 1.0, 0.0, 1.0]  # q_weak 0.25, q_strong 0.75
    curve = oracle_curve(weak, strong)
    assert [(p.strong_share, p.quality) for p in curve][:3] == [
        (0.0, 0.25),
        (0.25, 0.5),
        (0.5, 0.75),
    ]
    assert apgr(curve, q_weak=0.25, q_strong=0.75) == pytest.approx(0.75)
    assert cpt(curve, 0.5, q_weak=0.25, q_strong=0.75) == pytest.approx(0.25)
    assert cpt(curve, 0.8, q_weak=0.25, q_strong=0.75) == pytest.approx(0.4)
    # a perfect scorer is the oracle; the reversed one is worse than random
    perfect = threshold_curve([0.9, 0.8, 0.1, 0.2], weak, strong)
    assert apgr(perfect, q_weak=0.25, q_strong=0.75) == pytest.approx(0.75)
    reverse = threshold_curve([0.1, 0.2, 0.9, 0.8], weak, strong)
    assert apgr(reverse, q_weak=0.25, q_strong=0.75) < 0.5


def test_cpt_is_none_when_never_reached_and_curve_is_closed() -> None:
    flat = [CurvePoint(strong_share=0.5, quality=0.5)]
    assert cpt(flat, 0.8, q_weak=0.5, q_strong=1.0) == pytest.approx(0.9)  # via the (1, 1) anchor
    below = [CurvePoint(strong_share=1.0, quality=0.6)]
    assert cpt(below, 0.8, q_weak=0.5, q_strong=1.0) is None


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile(list(map(float, range(101))), 95) == 95.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_gate_confusion_rates() -> None:
    # (passed, quality): 2 wrong (1 caught), 3 right (1 false alarm)
    g = gate_confusion([(False, 0.0), (True, 0.0), (False, 1.0), (True, 1.0), (True, 1.0)])
    assert (g.drafts, g.passed, g.failed, g.wrong) == (5, 3, 2, 2)
    assert g.p_wrong_given_pass == pytest.approx(1 / 3)
    assert g.p_fail_given_wrong == pytest.approx(0.5)
    assert g.p_fail_given_right == pytest.approx(1 / 3)
    assert gate_confusion([]).p_fail_given_wrong is None


# -- sweep and calibration -----------------------------------------------------------------


def _path(q: float, cost: float, tier: str, *, frontier: bool) -> PathOutcome:
    return PathOutcome(
        quality=q,
        cost=cost,
        latency_s=cost / 10,
        tier=tier,  # type: ignore[arg-type]
        frontier_called=frontier,
    )


def _run(i: int, score: float, fast_q: float, *, rule: str | None = None) -> RowRun:
    fast = _path(fast_q, 1.0, "fast", frontier=False)
    front = _path(1.0, 10.0, "frontier", frontier=True)
    return RowRun(
        row_id=f"r{i}",
        task_id=None,
        score=score,
        rule=rule,
        decided="frontier" if rule or score > 0.5 else "fast",
        headline=front if rule or score > 0.5 else fast,
        fast=fast,
        frontier=front,
        fast_label=fast_q,
        frontier_label=1.0,
        fast_only_cost=1.0,
        fast_verdict=None,
    )


ROWS = [_run(1, 0.1, 1.0), _run(2, 0.4, 0.0), _run(3, 0.7, 0.0), _run(4, 0.2, 0.0, rule="final")]


def test_sweep_prefix_sums_per_threshold() -> None:
    points = sweep(ROWS)
    got = [(p.threshold, p.quality, p.cost, p.fast_share) for p in points]
    assert got == [
        (0.05, 1.0, 40.0, 0.0),
        (0.2, 1.0, 31.0, 0.25),
        (0.6, 0.75, 22.0, 0.5),
        (1.0, 0.5, 13.0, 0.75),
    ]
    assert points[1].strong_share == 0.75


def test_sweep_never_splits_equal_scores() -> None:
    rows = [_run(1, 0.3, 1.0), _run(2, 0.3, 0.0)]
    assert [p.routed_fast for p in sweep(rows)] == [0, 2]


def test_calibrate_picks_the_threshold_of_each_target() -> None:
    points = sweep(ROWS)
    assert calibrate(points, fast_share=0.5).threshold == 0.6
    assert calibrate(points, fast_share=0.2).threshold == 0.2
    assert calibrate(points, quality_retained=0.9, frontier_quality=1.0).threshold == 0.2
    assert calibrate(points, quality_retained=0.5, frontier_quality=1.0).threshold == 1.0
    assert calibrate(points, max_cost_per_turn=31 / 4).threshold == 0.2
    assert calibrate(points, max_cost_share=0.6, frontier_cost=40.0).threshold == 0.6
    with pytest.raises(CalibrationError, match="the most is 75.0%"):
        calibrate(points, fast_share=0.9)
    with pytest.raises(CalibrationError, match="cheapest"):
        calibrate(points, max_cost_per_turn=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        calibrate(points, fast_share=0.5, max_cost_per_turn=1.0)


def test_sweep_threshold_is_a_short_decimal_between_scores() -> None:
    rows = [_run(i, s, 1.0) for i, s in enumerate([0.123456, 0.1235, 0.5, 0.77])]
    thresholds = [p.threshold for p in sweep(rows)]
    assert thresholds[0] == 0.1
    assert 0.123456 <= thresholds[1] < 0.1235 and len(str(thresholds[1])) <= 8
    assert all(math.isfinite(t) for t in thresholds) and thresholds[-1] == 1.0


@needs_data
def test_sample_builder_is_reproducible(tmp_path: Path) -> None:
    from tiered_router.evaluation._sample import build_sample

    assert DATA is not None
    built = build_sample(DATA, tmp_path / "s.jsonl.gz", calibration=tmp_path / "c.jsonl.gz")
    assert len(built) == 500
    calibration = read_dataset(tmp_path / "c.jsonl.gz")
    # the calibration rows (not bundled) include BFCL's agent turns; the sample does not
    assert any(r.turn.tools for r in calibration.rows)
    assert not any(r.turn.tools for r in built.rows)
    # the default policy is calibrated on rows the sample does not contain
    assert not {r.id for r in calibration.rows} & {r.id for r in built.rows}
    assert len(calibration) > 10_000
    bundled = Path(__file__).parents[1] / "tiered_router/evaluation/data/sample.jsonl.gz"
    fresh = gzip.decompress((tmp_path / "s.jsonl.gz").read_bytes())
    assert fresh == gzip.decompress(bundled.read_bytes())


def test_baselines_at_the_policys_frontier_share() -> None:
    from tiered_router.evaluation.baselines import baselines

    # rows 1-3 are free (no rule); row 4 was sent to the frontier by a rule
    # frontier share 2/4: the ruled row plus one free row
    got = {b.name: b for b in baselines(ROWS, [10, 30, 20, 99], frontier_share=0.5)}
    length = got["prompt length"]
    # the longest free prompt (row 2, fast wrong) goes up: rows 1 (fast right), 3 (fast wrong)
    assert length.frontier_share == 0.5
    assert length.quality == (1.0 + 1.0 + 0.0 + 1.0) / 4
    assert length.cost == 1.0 + 10.0 + 1.0 + 10.0
    rand = got["random"]
    # a third of the free rows on average: quality (1 + 0 + 0) + 1/3 * 2, plus the ruled 1
    assert rand.frontier_share == 0.5
    assert math.isclose(rand.quality, (1.0 + 2 / 3 + 1.0) / 4)
    assert math.isclose(rand.cost, 3.0 + 9.0 + 10.0)
    assert baselines([], [], frontier_share=0.5) == ()
    with pytest.raises(ValueError, match="prompt lengths"):
        baselines(ROWS, [1], frontier_share=0.5)
