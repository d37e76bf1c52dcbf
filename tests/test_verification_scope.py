"""``calibrate --scope traffic`` and ``fit-scorer --panel-labels`` (issue 27: shared errors).

Where drafts share their errors, two things lower the cost of a quality target: a scorer
that sends the kinds of request the panel cannot answer to the frontier before any draft is
paid for, and a bound over the whole traffic, so a kind that verification cannot help keeps
its cheap path while another buys the quality back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from routerkit import ADD, PAIR_POLICY, add_outcome
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation import Dataset, EvalRow, Outcome, write_dataset
from tiered_router.evaluation._bounds import _Sums
from tiered_router.evaluation._traffic_scope import hull, walk
from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.panel_scorer import fit_panel_scorer, panel_labelled
from tiered_router.evaluation.sweep import CalibrationError
from tiered_router.evaluation.verification import choose_verification
from tiered_router.policy import load_policy
from tiered_router.scoring import build_scorer


def _point(name: str, cost: float, quality: float) -> tuple[str, tuple[_Sums, _Sums, _Sums]]:
    return name, (_Sums(1, quality, 0, 1, 0, 0), _Sums(1, cost, 0, 1, 0, 0), _Sums())


def test_the_hull_keeps_what_a_price_on_quality_would_pick() -> None:
    points = [
        _point("cheap", 1.0, 0.5),
        _point("dominated", 3.0, 0.5),  # costs more for the same quality
        _point("under", 2.0, 0.6),  # below the line from cheap to good
        _point("good", 3.0, 0.9),
        _point("best", 10.0, 1.0),
    ]
    assert [name for name, _ in hull(points)] == ["cheap", "good", "best"]


def test_the_walk_moves_the_kind_with_the_most_quality_per_dollar_first() -> None:
    seen: list[dict[str, str]] = []
    walk(
        {
            "a": [_point("a0", 0.0, 0.0), _point("a1", 1.0, 0.9)],  # 0.9 per dollar
            "b": [_point("b0", 0.0, 0.0), _point("b1", 1.0, 0.1)],  # 0.1 per dollar
        },
        lambda combo: seen.append({k: v[0] for k, v in combo.items()}),
    )
    assert seen == [{"a": "a0", "b": "b0"}, {"a": "a1", "b": "b0"}, {"a": "a1", "b": "b1"}]


def mixed(n_tools: int = 600, n_prose: int = 300) -> Dataset:
    """Tool calls a panel verifies (the fast model wrong on 1 in 20, the other drafter right),
    and prose no panel can compare, where the fast model is right on 95 of 100 rows."""
    rows = []
    for i in range(n_tools):
        wrong = i % 20 == 19
        rows.append(
            EvalRow.build(
                f"t{i}",
                [{"role": "user", "content": f"add 1 and {i}"}],
                {
                    "fast": add_outcome(i + wrong, quality=0.0 if wrong else 1.0, cost=0.001),
                    "other": add_outcome(i, quality=1.0, cost=0.001),
                    "big": add_outcome(i, quality=1.0, cost=0.1),
                },
                tools=[ADD],
            )
        )
    for i in range(n_prose):
        q = 0.0 if i % 20 == 7 else 1.0
        rows.append(
            EvalRow.build(
                f"p{i}",
                [{"role": "user", "content": f"Write a short note to a colleague, number {i}."}],
                {
                    "fast": Outcome(quality=q, text=f"Dear colleague, note {i}.", cost=0.001),
                    "other": Outcome(quality=q, text=f"Hello, this is note {i}.", cost=0.001),
                    "big": Outcome(quality=1.0, text=f"Dear colleague, {i}.", cost=0.1),
                },
            )
        )
    return Dataset(name="mixed", rows=tuple(rows), fast_model="fast", frontier_model="big")


SCORING = "scoring: {type: heuristic, threshold: 1.0}"
POLICY = PAIR_POLICY


def test_the_traffic_scope_trades_kinds_and_its_bound_holds_over_all_turns() -> None:
    policy, target = load_policy(POLICY), Target(quality_retained=0.97)
    per_kind = choose_verification(policy, mixed(), target)
    traffic = choose_verification(policy, mixed(), target, scope="traffic")
    assert per_kind.scope == "kind" and traffic.scope == "traffic"
    # per kind, prose (95 % right, nothing to verify it with) must meet 97 % on its own
    kinds = {k.kind: k for k in per_kind.kinds}
    assert kinds["prose"].figures.retained_low >= 0.97
    # over the traffic, the verified tool calls buy prose's cheap path back
    by_kind = {k.kind: k for k in traffic.kinds}
    assert by_kind["prose"].figures.retained_low < 0.97 <= traffic.calibration.retained_low
    assert traffic.calibration.cost_share < per_kind.calibration.cost_share
    assert traffic.to_dict()["scope"] == "traffic"
    # with a cost target the traffic scope buys the best bound within it
    cheap = choose_verification(policy, mixed(), Target(max_cost_share=0.2), scope="traffic")
    assert cheap.calibration.cost_share_high <= 0.2
    assert cheap.calibration.retained_low >= traffic.calibration.retained_low - 0.05


def test_the_traffic_scope_reports_when_nothing_meets_the_target() -> None:
    # even the drafts alone cost more than a hundredth of the frontier's cost
    with pytest.raises(CalibrationError, match="no verification and threshold meet"):
        choose_verification(
            load_policy(POLICY), mixed(), Target(max_cost_share=0.001), scope="traffic"
        )


def test_a_bad_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="scope"):
        choose_verification(
            load_policy(POLICY), mixed(), Target(quality_retained=0.9), scope="everything"
        )


def _write(tmp_path: Path, dataset: Dataset, policy: str) -> tuple[Path, Path]:
    data, path = tmp_path / "rows.jsonl", tmp_path / "policy.yaml"
    write_dataset(dataset, data)
    path.write_text(policy)
    return data, path


def test_calibrate_cli_takes_the_scope(tmp_path: Path) -> None:
    data, policy = _write(tmp_path, mixed(), POLICY)
    app = build_app()
    base = ["calibrate", str(policy), "--data", str(data), "--target-quality-retained", "0.97"]
    run = CliRunner().invoke(app, [*base, "--scope", "traffic"])
    assert run.exit_code == 0, run.output
    assert "over all turns together" in run.output
    run = CliRunner().invoke(app, [*base, "--scope", "everything"])
    assert run.exit_code == 2 and "--scope" in run.output
    # without a panel to replay there is one threshold and no kinds to trade
    policy.write_text(POLICY.split("drafts:")[0])
    run = CliRunner().invoke(app, [*base, "--scope", "traffic"])
    assert run.exit_code == 2 and "--scope: needs a policy with a drafts: section" in run.output


def two_way(n: int = 400) -> Dataset:
    """Four-option questions the cheap drafters agree on and get right, and two-way ones
    (a blank to fill) where they split half the time: there the panel escalates."""
    rows = []
    for i in range(n):
        if i % 2:
            prompt = f"Which is a planet? ({i})\nA) Mars\nB) Moon{i}\nC) Sun\nD) Comet"
            drafts = ("A", "A")
        else:
            prompt = f"Tom lent Bob a pen {i} because _ had none.\nA) Tom\nB) Bob"
            # of these: a split on one in two, an agreed wrong answer on one in four
            drafts = ("B", "A") if i % 4 == 0 else ("A", "A") if i % 8 == 6 else ("B", "B")
        fast_q = 1.0 if drafts[0] == ("A" if i % 2 else "B") else 0.0
        other_q = 1.0 if drafts[1] == ("A" if i % 2 else "B") else 0.0
        rows.append(
            EvalRow.build(
                f"q{i}",
                [{"role": "user", "content": prompt}],
                {
                    "fast": Outcome(quality=fast_q, text=drafts[0], cost=0.001),
                    "other": Outcome(quality=other_q, text=drafts[1], cost=0.001),
                    "big": Outcome(quality=1.0, text="A" if i % 2 else "B", cost=0.1),
                },
            )
        )
    return Dataset(name="two-way", rows=tuple(rows), fast_model="fast", frontier_model="big")


def test_panel_labels_mark_what_the_panel_cannot_answer_itself() -> None:
    labelled = panel_labelled(load_policy(POLICY), two_way())
    assert labelled.fast_model == "panel of 2 (fast, other)"
    q = {r.id: r.outcomes[labelled.fast_model].quality for r in labelled.rows}
    assert q["q1"] == 1.0  # four options: agreed and right
    assert q["q0"] == 0.0  # a split: the panel escalated
    assert q["q2"] == 1.0  # agreed and right
    assert q["q6"] == 0.0  # agreed on a wrong answer: not the panel's to answer either
    # a row without the other drafter's outcome is left out, not labelled
    rows = two_way().rows
    gap = rows[0].__class__(
        id="gap",
        turn=rows[1].turn,
        outcomes={k: v for k, v in rows[1].outcomes.items() if k != "other"},
    )
    short = panel_labelled(
        load_policy(POLICY),
        Dataset(name="gap", rows=(*rows, gap), fast_model="fast", frontier_model="big"),
    )
    assert "gap" not in {r.id for r in short.rows} and len(short.rows) == len(rows)


def test_fit_scorer_with_panel_labels_learns_the_kind_of_request(tmp_path: Path) -> None:
    data, policy = _write(tmp_path, two_way(), POLICY)
    out = tmp_path / "scorer.json"
    run = CliRunner().invoke(
        build_app(),
        ["fit-scorer", str(policy), "--data", str(data), "--panel-labels", "-o", str(out)],
    )
    assert run.exit_code == 0, run.output
    assert "panel of 2 (fast, other)" in run.output
    assert "current (heuristic)" in run.output  # the policy's own scorer, on the same labels
    learned = f"scoring: {{type: learned, threshold: 0.5, options: {{path: '{out}'}}}}"
    scorer = build_scorer(load_policy(POLICY.replace(SCORING, learned)).scoring)
    scores = {r.id: scorer.score(r.turn).value for r in two_way().rows}
    two = [scores[f"q{i}"] for i in range(0, 400, 2)]
    four = [scores[f"q{i}"] for i in range(1, 400, 2)]
    assert min(two) > max(four)  # the two-way questions go to the frontier first
    # the same fit from Python: the report names the panel and beats prompt length
    report = fit_panel_scorer(load_policy(POLICY), two_way(), bootstrap=0)
    assert report.fast_model == "panel of 2 (fast, other)"
    assert report.apgr["fitted"] > report.apgr["prompt length"]


def test_panel_labels_need_a_panel(tmp_path: Path) -> None:
    data, policy = _write(tmp_path, two_way(), POLICY.split("drafts:")[0])
    run = CliRunner().invoke(
        build_app(), ["fit-scorer", str(policy), "--data", str(data), "--panel-labels"]
    )
    assert run.exit_code == 1
    assert "--panel-labels: the policy has no drafts: section" in run.output


def test_the_traffic_scope_does_not_warn_about_a_small_kind(tmp_path: Path) -> None:
    # 150 prose rows: below 200 a kind's own bound is the exact one, and calibrate warns,
    # unless one bound over all 750 rows is what the target is held to
    data, policy = _write(tmp_path, mixed(n_tools=600, n_prose=150), POLICY)
    base = ["calibrate", str(policy), "--data", str(data), "--target-quality-retained", "0.95"]
    kind = CliRunner().invoke(build_app(), base)
    traffic = CliRunner().invoke(build_app(), [*base, "--scope", "traffic"])
    assert kind.exit_code == traffic.exit_code == 0, kind.output + traffic.output
    assert "fewer than 200 calibration rows for prose" in kind.output
    assert "fewer than 200 calibration rows" not in traffic.output


def test_fit_scorer_holdout_fits_on_the_rows_calibrate_calibrates_on(tmp_path: Path) -> None:
    from tiered_router.evaluation.verification import holdout_split

    data, policy = _write(tmp_path, two_way(), POLICY)
    run = CliRunner().invoke(
        build_app(),
        ["fit-scorer", str(policy), "--data", str(data), "--panel-labels", "--holdout", "0.5",
         "--json"],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    calibration, held = holdout_split(two_way(), 0.5)
    assert json.loads(run.stdout)["rows"] == len(calibration) < len(calibration) + len(held)
    bad = CliRunner().invoke(
        build_app(), ["fit-scorer", str(policy), "--data", str(data), "--holdout", "1"]
    )
    assert bad.exit_code == 2 and "--holdout" in bad.output


def test_on_one_kind_the_traffic_scope_chooses_as_the_kind_scope() -> None:
    # 60 tool rows, every fast answer right: below 200 rows the bound is the exact one
    # (Clopper-Pearson over the fast-answered rows), so all-fast cannot show 95 %
    policy, target = load_policy(POLICY), Target(quality_retained=0.95)
    few = mixed(n_tools=60, n_prose=0)
    per_kind = choose_verification(policy, few, target)
    traffic = choose_verification(policy, few, target, scope="traffic")
    assert traffic.threshold == per_kind.threshold
    assert traffic.calibration == per_kind.calibration
    assert traffic.calibration.retained_low >= 0.95 and traffic.calibration.fast_share < 1.0


def test_write_keeps_the_candidates_when_prose_gets_one_draft(tmp_path: Path) -> None:
    """Prose chosen as one draft of the fast tier leaves ``drafts.when``; the section's
    drafters (what a later calibrate chooses from) stay, so calibrating again replays as much.
    """
    data, policy = _write(tmp_path, mixed(), POLICY.replace("min_agreement: 1.0}", "when: [all]}"))
    base = ["calibrate", str(policy), "--data", str(data), "--target-quality-retained", "0.97"]
    first = CliRunner().invoke(build_app(), [*base, "--scope", "traffic", "--write", "--json"])
    assert first.exit_code == 0, first.output
    chosen = json.loads(first.stdout)
    assert chosen["kinds"]["prose"]["k"] == 1 and chosen["kinds"]["prose"]["backends"] == ["fast"]
    written = load_policy(policy)
    assert written.drafts is not None
    assert written.drafts.backends == ["fast", "other"] and written.drafts.k == 2
    assert "all" not in written.drafts.when  # prose: one draft and the gate
    again = CliRunner().invoke(build_app(), [*base, "--scope", "traffic", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["kinds"] == chosen["kinds"]
