"""``fit_scorer`` and ``tiered-router fit-scorer`` on small synthetic datasets.

The datasets are made here: single-user-message turns, half of them reasoning requests
("Prove that ... step by step") that the fast model gets wrong, half simple extraction
requests it gets right, every prompt padded to a random length drawn independently of its
kind, so the learned features can see the difficulty and prompt length cannot.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tiered_router import load_policy
from tiered_router.cli import build_app
from tiered_router.evaluation.dataset import (
    Dataset,
    DatasetError,
    EvalRow,
    Outcome,
    read_dataset,
    write_dataset,
)
from tiered_router.evaluation.scorer_fit import (
    MIN_ROWS,
    ScorerFitReport,
    cross_validated_scores,
    fit_scorer,
    fold_of,
)
from tiered_router.scoring import HeuristicScorer, build_scorer
from tiered_router.scoring.learned import LearnedModel, LearnedScorer, load_weights
from tiered_router.turn import Turn

FAST, FRONTIER = "fast-m", "frontier-m"
BOOT = 50
runner = CliRunner()

_FILLER = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma "
    "tau upsilon omega river stone cloud maple cedar amber"
).split()
_HARD = (
    "Prove that the sum of the first n odd numbers is n squared, step by step. ",
    "Derive the closed form of this recurrence and prove it by induction. ",
    "Prove that there are infinitely many primes, and show your work step by step. ",
)
_EASY = (
    "Extract the city name from this address line and return it as plain text. ",
    "Copy the email address that appears in the following line of text, nothing else. ",
    "Return the date written in this sentence in the same form it is written in. ",
)
HARD_PROMPT = "Prove that the square root of two is irrational, step by step. " + "alpha " * 20
EASY_PROMPT = "Extract the city name from this address line and return it. " + "alpha " * 20


def _prompt(rng: random.Random, hard: bool, length: int) -> str:
    """A prompt of exactly ``length`` characters (the length says nothing of its kind)."""
    text = rng.choice(_HARD if hard else _EASY)
    while len(text) < length:
        text += rng.choice(_FILLER) + " "
    return text[:length]


def make_dataset(
    n: int = 300,
    *,
    seed: int = 0,
    labels: str = "signal",
    noise: float = 0.05,
    name: str = "synthetic",
    task_size: int = 1,
) -> Dataset:
    """``n`` rows alternating hard and easy.

    ``labels``: ``signal`` (fast wrong on hard, right on easy, ``noise`` flipped; frontier
    right on all), ``random`` (fast right with probability 1/2 whatever the prompt;
    frontier right on all) or ``frontier-worse`` (frontier never better than fast).
    """
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        hard = i % 2 == 0
        text = _prompt(rng, hard, rng.randint(90, 600))
        if labels == "signal":
            fast = 0.0 if hard else 1.0
            if rng.random() < noise:
                fast = 1.0 - fast
            frontier = 1.0
        elif labels == "random":
            fast, frontier = float(rng.random() < 0.5), 1.0
        else:
            fast = float(rng.random() < 0.7)
            frontier = fast * float(rng.random() < 0.8)  # never above fast
        metadata = {"task_id": f"task{i // task_size}"} if task_size > 1 else None
        rows.append(
            EvalRow.build(
                f"r{i}",
                [{"role": "user", "content": text}],
                {FAST: Outcome(quality=fast), FRONTIER: Outcome(quality=frontier)},
                metadata=metadata,
            )
        )
    return Dataset(name=name, rows=tuple(rows), fast_model=FAST, frontier_model=FRONTIER)


def _drop_fast(dataset: Dataset, count: int) -> Dataset:
    """The dataset with the fast model's outcome removed from its first ``count`` rows."""
    rows = tuple(
        EvalRow.build(r.id, r.turn.messages, {FRONTIER: r.outcomes[FRONTIER]}) if i < count else r
        for i, r in enumerate(dataset.rows)
    )
    return replace(dataset, rows=rows)


