"""Shadow-labelled traffic -> dataset -> fit-scorer -> a policy on the fitted scorer -> calibrate.

The loop README.md and docs/calibration.md promise, end to end over real HTTP: a scripted
OpenAI-compatible upstream stands in for both models. The fast one breaks its JSON on
extraction requests, whatever their length, and handles the requests for a proof, the
opposite of what the policy's hand-set heuristic scorer expects. Shadow mode labels every
turn on both tiers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tiered_router import JSONLSink, Router, Turn, load_policy
from tiered_router.cli import build_app
from tiered_router.testing import Reply, ScriptedServer

POLICY = """
version: 1
backends:
  mercury: {preset: mercury-2, api_key: "${INCEPTION_API_KEY}"}
  frontier: {model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}
tiers: {fast: mercury, frontier: frontier}
scoring: {type: heuristic, threshold: 0.05}
shadow: {rate: 1.0}
"""

PROOF = "Prove, step by step, that the claim about item {i} holds, and answer as JSON."
EXTRACT = "Extract the city of item {i} as JSON and nothing else, from the note below."


def _prompt(rng: random.Random, i: int, proof: bool) -> str:
    # the same length distribution for both kinds: prompt length says nothing here
    head = (PROOF if proof else EXTRACT).format(i=i)
    return head + " Note: " + "lorem ipsum " * rng.randint(2, 40)


def _upstream(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][-1]["content"]
    if body["model"] == "mercury-2" and prompt.startswith("Extract"):
        return Reply.bad_json()
    return Reply.json({"answer": prompt[:12]})


@pytest.fixture
def traffic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "INCEPTION_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    rng = random.Random(7)
    with ScriptedServer(default=_upstream) as upstream:
        policy = upstream.stand_in("policy.yaml")
        with Router(policy, sinks=[JSONLSink("traces.jsonl")], record=True) as router:
            for i in range(160):
                turn = Turn(
                    [{"role": "user", "content": _prompt(rng, i, proof=i % 2 == 0)}],
                    response_format={"type": "json_object"},
                    id=f"turn-{i}",
                )
                router.complete(turn)
            router.drain_shadows()
    return tmp_path


def test_shadow_labelled_traffic_fits_a_scorer_that_the_policy_then_uses(traffic: Path) -> None:
    runner = CliRunner()
    app = build_app()
    built = runner.invoke(app, ["dataset", "from-traces", "traces.jsonl", "-o", "mine.jsonl"])
    assert built.exit_code == 0, built.output
    assert "160 with outcomes of both tiers" in built.output

    args = ["fit-scorer", "policy.yaml", "--data", "mine.jsonl", "-o", "scorer.json"]
    fitted = runner.invoke(app, [*args, "--bootstrap", "100", "--json"])
    assert fitted.exit_code == 0, fitted.output
    report = json.loads(fitted.output)
    assert (report["fast_model"], report["frontier_model"]) == ("mercury-2", "gpt-5.2")
    assert report["rows"] == 160 and report["output"] == "scorer.json"
    # the gate labelled the fast model's broken extractions 0: the fitted scorer finds them;
    # prompt length cannot, and the heuristic scorer sends the proofs up instead
    assert report["apgr"]["fitted"] > report["apgr"]["prompt length"] + 0.2
    assert {"random", "prompt length", "current (heuristic)"} <= set(report["beats"])
    assert report["verdict"].endswith("switch to it, then calibrate its threshold")

    policy_text = POLICY.replace(
        "scoring: {type: heuristic, threshold: 0.05}",
        "scoring: {type: learned, threshold: 0.5, options: {path: scorer.json}}",
    )
    (traffic / "policy.yaml").write_text(policy_text, encoding="utf-8")
    # 160 labelled turns, under calibrate's floor of 200 for --write: forced, knowingly
    calibrated = runner.invoke(
        app,
        ["calibrate", "policy.yaml", "--data", "mine.jsonl", "--target-quality-retained", "1.0"]
        + ["--write", "--force", "--json"],
    )
    assert calibrated.exit_code == 0, calibrated.output
    expected = json.loads(calibrated.output)["expected"]
    # every extraction goes to the frontier, every proof stays fast
    assert expected["quality_retained"] == 1.0
    assert expected["fast_share"] == pytest.approx(0.5)

    router = Router(load_policy("policy.yaml"))
    proof = router.decide(Turn([{"role": "user", "content": _prompt(random.Random(1), 9, True)}]))
    note = router.decide(Turn([{"role": "user", "content": _prompt(random.Random(1), 9, False)}]))
    assert (proof.tier, note.tier) == ("fast", "frontier")
