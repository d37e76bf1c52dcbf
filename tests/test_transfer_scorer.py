"""The transfer scorer: features, up-front signals, weights files, training, policy wiring."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_router import Turn, load_policy
from tiered_router.evaluation import find_data_dir
from tiered_router.scoring import TransferScorer, build_scorer
from tiered_router.scoring._transfer_fit import Example, fit_transfer, main
from tiered_router.scoring.transfer import (
    TransferModel,
    load_transfer_model,
    several_targets,
    tool_fit,
)

ROOT = Path(__file__).parents[1]
DATA = find_data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="shared data folder (../shared/data) absent")

CHOICE = "Which gas do plants take in?\nA. carbon dioxide gas\nB. oxygen gas\nC. helium\nD. neon"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _turn(text: str, **kw: object) -> Turn:
    return Turn([{"role": "user", "content": text}], **kw)  # type: ignore[arg-type]


def _model(length: float = 0.1, overlap: float = 2.0) -> TransferModel:
    return TransferModel.from_dict(
        {
            "format": "tiered-router/transfer-scorer",
            "version": 1,
            "blocks": {
                "choice": {"bias": -1.0, "weights": {"length": length, "option_overlap": overlap}},
                "open": {"bias": -1.0, "weights": {"length": length}},
            },
        }
    )


def test_longer_prompts_score_higher_and_contributions_add_up() -> None:
    scorer = TransferScorer(_model())
    short, long = scorer.score(_turn("hi")), scorer.score(_turn("word " * 400))
    assert long.value > short.value
    base = 1 / (1 + math.exp(1.0))
    assert math.isclose(sum(long.contributions.values()), long.value - base, rel_tol=1e-9)
    assert long.features["prompt_chars"] == 2000 and long.features["block"] == 1.0
    assert long.reasons[0].startswith("request 2000 characters (+")


def test_alike_options_score_higher_in_the_choice_block() -> None:
    scorer = TransferScorer(_model(length=0.0))
    alike = scorer.score(_turn(CHOICE))
    distinct = scorer.score(_turn(CHOICE.replace("oxygen gas", "a rock").replace(" gas", "")))
    assert alike.features["block"] == 0.0 and alike.features["option_overlap"] > 0
    assert alike.value > distinct.value
    assert any(r.startswith("options alike") for r in alike.reasons)


def test_shipped_weights_load_and_score() -> None:
    scorer = TransferScorer.default()
    weights = scorer.model.blocks
    assert weights["open"][1]["length"] > 0 and weights["choice"][1]["option_overlap"] > 0
    assert 0.0 < scorer.score(_turn(CHOICE)).value < 1.0
    assert "up_front=[]" in repr(scorer)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("What is the weather in Paris, London and Rome?", 3),
        ("Area of circles with radius 3 and 5", 2),
        ("Get the weather for both cities", 2),
        ("What is the weather in Paris?", 0),
    ],
)
def test_several_targets(text: str, count: int) -> None:
    assert several_targets(text) == count


def test_up_front_signals_lift_tool_turns_only_when_asked() -> None:
    plain = TransferScorer(_model())
    eager = TransferScorer(_model(), up_front=("several_targets", "no_tool_fits"))
    many = _turn("Weather in Paris, London and Rome?", tools=[WEATHER])
    assert plain.score(many).value < 1.0 and "targets" not in plain.score(many).features
    assert eager.score(many).features["targets"] == 3
    lifted = eager.score(many)
    assert lifted.value == 1.0 and lifted.reasons[0].startswith("request names 3 targets")
    unrelated = _turn("Tell me a joke about penguins", tools=[WEATHER])
    assert tool_fit(unrelated) == 0.0
    assert eager.score(unrelated).value == 1.0
    assert "no offered tool" in eager.score(unrelated).reasons[0]
    fits = _turn("What is the current weather in Paris?", tools=[WEATHER])
    assert tool_fit(fits) > 0 and eager.score(fits).value < 1.0
    assert tool_fit(_turn("no tools here")) == 1.0
    with pytest.raises(ValueError, match="unknown signal"):
        TransferScorer(_model(), up_front=("psychic",))
    with pytest.raises(ValueError, match="max_reasons"):
        TransferScorer(_model(), max_reasons=-1)


def test_weights_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    _model().save(path)
    assert load_transfer_model(path).blocks["choice"][1]["option_overlap"] == 2.0
    assert TransferScorer.from_file(path).score(_turn("x")).value > 0
    good = json.loads(path.read_text())
    bad = dict(good, blocks={"choice": good["blocks"]["choice"]})
    with pytest.raises(ValueError, match="blocks.open: missing"):
        TransferModel.from_dict(bad, source="w.json")
    bad = json.loads(path.read_text())
    bad["blocks"]["open"]["weights"]["nope"] = 1.0
    with pytest.raises(ValueError, match="unknown feature 'nope'"):
        TransferModel.from_dict(bad)
    bad["blocks"]["open"]["weights"] = {"length": "x"}
    with pytest.raises(ValueError, match="finite number"):
        TransferModel.from_dict(bad)
    with pytest.raises(ValueError, match="version"):
        TransferModel.from_dict(dict(good, version=9))
    with pytest.raises(ValueError, match="not a transfer-scorer"):
        TransferModel.from_dict({"format": "x"})
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json:1: not valid JSON"):
        load_transfer_model(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="cannot read"):
        load_transfer_model(tmp_path / "missing.json")


def _example(i: int, text: str, strong: float, weak: float, pair: str) -> Example:
    return Example(
        id=str(i), source=pair, pair=pair, group=pair, turn=_turn(text), strong=strong, weak=weak
    )


def test_fit_learns_within_source_order_and_floors_length() -> None:
    rows = []
    for i in range(40):
        # in both pairs the alike-option questions gain from the frontier; pair b gains more
        alike = i % 2 == 0
        text = CHOICE if alike else CHOICE.replace("oxygen gas", "a rock").replace(" gas", "")
        for pair, base in (("a", 0.0), ("b", 0.5)):
            strong = 1.0 if alike or base else 0.0
            rows.append(_example(i, text + " " * (i % 7), strong, 0.0, pair))
        rows.append(_example(100 + i, "short " * (1 + i), 1.0, 1.0, "a"))  # open block
    model = fit_transfer(rows, min_length_weight=0.05)
    choice = model.blocks["choice"][1]
    assert choice["option_overlap"] > 0
    assert model.blocks["open"][1]["length"] == 0.05  # no signal: the floor
    assert model.meta["rows_per_block"] == {"choice": 80, "open": 40}
    empty = fit_transfer(rows[:3])
    assert empty.blocks["open"] == (0.0, {})


def test_policy_builds_the_transfer_scorer(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\n"
        "backends: {f: {type: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}}\n"
        "tiers: {fast: f, frontier: f}\n"
        "scoring: {type: transfer, threshold: 0.6, options: {up_front: [several_targets]}}\n"
    )
    scorer = build_scorer(load_policy(str(policy)).scoring)
    assert isinstance(scorer, TransferScorer) and "several_targets" in repr(scorer)
    config = load_policy(str(policy)).scoring
    for options, match in (
        ({"up_front": "several_targets"}, "up_front: must be a list"),
        ({"up_front": ["x"]}, "options.up_front: up_front: unknown signal"),
        ({"path": ""}, "options.path"),
        ({"path": str(tmp_path / "none.json")}, "options.path: .*cannot read"),
        ({"nope": 1}, "unknown option"),
    ):
        with pytest.raises(ValueError, match=match):
            build_scorer(config.model_copy(update={"options": options}))
    with pytest.raises(ValueError, match="only the heuristic scorer"):
        build_scorer(config.model_copy(update={"weights": {"tools": 1.0}}))
    path = tmp_path / "w.json"
    _model().save(path)
    built = build_scorer(config.model_copy(update={"options": {"path": str(path)}}))
    assert isinstance(built, TransferScorer)


def test_training_code_is_off_the_import_path() -> None:
    code = (
        "import sys; from tiered_router import Router; "
        "print('tiered_router.scoring._transfer_fit' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


@needs_data
def test_training_command_reproduces_the_shipped_weights(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert main([str(DATA), "--out", str(out)]) == 0
    shipped = ROOT / "tiered_router" / "scoring" / "data" / "transfer_default.json"
    assert json.loads(out.read_text()) == json.loads(shipped.read_text())
