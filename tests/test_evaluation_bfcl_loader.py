"""The BFCL loader on hand-written files: Python placeholders in answers, orphan answers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation import _bfcl, load_data

FAST, FRONTIER = "gpt-4o-mini-2024-07-18-FC", "gpt-4o-2024-08-06-FC"
SPEC = {
    "name": "math.hypot",
    "description": "Hypotenuse of a right triangle.",
    "parameters": {
        "type": "dict",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
    },
}


def _write(folder: Path, results: dict[str, list[dict[str, object]]]) -> Path:
    bfcl = folder / "bfcl_v1_results"
    (bfcl / "results").mkdir(parents=True)
    questions = [
        {"id": f"simple_{i}", "category": "simple", "question": q, "function": SPEC}
        for i, q in enumerate(["Hypotenuse of sides 4 and 5?", "Hypotenuse of sides 6 and 8?"])
    ]
    (bfcl / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    for model, rows in results.items():
        lines = "".join(json.dumps(r) + "\n" for r in rows)
        (bfcl / "results" / f"{model}.jsonl").write_text(lines)
    return folder


def _row(qid: str, result: object, *, correct: bool = True) -> dict[str, object]:
    return {
        "id": qid,
        "category": "simple",
        "result": result,
        "input_token_count": 100,
        "output_token_count": 10,
        "latency_s": 0.5,
        "correct": correct,
        "error_type": None if correct else "value_error:others",
        "error": None,
    }


@pytest.mark.parametrize(
    ("source", "arguments"),
    [
        ("[math.hypot(x=4, y=...)]", {"x": 4, "y": "..."}),
        ("[math.hypot(x=[1, ...], y={1, 2})]", {"x": "[1, ...]", "y": "{1, 2}"}),
        ("[math.hypot(x=b'4', y=1j)]", {"x": "b'4'", "y": "1j"}),
        ("[math.hypot(x=(4, 5), y=None)]", {"x": [4, 5], "y": None}),
    ],
)
def test_python_values_json_cannot_hold_are_kept_as_source(
    source: str, arguments: dict[str, object]
) -> None:
    text, calls = _bfcl.parse_result(source)
    assert text == "" and calls[0].name == "math_hypot"
    assert calls[0].parsed_arguments() == arguments


@pytest.mark.parametrize("category", ["java", "javascript"])
def test_java_and_javascript_prompt_values_stay_the_literals_written(category: str) -> None:
    # the tools declare these parameters as strings holding the language's literal, and
    # BFCL's decoder hands its checker the text written: so does the loader
    source = "[Game.finish(layout=gameLayout, success=true, n=5, opts={'nm': 'Bar'}, s='x y')]"
    text, calls = _bfcl.parse_result(source, category=category)
    assert text == "" and calls[0].name == "Game_finish"
    assert calls[0].parsed_arguments() == {
        "layout": "gameLayout",
        "success": "true",
        "n": "5",
        "opts": "{'nm': 'Bar'}",
        "s": "x y",
    }
    # a Python question keeps Python's values
    _, python = _bfcl.parse_result(source, category="simple")
    assert python[0].parsed_arguments()["n"] == 5


def test_an_answer_with_an_ellipsis_loads_and_evaluates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _write(
        tmp_path,
        {
            FAST: [_row("simple_0", "[math.hypot(x=4, y=...)]", correct=False)],
            FRONTIER: [_row("simple_0", [{"math_hypot": '{"x": 4, "y": 5}'}])],
        },
    )
    ds = load_data("bfcl", data_dir=folder)
    (row,) = ds.rows
    calls = row.outcomes[FAST].tool_calls or ()
    assert calls[0].parsed_arguments() == {"x": 4, "y": "..."}

    monkeypatch.setenv("TIERED_ROUTER_DATA_DIR", str(folder))
    result = CliRunner().invoke(build_app(), ["eval", "--data", "bfcl", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{") :])


def test_answers_whose_question_is_missing_are_counted_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    answers = [_row("simple_0", [{"math_hypot": '{"x": 4, "y": 5}'}])]
    orphans = [_row("simple_7", "[math.hypot(x=1, y=2)]"), _row("simple_9", "no")]
    folder = _write(tmp_path, {FAST: answers + orphans, FRONTIER: answers + orphans[:1]})
    with caplog.at_level(logging.WARNING, logger="tiered_router.evaluation.sources"):
        ds = load_data("bfcl", data_dir=folder)
    assert [r.id for r in ds.rows] == ["simple_0"]
    expected = "3 recorded answers (2 ids, e.g. simple_7) were left out: their question is not in"
    assert any(n.startswith(expected) for n in ds.notes), ds.notes
    assert [r.getMessage() for r in caplog.records if expected in r.getMessage()]


def test_no_warning_when_every_answer_has_its_question(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    answers = [_row("simple_1", [{"math_hypot": '{"x": 6, "y": 8}'}])]
    folder = _write(tmp_path, {FAST: answers, FRONTIER: answers})
    with caplog.at_level(logging.WARNING, logger="tiered_router.evaluation.sources"):
        ds = load_data("bfcl", data_dir=folder)
    assert len(ds.rows) == 1 and not any("left out" in n for n in ds.notes)
    assert not caplog.records