def _turn(text: str) -> Turn:
    return Turn([{"role": "user", "content": text}])


@pytest.fixture(scope="module")
def signal_report() -> ScorerFitReport:
    return fit_scorer(make_dataset(), bootstrap=BOOT)


# -- the data is what the tests say it is ----------------------------------------------------


def test_the_synthetic_lengths_say_nothing_of_difficulty() -> None:
    rows = make_dataset().rows
    hard = [r.turn.prompt_chars for r in rows if r.outcomes[FAST].quality == 0.0]
    easy = [r.turn.prompt_chars for r in rows if r.outcomes[FAST].quality == 1.0]
    assert len(hard) > 100 and len(easy) > 100
    mean_hard, mean_easy = sum(hard) / len(hard), sum(easy) / len(easy)
    assert abs(mean_hard - mean_easy) < 40  # lengths drawn from 90..600 for both kinds


# -- 1. signal the learned features see and prompt length does not --------------------------


def test_fitted_scorer_beats_prompt_length_and_random(signal_report: ScorerFitReport) -> None:
    r = signal_report
    assert r.rows == 300 and r.skipped == 0 and r.folds == 5
    assert (r.fast_model, r.frontier_model, r.dataset) == (FAST, FRONTIER, "synthetic")
    assert r.q_frontier == 1.0 and 0.4 < r.q_fast < 0.6
    assert r.apgr["fitted"] > r.apgr["prompt length"] + 0.1
    assert r.apgr["fitted"] > r.apgr["random"] + 0.1
    assert abs(r.apgr["prompt length"] - 0.5) < 0.1  # length is no better than chance here
    assert "prompt length" in r.beats and "random" in r.beats
    low, high = r.intervals["fitted"]
    assert low <= r.apgr["fitted"] <= high
    diff, d_low, d_high = r.differences["prompt length"]
    assert diff == pytest.approx(r.apgr["fitted"] - r.apgr["prompt length"])
    assert 0 < d_low <= diff <= d_high
    assert "random" not in r.intervals and "random" not in r.differences
    assert "switch to it" in r.verdict and "not clearly better" not in r.verdict
    assert not any("rows" in note and "left out" in note for note in r.notes)


def test_the_kept_model_is_fitted_on_every_row(signal_report: ScorerFitReport) -> None:
    model = signal_report.model
    assert isinstance(model, LearnedModel)
    assert model.meta["rows"] == 300
    assert model.meta["fast_model"] == FAST and model.meta["frontier_model"] == FRONTIER
    assert model.meta["data"] == "synthetic"


def test_saved_model_loads_and_ranks_hard_above_easy(
    signal_report: ScorerFitReport, tmp_path: Path
) -> None:
    path = tmp_path / "scorer.json"
    signal_report.model.save(path)
    assert isinstance(load_weights(path), LearnedModel)
    scorer = LearnedScorer.from_file(path)
    hard, easy = scorer.score(_turn(HARD_PROMPT)).value, scorer.score(_turn(EASY_PROMPT)).value
    assert hard > easy + 0.1
    # the model scores as it did before saving
    assert LearnedScorer(signal_report.model).score(_turn(HARD_PROMPT)).value == pytest.approx(hard)


def test_a_policy_uses_the_saved_model(signal_report: ScorerFitReport, tmp_path: Path) -> None:
    path = tmp_path / "scorer.json"
    signal_report.model.save(path)
    policy = load_policy(
        "version: 1\n"
        "backends:\n"
        "  fast: {model: small}\n"
        "  big: {model: large}\n"
        "tiers: {fast: fast, frontier: big}\n"
        f"scoring: {{type: learned, threshold: 0.6, options: {{path: '{path}'}}}}\n"
    )
    assert policy.scoring.type == "learned"
    scorer = build_scorer(policy.scoring)
    assert isinstance(scorer, LearnedScorer)
    saved = LearnedScorer.from_file(path)
    for text in (HARD_PROMPT, EASY_PROMPT):
        assert scorer.score(_turn(text)).value == pytest.approx(saved.score(_turn(text)).value)
    assert scorer.score(_turn(HARD_PROMPT)).value > scorer.score(_turn(EASY_PROMPT)).value


