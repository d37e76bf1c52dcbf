"""A panel's deferral model (issue 27, item 3): signals beyond agreement, offline and live.

- the draft signals say what the drafts say beyond their majority;
- the engine (over real HTTP, a scripted server) and the offline replay compute the same
  deferral score from the same drafts;
- the engine escalates with reason ``deferred`` when the score is above the threshold;
- ``fit-scorer`` on a policy with ``drafts:`` writes a model a policy loads, and
  ``calibrate`` picks its threshold under the lower bound where agreement alone cannot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from routerkit import make_policy
from typer.testing import CliRunner

from tiered_router import PolicyError, Router, Turn, load_policy
from tiered_router.cli import build_app
from tiered_router.evaluation import Dataset, EvalRow, Outcome, write_dataset
from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.deferral import fit_deferral_model, panel_vectors
from tiered_router.evaluation.panel import panel_models, single_draft
from tiered_router.evaluation.runner import Replay
from tiered_router.evaluation.sweep import CalibrationError
from tiered_router.evaluation.verification import choose_verification
from tiered_router.panels import SIGNAL_NAMES, AnswerKey, DraftView, draft_signals
from tiered_router.scoring.deferral import DEFERRAL_FEATURES, DeferralModel
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

QUESTION = "Which gas do plants take in?\nA) oxygen\nB) carbon dioxide\nAnswer:"


def option(letter: str) -> AnswerKey:
    return AnswerKey(kind="final", value=f"option:{letter}", detail=f"option:{letter}")


def test_draft_signals_read_beyond_the_majority() -> None:
    drafts = [
        DraftView(key=option("B"), text="The answer is B.", passed=True),
        DraftView(key=option("A"), text="I think the answer is A, probably.", passed=True),
        DraftView(key=option("B"), text="B", passed=False),
        DraftView(key=None),  # failed
    ]
    s = dict(zip(SIGNAL_NAMES, draft_signals(drafts), strict=True))
    assert s["answers"] == pytest.approx(2 / 4)
    assert s["majority_share"] == pytest.approx(2 / 4)
    assert s["runner_up_share"] == pytest.approx(1 / 4)
    assert s["failed_share"] == pytest.approx(1 / 4)
    assert s["gate_failed_share"] == pytest.approx(1 / 3)
    assert s["hedging"] == pytest.approx(1 / 3)
    assert (s["in_majority_0"], s["in_majority_1"], s["in_majority_2"]) == (1.0, 0.0, 1.0)
    assert 0.0 < s["text_overlap"] < 1.0 and 0.0 < s["length_spread"] <= 1.0
    # the same answers, all unanimous and plain: nothing to defer on
    calm = dict(
        zip(SIGNAL_NAMES, draft_signals([DraftView(key=option("B"), text="B")] * 3), strict=True)
    )
    assert calm["majority_share"] == 1.0 and calm["hedging"] == 0.0 and calm["answers"] == 1 / 3
    with pytest.raises(ValueError, match="at least one draft"):
        draft_signals([])


def every_feature_model(bias: float = -4.0, panel: dict[str, Any] | None = None) -> DeferralModel:
    """A model that weighs every feature differently: any difference in a vector shows."""
    weights = {name: 0.05 * (i % 7 + 1) * (-1) ** i for i, name in enumerate(DEFERRAL_FEATURES)}
    return DeferralModel(bias=bias, weights=weights, panel=panel or {"k": 3})


def three_drafter_policy(server: ScriptedServer, model_path: Path, threshold: float) -> Any:
    policy = make_policy(
        server,
        retries=(0, 0),
        drafts={
            "k": 3,
            "backends": ["fast", "b", "c"],
            "min_agreement": 0.67,
            "when": ["all"],
            "deferral": {"path": str(model_path), "threshold": threshold},
        },
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
    )
    base = policy["backends"]["fast"]
    policy["backends"]["b"] = {**base, "model": "fast-b"}
    policy["backends"]["c"] = {**base, "model": "fast-c"}
    return policy


TEXTS = {
    "fast-model": "B",
    "fast-b": "I think the answer is B, but it may be A.",
    "fast-c": "B",
}


def script_drafts(server: ScriptedServer) -> None:
    for model, text in TEXTS.items():
        server.script([Reply.text(text)], model=model)
    server.script([Reply.text("The answer is B.")], model="frontier-model")


@pytest.mark.anyio
async def test_live_and_offline_scores_agree(server: ScriptedServer, tmp_path: Path) -> None:
    model = every_feature_model()
    path = tmp_path / "deferral.json"
    model.save(path)
    policy = three_drafter_policy(server, path, threshold=1.0)
    script_drafts(server)
    sink = MemorySink()
    turn = Turn([{"role": "user", "content": QUESTION}])
    async with Router(policy, sinks=[sink]) as router:
        result = await router.acomplete(turn)
    assert result.tier == "fast"  # threshold 1.0: never deferred
    live = sink.traces[-1].panel
    assert live is not None and "deferral" in live
    # offline: the same drafts as recorded outcomes, replayed by the evaluation wing
    row = EvalRow.build(
        "q",
        [{"role": "user", "content": QUESTION}],
        {
            **{m: Outcome(quality=1.0, text=t, cost=0.001) for m, t in TEXTS.items()},
            "frontier-model": Outcome(quality=1.0, text="B", cost=0.01),
        },
    )
    data = Dataset(
        name="one", rows=(row,), fast_model="fast-model", frontier_model="frontier-model"
    )
    loaded = load_policy(policy)
    replay = Replay.bind(single_draft(loaded), data)
    spec = panel_models(loaded, data, replay.fast_model)
    assert spec is not None
    vector = panel_vectors(replay, spec)["q"]
    assert live["deferral"]["score"] == pytest.approx(model.score_vector(vector), abs=1e-4)


@pytest.mark.anyio
async def test_engine_escalates_on_the_deferral_score(
    server: ScriptedServer, tmp_path: Path
) -> None:
    path = tmp_path / "deferral.json"
    every_feature_model(bias=6.0).save(path)  # P(wrong) close to 1 on any drafts
    script_drafts(server)
    sink = MemorySink()
    turn = Turn([{"role": "user", "content": QUESTION}])
    async with Router(three_drafter_policy(server, path, threshold=0.5), sinks=[sink]) as router:
        result = await router.acomplete(turn)
    trace = sink.traces[-1]
    assert result.tier == "frontier" and result.escalated
    assert trace.escalations == ("deferred",)
    assert trace.panel is not None and trace.panel["agreed"] is True
    assert trace.panel["deferral"]["score"] > 0.5 and trace.panel["deferral"]["threshold"] == 0.5
    drafts = [a for a in trace.attempts if a.role == "draft"]
    assert len(drafts) == 3 and all(a.verdict is not None for a in drafts)  # every draft gated
    assert len(server.requests_for("frontier-model")) == 1
    # the same drafts under a model that trusts them: answered fast
    every_feature_model(bias=-8.0).save(path)
    script_drafts(server)
    with Router(three_drafter_policy(server, path, threshold=0.5), sinks=[sink]) as router:
        again = router.complete(turn)
    assert again.tier == "fast" and sink.traces[-1].escalations == ()


def test_a_bad_deferral_file_is_a_policy_error(server: ScriptedServer, tmp_path: Path) -> None:
    path = tmp_path / "deferral.json"
    path.write_text('{"format": "tiered-router/learned-scorer", "version": 2}')
    with pytest.raises(PolicyError, match="drafts.deferral.path") as info:
        load_policy(three_drafter_policy(server, path, threshold=0.5))
    assert "not a deferral model" in str(info.value)


def hedged_dataset(n: int = 300) -> Dataset:
    """Three cheap drafters that always agree (their errors are shared), but hedge when wrong.

    Agreement cannot see the wrong rows (one in five); the drafts' wording can.
    """
    rows = []
    for i in range(n):
        wrong = i % 5 == 0
        text = "I think the answer is A, probably." if wrong else "The answer is B."
        q = 0.0 if wrong else 1.0
        rows.append(
            EvalRow.build(
                f"r{i}",
                [{"role": "user", "content": f"Question {i}: which one?\nA) x{i}\nB) y{i}\n"}],
                {
                    "fast": Outcome(quality=q, text=text, cost=0.001),
                    "other": Outcome(quality=q, text=text, cost=0.001),
                    "third": Outcome(quality=q, text=text, cost=0.001),
                    "big": Outcome(quality=1.0, text="B", cost=0.1),
                },
            )
        )
    return Dataset(name="hedges", rows=tuple(rows), fast_model="fast", frontier_model="big")


POLICY = """\
version: 1
backends:
  fast: {model: fast, kind: diffusion}
  other: {model: other, kind: diffusion}
  third: {model: third, kind: diffusion}
  big: {model: big}
