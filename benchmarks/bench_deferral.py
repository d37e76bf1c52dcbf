"""A panel's deferral model, fitted and calibrated on one half of the rows, scored on the other.

    PYTHONPATH=. TIERED_ROUTER_DATA_DIR=../shared/data python benchmarks/bench_deferral.py

For each configuration: the rows are split in halves by ``sha256(row id)`` (the split of
``calibrate --holdout 0.5``). On the calibration half, the deferral model is fitted for the
policy's panel (:func:`tiered_router.evaluation.deferral.fit_deferral_model`, the code of
``tiered-router fit-scorer`` on a policy with ``drafts:``), written to a file the policy
names in ``drafts.deferral``, and ``calibrate``'s chooser
(:func:`~tiered_router.evaluation.verification.choose_verification`) picks threshold,
panel, agreement and deferral threshold per kind so that the one-sided 95 % lower bound of
the quality retained meets the target. The chosen policy is then scored on the held-out
half, beside, **at the same cost** on the same rows: the panel alone (the same drafts,
least agreed answers escalated first; at its own cost where its drafts for every row cost
more than the choice), prompt length, random (expected), and all-fast,
all-frontier and the oracle (the cheapest of fast-or-frontier that is right).

Each configuration runs twice: with the policy's prompt scorer as shipped and the bound per
kind of turn (``calibrate``'s default), then with the scorer fitted on the panel's own
outcomes on the calibration half (:func:`tiered_router.evaluation.panel_scorer.
fit_panel_scorer`, ``fit-scorer --panel-labels``) and one bound over all turns
(``calibrate --scope traffic``).

Targets (issue 27): multiple choice and code (RouterBench ARC-Challenge, Winogrande, MBPP)
>= 97 % of the strong model's accuracy at <= 50 % of its cost.

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import tempfile
from pathlib import Path

from bench_verify import BFCL_DRAFTERS, RB_DRAFTERS, panel_policy

from tiered_router.evaluation import find_data_dir
from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.deferral import fit_deferral_model, panel_vectors
from tiered_router.evaluation.panel import apply_panel, panel_models, single_draft
from tiered_router.evaluation.panel_scorer import fit_panel_scorer
from tiered_router.evaluation.runner import Replay, run_rows
from tiered_router.evaluation.sources import load_data
from tiered_router.evaluation.sweep import CalibrationError, RowRun
from tiered_router.evaluation.verification import choose_verification, holdout_split
from tiered_router.gate import QualityGate
from tiered_router.policy._schema import Policy
from tiered_router.scoring.deferral import DEFERRAL_FEATURES

_RB_CHEAP = {
    "yi": "zero-one-ai/Yi-34B-Chat",
    "mixtral": "mistralai/mixtral-8x7b-chat",
    "mistral7b": "mistralai/mistral-7b-chat",
}
CASES = [
    # (name, data, drafters, strong, target retained, cost target)
    ("RouterBench ARC-C + Winogrande + MBPP: gpt-3.5 + mixtral + claude-instant -> gpt-4",
     "routerbench", RB_DRAFTERS, "gpt-4-1106-preview", 0.97, 0.50),
    ("RouterBench, same rows: Yi-34B + mixtral + mistral-7b -> gpt-4",
     "routerbench", _RB_CHEAP, "gpt-4-1106-preview", 0.97, 0.50),
    ("BFCL tools: gpt-4o-mini (FC, text) + gpt-3.5 -> gpt-4o-2024-08-06",
     "bfcl", BFCL_DRAFTERS, "gpt-4o-2024-08-06-FC", 0.99, 0.35),
]  # fmt: skip


def _policy(
    data: str,
    drafters: dict[str, str],
    strong: str,
    deferral: str | None,
    scorer: str | None = None,
) -> Policy:
    extra = f", deferral: {{path: '{deferral}'}}" if deferral else ""
    drafts = f"min_agreement: 0.67, when: [all]{extra}"
    if scorer is None:
        return panel_policy(data, drafters, strong, drafts)
    scoring = f"{{type: learned, threshold: 0.5, options: {{path: '{scorer}'}}}}"
    return panel_policy(data, drafters, strong, drafts, scoring)


def _at_cost(runs: list[RowRun], order: list[int], budget: float) -> float:
    """Quality (sum) deferring the rows in ``order`` until ``budget`` (last row in part)."""
    q = sum(r.fast.quality for r in runs)
    c = sum(r.fast.cost for r in runs)
    for i in order:
        r = runs[i]
        extra, gain = r.frontier.cost, r.frontier.quality - r.fast.quality
        if c + extra >= budget:
            return q + max(0.0, (budget - c) / extra if extra else 1.0) * gain
        q, c = q + gain, c + extra
    return q


def _baselines(
    policy: Policy, data: str, held: set[str], cost_share: float
) -> dict[str, tuple[float, float]]:
    """Panel alone, prompt length, random at ``cost_share``; all-fast, all-frontier, oracle."""
    dataset = load_data(f"{data}:{next(iter(policy.backends.values())).model}->"
                        f"{policy.backends['big'].model}")  # fmt: skip
    replay = Replay.bind(single_draft(policy), dataset)
    single = [r for r in run_rows(replay) if r.row_id in held]
    spec = panel_models(policy, dataset, replay.fast_model)
    assert spec is not None
    gate = QualityGate.from_config(policy.gate)
    panel = apply_panel(replay, single, dataclasses.replace(spec, when=("all",)), gate=gate)[0]
    qf = sum(r.frontier.quality for r in single)
    cf = sum(r.frontier.cost for r in single)
    budget = cost_share * cf
    chars = {r.id: r.turn.prompt_chars for r in dataset.rows}
    # the panel alone at the same cost: its disagreements escalate, then its accepted answers
    # in the order of its agreement (the least agreed first; ties in a fixed hashed order)
    vectors = panel_vectors(replay, dataclasses.replace(spec, when=("all",)), gate=gate)
    majority = DEFERRAL_FEATURES.index("majority_share")
    accepted = [i for i, r in enumerate(panel) if r.fast.tier == "fast" and not r.fast.escalated]
    agreed_order = sorted(
        accepted,
        key=lambda i: (
            vectors[panel[i].row_id][majority],
            hashlib.sha256(panel[i].row_id.encode()).hexdigest(),
        ),
    )
    # its drafts for every row may cost more than the budget: then it is shown at its own cost
    panel_cost = max(budget, sum(r.fast.cost for r in panel))
    out = {
        "panel alone (same cost, or its own if higher)": (
            _at_cost(panel, agreed_order, budget) / qf,
            panel_cost / cf,
        ),
        "prompt length (same cost)": (
            _at_cost(
                single,
                sorted(range(len(single)), key=lambda i: -chars[single[i].row_id]),
                budget,
            )
            / qf,
            cost_share,
        ),
    }
    base_q = sum(r.fast.quality for r in single)
    base_c = sum(r.fast.cost for r in single)
    gain = sum(r.frontier.quality - r.fast.quality for r in single)
    extra = sum(r.frontier.cost for r in single)
    share = min(1.0, max(0.0, (budget - base_c) / extra)) if extra else 0.0
    out["random (same cost)"] = ((base_q + share * gain) / qf, cost_share)
    out["all-fast"] = (base_q / qf, base_c / cf)
    out["all-frontier"] = (1.0, 1.0)
    oq = oc = 0.0
    for r in single:
        if r.fast.quality >= r.frontier.quality:
            oq, oc = oq + r.fast.quality, oc + r.fast.cost
        else:
            oq, oc = oq + r.frontier.quality, oc + r.frontier.cost
    out["oracle"] = (oq / qf, oc / cf)
    return out


def _case(
    name: str,
    data: str,
    drafters: dict[str, str],
    strong: str,
    retained: float,
    cost: float,
    *,
    panel_scorer: bool = False,
) -> None:
    """Fit on the calibration half, choose with calibrate's chooser, score the other half.

    With ``panel_scorer``, the policy's scorer is first fitted on the panel's own outcomes
    (``fit-scorer --panel-labels``), the deferral model fitted behind it, and the bound is
    over all turns together (``calibrate --scope traffic``).
    """
    first = next(iter(drafters.values()))
    dataset = load_data(f"{data}:{first}->{strong}")
    calib, held = holdout_split(dataset, 0.5)
    half = dataclasses.replace(dataset, rows=tuple(r for r in dataset.rows if r.id in calib))
    how = (
        "scorer fitted on the panel's outcomes (fit-scorer --panel-labels), deferral model, "
        "calibrate --scope traffic"
        if panel_scorer
        else "prompt scorer as shipped (transfer), deferral model, calibrate --scope kind"
    )
    print(f"## {name}\n{how}")
    print(f"{len(calib)} calibration rows, {len(held)} held-out rows")
    with tempfile.TemporaryDirectory() as tmp:
        scorer = None
        if panel_scorer:
            fitted = fit_panel_scorer(_policy(data, drafters, strong, None), half, bootstrap=0)
            scorer = str(Path(tmp) / "scorer.json")
            fitted.model.save(scorer)
            print(
                f"scorer fitted on the panel's outcomes (calibration half, 5-fold APGR): "
                f"fitted {fitted.apgr['fitted']:.3f}, prompt length "
                f"{fitted.apgr['prompt length']:.3f}, random 0.500"
            )
        report = fit_deferral_model(_policy(data, drafters, strong, None, scorer), half)
        print(
            "deferral fit (calibration half, 5-fold, quality retained at the same cost): "
            + ", ".join(
                f"{c:.0%}: model {report.retained['deferral model'][i]:.1%} / panel "
                f"{report.retained['panel alone'][i]:.1%} / length "
                f"{report.retained['prompt length'][i]:.1%} / random "
                f"{report.retained['random'][i]:.1%}"
                for i, c in enumerate(report.costs)
            )
        )
        print(
            f"the panel alone on the calibration half: {report.panel_only[0]:.1%} at "
            f"{report.panel_only[1]:.1%} of the cost (its drafts for every row)"
        )
        path = Path(tmp) / "deferral.json"
        report.model.save(path)
        policy = _policy(data, drafters, strong, str(path), scorer)
        target = Target(quality_retained=retained)
        scope = "traffic" if panel_scorer else "kind"
        try:
            choice = choose_verification(policy, dataset, target, holdout=0.5, scope=scope)
        except CalibrationError as exc:
            print(f"calibrate: none meets the target: {exc}\n")
            return
        h = choice.holdout
        assert h is not None
        chosen = "; ".join(f"{k.kind}: {k.verification.describe()}" for k in choice.kinds)
        print(f"chosen on the calibration half: {chosen}; threshold {choice.threshold:g}")
        print(
            f"calibration half: retained {choice.calibration.retained:.1%} (95 % lower "
            f"bound {choice.calibration.retained_low:.1%}, {scope} scope), cost "
            f"{choice.calibration.cost_share:.1%}"
        )
        base = _baselines(policy, data, held, h.cost_share)
    met = h.retained >= retained and h.cost_share <= cost
    print("| held-out half | quality retained | cost share |")
    print("| --- | --- | --- |")
    used = any(k.verification.defer_above is not None for k in choice.kinds)
    label = "calibrate's choice (" + ("with" if used else "without") + " the deferral model)"
    print(f"| {label} | {h.retained:.1%} | {h.cost_share:.1%} |")
    for label, (q, c) in base.items():
        print(f"| {label} | {q:.1%} | {c:.1%} |")
    print(
        f"target >= {retained:.0%} at <= {cost:.0%}: {'met' if met else 'MISSED'} "
        f"({h.retained:.1%} at {h.cost_share:.1%})\n"
    )
    sys.stdout.flush()


def main() -> None:
    if find_data_dir() is None:
        print("skipped: ../shared/data not found (set TIERED_ROUTER_DATA_DIR)")
        return
    for name, data, drafters, strong, retained, cost in CASES:
        _case(name, data, drafters, strong, retained, cost)
        _case(name, data, drafters, strong, retained, cost, panel_scorer=True)


if __name__ == "__main__":
    main()