def test_cross_validated_scores_are_out_of_fold() -> None:
    rows = make_dataset(100).rows
    turns = [r.turn for r in rows]
    strong = [r.outcomes[FRONTIER].quality for r in rows]
    weak = [r.outcomes[FAST].quality for r in rows]
    fold = fold_of([r.id for r in rows], folds=4, seed=0)
    scores = cross_validated_scores(turns, strong=strong, weak=weak, fold=fold)
    assert len(scores) == 100 and all(0.0 <= s <= 1.0 for s in scores)
    hard = [s for s, w in zip(scores, weak, strict=True) if w == 0.0]
    easy = [s for s, w in zip(scores, weak, strict=True) if w == 1.0]
    assert sum(hard) / len(hard) > sum(easy) / len(easy)
    # changing the labels of fold 0 changes no score in fold 0 (it is scored out of fold)
    flipped = [1.0 - w if f == 0 else w for w, f in zip(weak, fold, strict=True)]
    again = cross_validated_scores(turns, strong=strong, weak=flipped, fold=fold)
    for f, a, b in zip(fold, scores, again, strict=True):
        if f == 0:
            assert a == pytest.approx(b)
    assert any(a != pytest.approx(b) for f, a, b in zip(fold, scores, again, strict=True) if f)


def test_same_seed_same_report() -> None:
    data = make_dataset(120)
    a = fit_scorer(data, bootstrap=20, seed=3)
    b = fit_scorer(data, bootstrap=20, seed=3)
    assert a.to_dict() == b.to_dict()


# -- 2. no signal -----------------------------------------------------------------------------


def test_random_labels_say_keep_the_current_scorer() -> None:
    r = fit_scorer(make_dataset(labels="random"), bootstrap=BOOT)
    assert "prompt length" not in r.beats
    assert "not clearly better" in r.verdict and "keep your current scorer" in r.verdict
    assert "switch" not in r.verdict
    assert abs(r.apgr["fitted"] - 0.5) < 0.1


def test_no_bootstrap_means_no_intervals_and_no_claims() -> None:
    r = fit_scorer(make_dataset(120), bootstrap=0)
    assert all(math.isnan(lo) and math.isnan(hi) for lo, hi in r.intervals.values())
    assert r.beats == ()
    assert "not clearly better" in r.verdict
    assert not math.isnan(r.apgr["fitted"])


# -- 3. frontier no better than fast ----------------------------------------------------------


def test_frontier_not_better_gives_no_apgr() -> None:
    data = make_dataset(labels="frontier-worse")
    assert all(r.outcomes[FRONTIER].quality <= r.outcomes[FAST].quality for r in data.rows)
    r = fit_scorer(data, bootstrap=20)
    assert math.isnan(r.apgr["fitted"]) and math.isnan(r.apgr["prompt length"])
    assert "not better" in r.verdict
    assert FRONTIER in r.verdict and FAST in r.verdict
    assert any("undefined" in note for note in r.notes)
    assert r.beats == ()


# -- 4. too few rows, and skipped rows ----------------------------------------------------------


def test_too_few_rows_is_a_dataset_error() -> None:
    data = make_dataset(MIN_ROWS - 10, name="tiny")
    with pytest.raises(DatasetError) as err:
        fit_scorer(data, bootstrap=BOOT)
    message = str(err.value)
    assert message.startswith("tiny:")
    assert f"{MIN_ROWS - 10} rows" in message and str(MIN_ROWS) in message


