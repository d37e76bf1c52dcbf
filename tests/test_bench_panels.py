"""The panel benchmarks' logic: bench_mot.py on a made-up checkout, bench_panel.py's pieces.

The real MoT data (MurongYue/LLM_MoT_cascade, no licence) is never copied here: the rows below
are invented in the same shape. With ``TIERED_ROUTER_MOT_DIR`` set to a checkout, one more test
runs the benchmark on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


mot = _load("bench_mot")


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))


def checkout(tmp_path: Path) -> Path:
    """Four made-up date questions: the cheap model's CoT and PoT samples agree on 0 and 1
    (right), disagree on 2 (CoT right) and agree wrongly on 3; GPT-4 is right but on 3."""
    gold = ["05/01/2021", "01/02/2020", "12/31/1999", "03/03/2003"]
    cot = [["05/01/2021"] * 3, ["01/02/2020"] * 3, ["12/31/1999"] * 3, ["03/04/2003"] * 3]
    pot = [["5/1/2021"] * 3, ["01/02/2020"] * 3, ["12/30/1999"] * 3, ["03/04/2003"] * 3]
    for variant, samples in (("cot1", cot), ("pot1", pot)):
        _write(
            tmp_path / "GPT3_result" / f"date_{variant}.json",
            [
                {"question": f"q{i}", "answer": gold[i], "results": s, "generated": ["x" * 40] * 3}
                for i, s in enumerate(samples)
            ],
        )
    strong = ["05/01/2021", "01/02/2020", "12/31/1999", "01/01/2000"]
    _write(
        tmp_path / "GPT4_result" / "date_cot1.json",
        [
            {"question": f"q{i}", "answer": gold[i], "prediction": p, "generated": ["y" * 80]}
            for i, p in enumerate(strong)
        ],
    )
    prompts = tmp_path / "Evaluation" / "prompting" / "date.py"
    prompts.parent.mkdir(parents=True)
    prompts.write_text('date_CoT1_prompting = "' + "p" * 400 + '"\ndate_PoT1_prompting = "pp"\n')
    return tmp_path


def test_bench_mot_skips_without_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert mot.main([]) == 0
    assert "skipped" in capsys.readouterr().out


def test_bench_mot_panel_escalates_disagreements(tmp_path: Path) -> None:
    task = mot.load_task(checkout(tmp_path), "gpt-3.5-turbo", "date")
    assert task is not None and task.variants == ("cot1", "pot1") and len(task.items) == 4
    assert task.prompt_chars["cot1"] == 400
    f = mot.panel(task, k=2, min_agreement=1.0, scheme="mixed")
    # q0, q1 agree and are right; q2 escalates (GPT-4 right); q3 agrees wrongly
    assert f.escalated == pytest.approx(0.25) and f.accuracy == pytest.approx(0.75)
    # random at the same rate: one draft right on 3 of 4, GPT-4 right on 3 of 4
    assert f.random_same_rate == pytest.approx(0.75)
    same = mot.panel(task, k=2, min_agreement=1.0, scheme="same")
    assert same.escalated == 0.0  # the same prompt twice agrees with itself
    verify = mot.mot_verify(task, samples=3)
    assert verify is not None and verify.escalated == pytest.approx(0.25)
    assert f.cost > 0 and verify.cost > f.cost  # 6 drafts cost more than 2


def test_bench_mot_tune_and_report_run_on_a_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path)
    assert mot.main(["--data", str(root), "--tune"]) == 0
    out = capsys.readouterr().out
    assert "chosen: k=2" in out and "| 5 | same |" in out
    assert mot.main(["--data", str(root), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["router"].split(" (")[0] for r in records} >= {"panel k=2", "MoT verify"}
    assert all(r["model"] == "gpt-3.5-turbo" for r in records)  # no Llama files here


def test_answers_compare_as_mot_does() -> None:
    assert mot.same_answer("number:18", "number:18.0")
    assert mot.same_answer("number:0.33", "number:0.333333")  # to the lesser precision
    assert not mot.same_answer("number:18", "number:19")
    assert mot._gold({"05/01/2021": 1, "04/30/2021": 0}) == "date:2021-05-01"
    assert mot.same_answer(mot._key("5/1/2021"), mot._gold("05/01/2021"))
    assert mot._key(None) is None


@pytest.mark.skipif(
    not os.environ.get("TIERED_ROUTER_MOT_DIR"), reason="TIERED_ROUTER_MOT_DIR not set"
)
def test_bench_mot_on_the_real_checkout() -> None:  # pragma: no cover - needs the data
    root = Path(os.environ["TIERED_ROUTER_MOT_DIR"])
    records = mot.report(root)
    date = [r for r in records if r["model"] == "gpt-3.5-turbo" and r["task"] == "date"]
    assert any(r["accuracy"] >= r["strong_accuracy"] and r["escalated"] <= 0.40 for r in date)
    for r in records:
        if r["role"].startswith("held out"):
            assert r["accuracy"] > r["random_same_rate"]


def test_bench_panel_split_and_exact_key() -> None:
    panel = _load("bench_panel")
    parts = {panel.part(f"simple_{i}") for i in range(40)}
    assert parts == {"tune", "report"}
    from tiered_router.evaluation import EvalRow, Outcome
    from tiered_router.turn import ToolCall

    row = EvalRow.build("r", [{"role": "user", "content": "x"}], {})
    a = Outcome(quality=1, tool_calls=(ToolCall(id="1", name="f", arguments='{"a": 1}'),))
    b = Outcome(quality=1, tool_calls=(ToolCall(id="2", name="f", arguments='{"a":1}'),))
    c = Outcome(quality=1, tool_calls=(ToolCall(id="3", name="f", arguments='{"a": 1.0, "b": 2}'),))
    assert panel._exact(a, "m", row) == panel._exact(b, "m", row)
    assert panel._exact(a, "m", row) != panel._exact(c, "m", row)
    assert panel._exact(Outcome(quality=1, text="hi"), "m", row).kind == "not_comparable"
