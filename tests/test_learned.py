"""The learned scorer, version 2: structure features, training, weights files, shipped weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tiered_router.evaluation import find_data_dir, load_data
from tiered_router.policy import ScoringConfig
from tiered_router.scoring import (
    LearnedModel,
    LearnedScorer,
    LearnedWeights,
    build_scorer,
    fit_model,
    load_weights,
)
from tiered_router.scoring.learned import STRUCTURE_FEATURES, V2_FEATURES, Head
from tiered_router.scoring.learned._cli import main
from tiered_router.scoring.learned._features import hashed_words, v2_features
from tiered_router.scoring.learned._train import load_routellm_examples, minimise
from tiered_router.turn import Turn


def turn(text: str) -> Turn:
    return Turn([{"role": "user", "content": text}])


def choice(stem: str, *options: str) -> str:
    letters = "ABCDEFGH"
    lines = [f"{letters[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join([stem, *lines, "Answer:"])


# alike options (fine distinctions): the fast model fails, the frontier model does not;
# distinct options: both are right. Open requests: long ones need the frontier model.
HARD_CHOICE = [
    choice(
        f"Which statement about case {i} holds?",
        "True, True",
        "False, False",
        "True, False",
        "False, True",
    )
    for i in range(12)
]
EASY_CHOICE = [
    choice(
        f"What is the colour of object {i}?",
        "red apple",
        "blue sky over sea",
        "a green leaf",
        "seven",
    )
    for i in range(12)
]
HARD_OPEN = [
    f"Tom has {i} apples and buys 3 times as many, then gives half to Ann and a third of "
    f"the rest to Bob. Each apple costs $1.25. How much is left in total after {i} days?"
    for i in range(12)
]
EASY_OPEN = [f"Add {i} and 2." for i in range(12)]


def _training() -> tuple[list[Turn], list[float], list[float]]:
    turns = [turn(t) for t in HARD_CHOICE + EASY_CHOICE + HARD_OPEN + EASY_OPEN]
    strong = [1.0] * len(turns)
    weak = [0.0] * 12 + [1.0] * 12 + [0.0] * 12 + [1.0] * 12
    # one contrary row per group, so no feature separates the rows perfectly
    weak[0], weak[12], weak[24], weak[36] = 1.0, 0.0, 1.0, 0.0
    strong[1], strong[13], strong[25], strong[37] = 0.0, 0.0, 0.0, 0.0
    return turns, strong, weak


@pytest.fixture(scope="module")
def model() -> LearnedModel:
    turns, strong, weak = _training()
    return fit_model(turns, strong=strong, weak=weak, l2=0.01)


# -- features -------------------------------------------------------------------------------


def test_multiple_choice_requests_get_the_choice_block() -> None:
    v = v2_features(turn(choice("Pick one:", "x", "y", "z")))
    assert v.block == 0
    assert v.raw["options"] == 3.0
    assert v.raw["stem_chars"] == len("Pick one:\n")
    assert v.raw["numeric_options"] == 0.0
    paren = v2_features(turn("Pick one:\n(a) 1.5\n(b) 2\n(c) 3 km"))
    assert paren.block == 0 and paren.raw["numeric_options"] == 1.0


@pytest.mark.parametrize(
    "text",
    ["A. Lincoln was president.", "Explain recursion.", "B. first\nC. second", "hi"],
)
def test_other_requests_get_the_open_block(text: str) -> None:
    v = v2_features(turn(text))
    assert v.block == 1
    assert v.raw["options"] == 0.0 and v.raw["option_overlap"] == 0.0


def test_structure_features_are_in_range_and_named() -> None:
    v = v2_features(turn(HARD_OPEN[3]))
    assert len(v.activations) == len(V2_FEATURES)
    assert all(0.0 <= a <= 1.0 for a in v.activations)
    assert set(STRUCTURE_FEATURES) <= set(v.raw)
    assert v.raw["money"] == 1.0 and v.raw["fractions"] == 1.0 and v.raw["decimals"] == 1.0
    assert v.raw["quantity_words"] >= 4  # times, then, half, rest, each, total, after


def test_option_overlap_measures_alike_options() -> None:
    alike = v2_features(turn(HARD_CHOICE[0])).raw
    distinct = v2_features(turn(EASY_CHOICE[0])).raw
    assert alike["option_overlap_max"] == 1.0 and alike["paired_options"] == 1.0
    assert distinct["option_overlap"] == 0.0


def test_hashed_words_are_normalised_and_sublinear() -> None:
    single = dict(hashed_words("apple", 64, False))
    assert list(single.values()) == [1.0]
    repeated = hashed_words("apple apple apple pear", 1 << 16, False)
    values = sorted(v for _, v in repeated)
    assert math.isclose(math.fsum(v * v for v in values), 1.0)
    assert math.isclose(values[1] / values[0], 1.0 + math.log(3))
    with_pairs = hashed_words("apple pear", 1 << 16, True)
    assert len(with_pairs) == 3


# -- training -------------------------------------------------------------------------------


def test_minimise_finds_the_minimum_of_a_quadratic() -> None:
    def f(x: list[float]) -> tuple[float, list[float]]:
        a, b = x[0] - 3.0, x[1] + 1.0
        return a * a + 10 * b * b, [2 * a, 20 * b]

    x = minimise(f, [0.0, 0.0])
    assert abs(x[0] - 3.0) < 1e-5 and abs(x[1] + 1.0) < 1e-5


def test_fit_model_learns_the_gain(model: LearnedModel) -> None:
    scorer = LearnedScorer(model)
    hard = [scorer.score(turn(t)).value for t in HARD_CHOICE[1:] + HARD_OPEN[1:]]
    easy = [scorer.score(turn(t)).value for t in EASY_CHOICE[1:] + EASY_OPEN[1:]]
    assert min(hard) > max(easy)
    unseen_hard = scorer.score(
        turn(
            choice(
                "Which is right?",
                "Wrong, Wrong",
                "Wrong, Not wrong",
                "Not wrong, Wrong",
                "Not wrong, Not wrong",
            )
        )
    )
    unseen_easy = scorer.score(
        turn(choice("Which animal barks?", "a dog", "the sun", "green tea", "42"))
    )
    assert unseen_hard.value > unseen_easy.value
    assert model.meta["rows_per_block"] == {"choice": 24, "open": 24}
    assert set(model.heads) == {"strong", "weak"}


def test_gain_score_is_half_the_gap_of_the_heads(model: LearnedModel) -> None:
    scorer = LearnedScorer(model)
    t = turn(HARD_OPEN[5])
    s = scorer.score(t)
    v = v2_features(t)
    p = {}
    for name in ("strong", "weak"):
        head = model.heads[name]["open"]
        z = head.bias + sum(
            head.weights.get(f, 0.0) * a for f, a in zip(V2_FEATURES, v.activations, strict=True)
        )
        p[name] = 1.0 / (1.0 + math.exp(-z))
    assert math.isclose(s.value, (p["strong"] - p["weak"] + 1) / 2, rel_tol=1e-9)
    # contributions add up to the value minus the value with every feature at 0
    b = {n: 1.0 / (1.0 + math.exp(-model.heads[n]["open"].bias)) for n in ("strong", "weak")}
    base = (b["strong"] - b["weak"] + 1) / 2
    assert math.isclose(math.fsum(s.contributions.values()), s.value - base, abs_tol=1e-9)
    assert s.reasons and all(r.endswith(")") for r in s.reasons)


@pytest.mark.parametrize("target", ["weak_wrong", "strong_only"])
def test_single_head_targets(target: str) -> None:
    turns, strong, weak = _training()
    m = fit_model(turns, strong=strong, weak=weak, target=target)
    assert set(m.heads) == {"frontier"}
    scorer = LearnedScorer(m)
    hard = scorer.score(turn(HARD_CHOICE[2])).value
    easy = scorer.score(turn(EASY_CHOICE[2])).value
    assert 0.0 < easy < hard < 1.0


def test_fit_model_is_deterministic() -> None:
    turns, strong, weak = _training()
    a = fit_model(turns, strong=strong, weak=weak, hash_buckets=16)
    b = fit_model(turns, strong=strong, weak=weak, hash_buckets=16)
    assert a.to_dict() == b.to_dict()


def test_fit_model_skips_a_block_without_rows() -> None:
    turns, strong, weak = _training()
    m = fit_model(turns[:24], strong=strong[:24], weak=weak[:24])
    assert set(m.heads["strong"]) == {"choice"}
    # an open request falls back to the choice block's weights
    assert 0.0 <= LearnedScorer(m).score(turn("Add 2 and 2.")).value <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strong": [1.0]}, "2 turns but 1"),
        ({"target": "cheapest"}, "unknown target 'cheapest'"),
        ({"weak": [0.0, 2.0]}, r"in \[0, 1\]"),
        ({"l2": -1.0}, "l2 and hash_buckets"),
    ],
)
def test_fit_model_validates_its_input(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"strong": [1.0, 0.0], "weak": [0.0, 0.0], **kwargs}
    with pytest.raises(ValueError, match=message):
        fit_model([turn("a"), turn("b")], **args)


def test_fit_model_needs_a_block_with_enough_rows() -> None:
    with pytest.raises(ValueError, match="no block has 10"):
        fit_model([turn("a")] * 5, strong=[1.0] * 5, weak=[0.0, 1.0, 0.0, 1.0, 0.0])


def test_a_head_with_one_outcome_is_a_smoothed_rate() -> None:
    turns, _, weak = _training()
    m = fit_model(turns, strong=[1.0] * len(turns), weak=weak)
    head = m.heads["strong"]["open"]
    assert not head.weights
    assert math.isclose(1.0 / (1.0 + math.exp(-head.bias)), 24.5 / 25)


# -- weights files --------------------------------------------------------------------------


def test_model_round_trip_with_hashing(tmp_path: Path) -> None:
    turns, strong, weak = _training()
    m = fit_model(turns, strong=strong, weak=weak, hash_buckets=32, word_pairs=True)
    path = tmp_path / "w.json"
    m.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "tiered-router/learned-scorer" and data["version"] == 2
    assert data["hashing"] == {"buckets": 32, "word_pairs": True}
    assert len(data["heads"]["weak"]["open"]["hash_weights"]) == 32
    loaded = LearnedScorer.from_file(path)
    t = turn(HARD_OPEN[1])
    assert loaded.score(t) == LearnedScorer(m).score(t)
    assert "words" in loaded.score(t).contributions
    assert isinstance(load_weights(path), LearnedModel)


def test_version_1_files_still_load(tmp_path: Path) -> None:
    path = tmp_path / "v1.json"
    path.write_text(
        json.dumps(
            {
                "format": "tiered-router/learned-scorer",
                "version": 1,
                "bias": -1.0,
                "weights": {"reasoning": 2.0},
            }
        )
    )
    weights = load_weights(path)
    assert isinstance(weights, LearnedWeights)
    s = LearnedScorer.from_file(path).score(turn("Prove it step by step."))
    assert s.value > 1.0 / (1.0 + math.e)  # the reasoning weight pushes above the bias


V2: dict[str, Any] = {
    "format": "tiered-router/learned-scorer",
    "version": 2,
    "target": "weak_wrong",
    "heads": {"frontier": {"open": {"bias": 0.5, "weights": {"option_overlap": 1.0}}}},
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**V2, "version": 3}, "'version' must be 1 or 2, got 3"),
        ({**V2, "target": "best"}, "unknown target 'best'"),
        ({**V2, "target": "gain"}, r"needs the head\(s\) \['strong', 'weak'\]"),
        ({**V2, "heads": {"frontier": {}}}, "blocks must be a non-empty subset"),
        (
            {**V2, "heads": {"frontier": {"open": {"weights": {"optoins": 1}}}}},
            r"heads\.frontier\.open: unknown feature\(s\) \['optoins'\]",
        ),
        ({**V2, "heads": {"frontier": {"open": {"bias": "x"}}}}, "bias: must be a number"),
        ({**V2, "hashing": {"buckets": 4}}, "4 hash buckets but 0 hash weights"),
        ({**V2, "extra": 1}, r"unknown key\(s\) \['extra'\]"),
    ],
)
def test_model_file_errors(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as info:
        LearnedScorer.from_file(path)
    assert str(path) in str(info.value)


def test_head_rejects_non_finite_weights() -> None:
    with pytest.raises(ValueError, match="finite"):
        Head(bias=math.inf, weights={})


# -- shipped weights ------------------------------------------------------------------------


def test_shipped_weights_are_packaged_with_attribution() -> None:
    data_dir = resources.files("tiered_router.scoring") / "data"
    assert (data_dir / "learned_default.json").is_file()
    attribution = (data_dir / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "Apache-2.0" in attribution and "RouteLLM" in attribution


def test_shipped_weights_score_requests() -> None:
    scorer = LearnedScorer.default()
    weights = scorer.weights
    assert isinstance(weights, LearnedModel) and weights.target == "gain"
    assert set(weights.heads["strong"]) == {"choice", "open"}
    values = [scorer.score(turn(t)).value for t in HARD_CHOICE[:2] + EASY_OPEN[:2] + ["hi"]]
    assert all(0.0 <= v <= 1.0 for v in values)
    s = scorer.score(turn(HARD_CHOICE[0]))
    assert s.features["options"] == 4.0 and s.reasons


def test_build_scorer_learned_without_path_uses_shipped_weights(tmp_path: Path) -> None:
    scorer = build_scorer(ScoringConfig(type="learned", options={"max_reasons": 2}))
    assert isinstance(scorer, LearnedScorer)
    t = turn(HARD_CHOICE[0])
    assert scorer.score(t).value == LearnedScorer.default().score(t).value
    assert len(scorer.score(t).reasons) <= 2
    path = tmp_path / "w.json"
    path.write_text(json.dumps(V2))
    from_path = build_scorer(ScoringConfig(type="learned", options={"path": str(path)}))
    assert isinstance(from_path, LearnedScorer) and from_path.weights.target == "weak_wrong"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"scoring\.options\.path: must be the path"):
        build_scorer(ScoringConfig(type="learned", options={"path": ""}))
    assert type(build_scorer(ScoringConfig())).__name__ == "TransferScorer"  # the default


def test_version_2_score_does_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    turns, strong, weak = _training()
    path = tmp_path / "w.json"
    fit_model(turns, strong=strong, weak=weak, hash_buckets=16, word_pairs=True).save(path)
    script = (
        "import sys\n"
        "from tiered_router.scoring import LearnedScorer\n"
        "from tiered_router.turn import Turn\n"
        "t = Turn([{'role': 'user', 'content': 'Which holds?\\nA. x y\\nB. y z\\nC. z'}])\n"
        "print(repr(LearnedScorer.from_file(sys.argv[1]).score(t)))\n"
        "print(repr(LearnedScorer.default().score(t)))\n"
    )
    root = Path(__file__).resolve().parents[1]
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        out = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(out.stdout)
    assert len(outputs) == 1


# -- data and command line ------------------------------------------------------------------


def _write_routellm(folder: Path) -> None:
    evals = folder / "routellm_evals"
    evals.mkdir(parents=True)
    strong, weak = "gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1"
    mmlu = []
    for i, text in enumerate(HARD_CHOICE + EASY_CHOICE):
        hard = i < len(HARD_CHOICE)
        mmlu.append(
            {
                "id": f"mmlu.x.{i}",
                "subject": "x",
                "prompt": text,
                "correct": {weak: not hard if i % 11 else hard, strong: True},
                "contaminated": i == 3,
            }
        )
    gsm = [
        {
            "id": f"gsm8k.{i}",
            "prompt": text,
            "correct": {weak: i >= 12 if i % 11 else i < 12, strong: True},
            "response": {weak: "", strong: ""},
            "contaminated": False,
        }
        for i, text in enumerate(HARD_OPEN + EASY_OPEN)
    ]
    for name, rows in (("mmlu", mmlu), ("gsm8k", gsm)):
        (evals / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_load_routellm_examples_drops_contaminated_rows(tmp_path: Path) -> None:
    _write_routellm(tmp_path)
    rows = load_routellm_examples(tmp_path)
    assert len(rows) == 47
    assert all(r.id != "mmlu.x.3" for r in rows)
    assert {r.benchmark for r in rows} == {"mmlu", "gsm8k"} and rows[0].group == "x"
    with pytest.raises(ValueError, match="no outcome for"):
        load_routellm_examples(tmp_path, strong_model="gpt-5")


def test_train_command_writes_loadable_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_routellm(tmp_path)
    out = tmp_path / "w.json"
    assert main(["train", "--data", str(tmp_path), "--out", str(out), "--l2", "0.05"]) == 0
    assert "trained on 47 rows" in capsys.readouterr().out
    model = load_weights(out)
    assert isinstance(model, LearnedModel)
    assert model.meta["l2"] == 0.05 and "RouteLLM" in model.meta["trained_on"]
    assert main(["train", "--data", str(tmp_path / "nowhere"), "--out", str(out)]) == 1
    assert "error: " in capsys.readouterr().err


def test_train_module_runs_as_a_script(tmp_path: Path) -> None:
    _write_routellm(tmp_path)
    out = tmp_path / "w.json"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "tiered_router.scoring.learned",
            "train",
            "--data",
            str(tmp_path),
            "--out",
            str(out),
            "--target",
            "weak_wrong",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert load_weights(out).target == "weak_wrong"  # type: ignore[union-attr]


def test_loader_agrees_with_the_evaluation_package() -> None:
    data_dir = find_data_dir()
    if data_dir is None or not (data_dir / "routellm_evals").is_dir():
        pytest.skip("the shared data folder is not here")
    rows = load_routellm_examples(data_dir)
    for name in ("mmlu", "gsm8k"):
        ours = [r.id for r in rows if r.benchmark == name]
        theirs = [r.id for r in load_data(name, data_dir=data_dir).rows]
        assert ours == theirs