def test_rows_lacking_an_outcome_do_not_count_towards_min_rows() -> None:
    # MIN_ROWS + 10 rows, but 20 lack the fast model's outcome: 40 usable
    data = _drop_fast(make_dataset(MIN_ROWS + 10, name="holes"), 20)
    with pytest.raises(DatasetError, match=rf"holes: {MIN_ROWS - 10} rows"):
        fit_scorer(data, bootstrap=BOOT)


def test_rows_with_one_outcome_are_skipped_and_noted() -> None:
    data = _drop_fast(make_dataset(130), 30)
    r = fit_scorer(data, bootstrap=20)
    assert r.rows == 100 and r.skipped == 30
    assert r.model.meta["rows"] == 100
    assert any("30 rows" in note and "left out" in note for note in r.notes)
    assert any("only 100 rows" in note for note in r.notes)


def test_fewer_tasks_than_folds_is_a_dataset_error() -> None:
    data = make_dataset(60, task_size=20, name="tasks")  # 3 tasks
    with pytest.raises(DatasetError, match=r"tasks: folds: 5 folds need at least 5 tasks, got 3"):
        fit_scorer(data, bootstrap=BOOT)
    assert fit_scorer(data, folds=3, bootstrap=0).folds == 3


def test_bad_bootstrap_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bootstrap"):
        fit_scorer(make_dataset(60), bootstrap=-1)


# -- 5. no model pair ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fast", "frontier"), [(None, None), (FAST, None), (None, FRONTIER), ("", FRONTIER)]
)
def test_data_without_a_model_pair_asks_to_pick_them(
    fast: str | None, frontier: str | None
) -> None:
    data = replace(make_dataset(60, name="unnamed"), fast_model=fast, frontier_model=frontier)
    with pytest.raises(DatasetError) as err:
        fit_scorer(data, bootstrap=BOOT)
    message = str(err.value)
    assert message.startswith("unnamed:") and "pick them" in message
    assert "--fast-model" in message


def test_pair_picked_with_with_pair_is_used() -> None:
    data = replace(make_dataset(60), fast_model=None, frontier_model=None)
    r = fit_scorer(data.with_pair(FAST, FRONTIER), bootstrap=0)
    assert (r.fast_model, r.frontier_model, r.rows) == (FAST, FRONTIER, 60)


# -- 6. fold_of --------------------------------------------------------------------------------


def test_rows_of_one_task_share_a_fold_and_every_fold_is_used() -> None:
    groups = ["a", "a", "b", "c", "c", "c", "d", "e", "f", "f", "g"]
    fold = fold_of(groups, folds=3, seed=1)
    assert len(fold) == len(groups)
    by_group: dict[str, set[int]] = {}
    for g, f in zip(groups, fold, strict=True):
        by_group.setdefault(g, set()).add(f)
    assert all(len(fs) == 1 for fs in by_group.values())
    assert set(fold) == {0, 1, 2}
    # groups are dealt round-robin: fold sizes (in groups) differ by at most one
    per_fold = [sum(1 for fs in by_group.values() if fs == {k}) for k in range(3)]
    assert max(per_fold) - min(per_fold) <= 1 and sum(per_fold) == 7


def test_fold_of_is_seeded() -> None:
    groups = [f"g{i}" for i in range(40)]
    assert fold_of(groups, folds=5, seed=7) == fold_of(groups, folds=5, seed=7)
    assert fold_of(groups, folds=5, seed=7) != fold_of(groups, folds=5, seed=8)


def test_fold_of_with_as_many_groups_as_folds() -> None:
    fold = fold_of(["x", "y", "x", "z"], folds=3, seed=0)
    assert sorted(set(fold)) == [0, 1, 2] and fold[0] == fold[2]


@pytest.mark.parametrize("folds", [1, 0, -2])
def test_fold_of_rejects_fewer_than_two_folds(folds: int) -> None:
    with pytest.raises(ValueError, match=r"folds: must be >= 2"):
        fold_of(["a", "b", "c"], folds=folds, seed=0)