tiers: {fast: fast, frontier: big}
scoring: {type: heuristic, threshold: 1.0}
drafts:
  k: 3
  backends: [fast, other, third]
  min_agreement: 0.67
  when: [all]
"""


def test_fit_scorer_writes_a_model_and_calibrate_picks_its_threshold(tmp_path: Path) -> None:
    data = tmp_path / "hedges.jsonl"
    write_dataset(hedged_dataset(), data)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "deferral.json"
    app = build_app()
    run = CliRunner().invoke(
        app, ["fit-scorer", str(policy), "--data", str(data), "--output", str(out), "--json"]
    )
    assert run.exit_code == 0, run.output
    report = json.loads(run.output)
    assert report["asked"] == 300 and report["panel"]["k"] == 3
    model = DeferralModel.load(out)  # the file loads
    assert model.panel["k"] == 3 and model.weights["hedging"] > 0
    # the deferral model beats the panel alone at every cost compared
    assert "panel alone" in report["beats"] and "random" in report["beats"]
    # agreement alone cannot hold 95 % below the frontier's cost on these rows
    plain = load_policy(POLICY)
    target = Target(quality_retained=0.95)
    try:
        alone = choose_verification(plain, hedged_dataset(), target)
        assert alone.calibration.cost_share > 0.9
    except CalibrationError:
        pass
    # with the model, calibrate picks a deferral threshold that meets the bound, cheaply
    with_model = POLICY + f"  deferral: {{path: '{out}'}}\n"
    policy.write_text(with_model)
    choice = choose_verification(load_policy(with_model), hedged_dataset(), target)
    (answer,) = choice.kinds
    assert answer.verification.defer_above is not None
    assert choice.calibration.retained_low >= 0.95
    assert choice.calibration.cost_share < 0.4
    # --write sets it, comments kept, and the policy loads with it
    run = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(policy),
            "--data",
            str(data),
            "--target-quality-retained",
            "0.95",
            "--write",
            "--force",
        ],
    )
    assert run.exit_code == 0, run.output
    written = yaml.safe_load(policy.read_text())
    threshold = written["drafts"]["kinds"]["answer"]["deferral_threshold"]
    assert threshold == pytest.approx(answer.verification.defer_above, abs=1e-6)
    assert load_policy(policy).drafts is not None


def test_eval_replays_the_deferral_model_the_engine_asks(tmp_path: Path) -> None:
    """`tiered-router eval` on a policy with drafts.deferral defers what the engine would."""
    data = tmp_path / "hedges.jsonl"
    write_dataset(hedged_dataset(), data)
    model_path = tmp_path / "deferral.json"
    fit_deferral_model(load_policy(POLICY), hedged_dataset()).model.save(model_path)
    plain = tmp_path / "plain.yaml"
    plain.write_text(POLICY)
    deferring = tmp_path / "deferring.yaml"
    deferring.write_text(POLICY + f"  deferral: {{path: '{model_path}', threshold: 0.5}}\n")

    def metrics(policy: Path) -> dict[str, Any]:
        run = CliRunner().invoke(build_app(), ["eval", str(policy), "--data", str(data), "--json"])
        assert run.exit_code == 0, run.output
        return json.loads(run.output)  # type: ignore[no-any-return]

    alone, deferred = metrics(plain), metrics(deferring)
    kind_kept = tmp_path / "kind.yaml"  # the kind's own threshold wins over the section's
    kind_kept.write_text(
        POLICY
        + f"  deferral: {{path: '{model_path}', threshold: 0.5}}\n"
        + "  kinds: {answer: {deferral_threshold: 1.0}}\n"
    )
    kept = metrics(kind_kept)
    assert any(n.startswith("drafts.deferral replayed: 0 ") for n in kept["notes"]), kept["notes"]
    frontier_only = tmp_path / "frontier.yaml"  # no turn goes fast: no panel, none deferred
    frontier_only.write_text(
        (POLICY + f"  deferral: {{path: '{model_path}', threshold: 0.5}}\n").replace(
            "threshold: 1.0}", "threshold: 0.0}"
        )
    )
    front = metrics(frontier_only)
    assert any(n.startswith("drafts.deferral replayed: 0 ") for n in front["notes"]), front
    # the offline scores of the same drafts: the rows the model sends on
    policy = load_policy(deferring)
    dataset = hedged_dataset()
    replay = Replay.bind(single_draft(policy), dataset)
    spec = panel_models(policy, dataset, replay.fast_model)
    assert spec is not None
    model = DeferralModel.load(model_path)
    scores = {rid: model.score_vector(v) for rid, v in panel_vectors(replay, spec).items()}
    sent_on = {rid for rid, s in scores.items() if s > 0.5}
    assert sent_on == {f"r{i}" for i in range(0, 300, 5)}  # the hedged (wrong) rows
    note = next(n for n in deferred["notes"] if n.startswith("drafts.deferral replayed"))
    assert note.startswith(f"drafts.deferral replayed: {len(sent_on)} accepted panel answers")
    assert not any(n.startswith("drafts.deferral") for n in alone["notes"])
    # deferring the wrong rows restores the frontier's quality, at the frontier's price on them
    assert deferred["summary"]["quality"] > alone["summary"]["quality"]
    assert deferred["summary"]["cost"] > alone["summary"]["cost"]
    # a turn in the panel's one-draft zone has no panel, so the engine asks no model of it:
    # with every turn in the zone, nothing is deferred (the replay asked it of every row)
    zoned = tmp_path / "zoned.yaml"
    zoned.write_text(
        POLICY + f"  deferral: {{path: '{model_path}', threshold: 0.5}}\n  panel_above: 1.0\n"
    )
    in_zone = metrics(zoned)
    assert any(n.startswith("drafts.deferral replayed: 0 ") for n in in_zone["notes"]), in_zone
    assert in_zone["summary"]["cost"] < alone["summary"]["cost"]  # one draft a turn