def test_fold_of_rejects_fewer_groups_than_folds() -> None:
    with pytest.raises(ValueError, match=r"need at least 4 tasks, got 3"):
        fold_of(["a", "a", "b", "c", "c"], folds=4, seed=0)


def test_fit_scorer_keeps_a_task_in_one_fold() -> None:
    # with tasks of 10 rows and 12 tasks, 5 folds still work (folds are per task)
    r = fit_scorer(make_dataset(120, task_size=10), bootstrap=0)
    assert r.rows == 120 and not math.isnan(r.apgr["fitted"])


# -- 7. compare --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fitted", "random", "prompt length"])
def test_compare_name_clash_is_a_value_error(name: str) -> None:
    with pytest.raises(ValueError, match=rf"compare: '{name}'"):
        fit_scorer(make_dataset(60), compare={name: HeuristicScorer()}, bootstrap=0)


def test_a_compared_scorer_is_reported(signal_report: ScorerFitReport) -> None:
    r = fit_scorer(
        make_dataset(),
        compare={"heuristic": HeuristicScorer(), "oracle": LearnedScorer(signal_report.model)},
        bootstrap=BOOT,
    )
    for name in ("heuristic", "oracle"):
        assert name in r.apgr and name in r.intervals and name in r.differences
        diff, low, high = r.differences[name]
        assert diff == pytest.approx(r.apgr["fitted"] - r.apgr[name])
        assert low <= high
    # the heuristic scorer weighs "prove" / "step by step": it sees the signal too
    assert r.apgr["heuristic"] > r.apgr["prompt length"]
    # same rows, same folds: the other figures do not move with what is compared
    assert r.apgr["fitted"] == pytest.approx(signal_report.apgr["fitted"])
    assert r.apgr["prompt length"] == pytest.approx(signal_report.apgr["prompt length"])
    assert set(r.to_dict()["differences"]) == {"prompt length", "heuristic", "oracle"}


# -- 8. to_dict ---------------------------------------------------------------------------------


def test_to_dict_is_json(signal_report: ScorerFitReport) -> None:
    out = json.loads(json.dumps(signal_report.to_dict(), allow_nan=False))
    assert out["rows"] == 300 and out["skipped"] == 0
    assert out["verdict"] == signal_report.verdict
    assert out["beats"] == list(signal_report.beats)
    assert out["apgr"]["fitted"] == round(signal_report.apgr["fitted"], 4)
    assert set(out["differences"]["prompt length"]) == {"difference", "low", "high"}
    assert "model" not in out


def test_to_dict_turns_nan_into_none() -> None:
    r = fit_scorer(make_dataset(labels="frontier-worse"), bootstrap=10)
    out = r.to_dict()
    text = json.dumps(out, allow_nan=False)  # raises on a nan left in
    assert "NaN" not in text
    assert out["apgr"]["fitted"] is None and out["apgr"]["random"] is None
    assert out["intervals"]["fitted"] == [None, None]
    assert out["differences"]["prompt length"] == {"difference": None, "low": None, "high": None}
    no_boot = fit_scorer(make_dataset(60), bootstrap=0).to_dict()
    assert no_boot["intervals"]["fitted"] == [None, None]
    assert isinstance(no_boot["apgr"]["fitted"], float)


# -- 9. the command ----------------------------------------------------------------------------


def _invoke(*args: str | Path | int) -> tuple[int, str, str]:
    result = runner.invoke(build_app(), [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fit") / "traffic.jsonl"
    write_dataset(make_dataset(), path)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["fast_model"] == FAST and header["frontier_model"] == FRONTIER
    return path


def test_cli_fits_compares_and_writes(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "scorer.json"
    code, stdout, stderr = _invoke("fit-scorer", "--data", data_file, "-o", out, "--bootstrap", 50)
    assert code == 0, stdout + stderr
    assert "verdict:" in stdout and "switch to it" in stdout
    assert "prompt length" in stdout and "current (" in stdout
    assert str(out) in stdout and "type: learned" in stdout
    assert out.is_file()
    scorer = LearnedScorer.from_file(out)
    assert scorer.score(_turn(HARD_PROMPT)).value > scorer.score(_turn(EASY_PROMPT)).value
    assert load_weights(out).meta["rows"] == 300


def test_cli_json(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "scorer.json"
    code, stdout, stderr = _invoke(
        "fit-scorer", "--data", data_file, "-o", out, "--bootstrap", 50, "--json"
    )
    assert code == 0, stdout + stderr
    data = json.loads(stdout)
    for key in ("rows", "apgr", "verdict", "output"):
        assert key in data
    assert data["rows"] == 300 and data["output"] == str(out) and out.is_file()
    assert data["fast_model"] == FAST and data["frontier_model"] == FRONTIER
    current = [k for k in data["apgr"] if k.startswith("current (")]
    assert len(current) == 1 and current[0] in data["differences"]
    assert data["apgr"]["fitted"] > data["apgr"]["prompt length"]
    assert "prompt length" in data["beats"]


def test_cli_json_without_output(data_file: Path) -> None:
    code, stdout, stderr = _invoke("fit-scorer", "--data", data_file, "--bootstrap", 10, "--json")
    assert code == 0, stdout + stderr
    assert json.loads(stdout)["output"] is None


def test_cli_picks_the_models(tmp_path: Path) -> None:
    path = tmp_path / "unnamed.jsonl"
    write_dataset(replace(make_dataset(100), fast_model=None, frontier_model=None), path)
    code, _, stderr = _invoke("fit-scorer", "--data", path, "--bootstrap", 0)
    assert code == 1 and "pick them" in stderr and "Traceback" not in stderr
    code, stdout, stderr = _invoke(
        "fit-scorer",
        "--data",
        path,
        "--fast-model",
        FAST,
        "--frontier-model",
        FRONTIER,
        "--bootstrap",
        0,
        "--json",
    )
    assert code == 0, stderr
    assert json.loads(stdout)["fast_model"] == FAST


def test_cli_missing_data_file(tmp_path: Path) -> None:
    code, stdout, stderr = _invoke("fit-scorer", "--data", tmp_path / "nope.jsonl")
    assert code != 0
    assert stderr.startswith("error: ") and "nope.jsonl" in stderr
    assert "Traceback" not in stdout + stderr


def test_cli_too_few_rows(tmp_path: Path) -> None:
    path = tmp_path / "tiny.jsonl"
    write_dataset(make_dataset(30, name="tiny"), path)
    code, stdout, stderr = _invoke("fit-scorer", "--data", path, "--bootstrap", 10)
    assert code == 1
    assert stderr.startswith("error: tiny: 30 rows have outcomes of both")
    assert f"at least {MIN_ROWS}" in stderr and "Traceback" not in stdout + stderr


def test_cli_output_into_a_missing_directory(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "no-such-dir" / "scorer.json"
    code, stdout, stderr = _invoke("fit-scorer", "--data", data_file, "-o", out, "--bootstrap", 0)
    assert code == 1
    assert stderr.startswith("error: --output:") and str(out) in stderr
    assert "Traceback" not in stdout + stderr and not out.parent.exists()


def test_cli_rejects_bad_folds_and_bootstrap(data_file: Path) -> None:
    code, _, stderr = _invoke("fit-scorer", "--data", data_file, "--folds", 1)
    assert code == 2 and "--folds" in stderr
    code, _, stderr = _invoke("fit-scorer", "--data", data_file, "--bootstrap", -1)
    assert code == 2 and "--bootstrap" in stderr


def test_cli_policy_scorer_is_the_one_compared(
    data_file: Path, signal_report: ScorerFitReport, tmp_path: Path
) -> None:
    weights = tmp_path / "scorer.json"
    signal_report.model.save(weights)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\n"
        "backends:\n"
        "  fast: {model: small}\n"
        "  big: {model: large}\n"
        "tiers: {fast: fast, frontier: big}\n"
        f"scoring: {{type: learned, threshold: 0.6, options: {{path: '{weights}'}}}}\n"
    )
    code, stdout, stderr = _invoke(
        "fit-scorer", policy, "--data", data_file, "--bootstrap", 10, "--json"
    )
    assert code == 0, stdout + stderr
    data = json.loads(stdout)
    assert "current (learned)" in data["apgr"]
    # the policy's scorer is the model fitted on these very rows: in-sample, it does well
    assert data["apgr"]["current (learned)"] > data["apgr"]["prompt length"]


# -- rows the loader left out, and the random baseline ---------------------------------------


def test_cli_reports_rows_lacking_an_outcome(tmp_path: Path) -> None:
    # the loader leaves out rows lacking one tier's outcome (the header names both models)
    # and says so in the dataset's notes; the report keeps that note
    path = tmp_path / "holes.jsonl"
    write_dataset(_drop_fast(make_dataset(130), 30), path)
    assert len(read_dataset(path).rows) == 130
    code, stdout, stderr = _invoke("fit-scorer", "--data", path, "--bootstrap", 0, "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["rows"] == 100
    assert any("30 rows" in note and "left out" in note for note in data["notes"])


def test_random_baseline_is_its_expected_apgr() -> None:
    # a random router's expected curve is the straight line: APGR 0.5 exactly, not an
    # estimate from a few seeds; undefined with the rest when the frontier is not better
    r = fit_scorer(make_dataset(labels="random"), bootstrap=0)
    assert r.apgr["random"] == 0.5
    flat = fit_scorer(make_dataset(labels="frontier-worse"), bootstrap=0)
    assert math.isnan(flat.apgr["random"])


# -- the current scorer's shipped weights and the data they were trained on -----------------


def test_cli_says_when_the_current_scorer_was_trained_on_the_data(data_file: Path) -> None:
    seen = "shipped weights were trained on rows of this data"
    # the bundled sample's rows were left out of the transfer scorer's training: no note
    code, stdout, stderr = _invoke("fit-scorer", "--bootstrap", 0, "--json")
    assert code == 0, stderr
    assert not any(seen in note for note in json.loads(stdout)["notes"])
    # your own file: no note
    code, stdout, stderr = _invoke("fit-scorer", "--data", data_file, "--bootstrap", 0, "--json")
    assert code == 0, stderr
    assert not any(seen in note for note in json.loads(stdout)["notes"])


def test_shipped_weights_seen_by_data_name(tmp_path: Path) -> None:
    from tiered_router.cli._fit_cmds import _current_saw

    def policy(scoring: str) -> Any:
        path = tmp_path / "p.yaml"
        path.write_text(
            "version: 1\nbackends:\n  f: {model: a}\n  g: {model: b}\n"
            f"tiers: {{fast: f, frontier: g}}\nscoring: {scoring}\n",
            encoding="utf-8",
        )
        return load_policy(path)

    transfer, learned = policy("{type: transfer}"), policy("{type: learned}")
    fit_scorer(make_dataset(60), bootstrap=0).model.save(tmp_path / "w.json")
    own = policy(f"{{type: learned, options: {{path: {tmp_path / 'w.json'}}}}}")
    heuristic = policy("{type: heuristic}")
    assert _current_saw(transfer, "gsm8k") and _current_saw(transfer, "bfcl:a->b")
    assert _current_saw(transfer, "mmlu+gsm8k") and not _current_saw(transfer, "sample")
    assert _current_saw(learned, "sample") and _current_saw(learned, "mmlu")
    assert not _current_saw(learned, "bfcl") and not _current_saw(heuristic, "gsm8k")
    assert not _current_saw(own, "mmlu") and not _current_saw(transfer, None)
    (tmp_path / "gsm8k").write_text("", encoding="utf-8")  # a file of that name is yours
    assert not _current_saw(transfer, str(tmp_path / "gsm8k"))
