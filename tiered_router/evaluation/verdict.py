"""What an evaluation may claim: the verdict against the baselines, sample size, threshold spread.

``eval`` prints, and the HTML report shows, one verdict computed here from the same figures
as the table beside it; ``calibrate`` uses the sample-size floor and the bootstrap interval
of the threshold it picks, so that a threshold chosen from a handful of turns is not written
into a policy without the caller saying so (``--force``).

Example:
    ```python
    from tiered_router.evaluation import evaluate, load_sample
    from tiered_router.evaluation.verdict import judge, small_sample

    result = evaluate("policy.yaml", load_sample())
    print(judge(result).text)
    print(small_sample(result.summary.n))   # None from 200 rows up
    ```
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.results import EvalResult
from tiered_router.evaluation.sweep import CalibrationError, calibrate, sweep

__all__ = [
    "MIN_CALIBRATION_ROWS",
    "ORACLE_MEANING",
    "ThresholdInterval",
    "Verdict",
    "judge",
    "small_sample",
    "threshold_interval",
]

MIN_CALIBRATION_ROWS = 200
"""Fewest turns with outcomes of both tiers from which ``calibrate --write`` writes a threshold."""

ORACLE_MEANING = (
    "the oracle router knows every answer's label: it calls the frontier only where the fast "
    "answer is wrong and the frontier's right, so its APGR is the ceiling for this data (above "
    "1 where the fast model is right on turns the frontier gets wrong)"
)
"""What the oracle figure of a table or a report means."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The policy against random and prompt length at its own frontier share.

    Attributes:
        outcome: ``better`` / ``equal`` / ``worse`` than the better baseline, or ``no routing``
            when the scores decide every turn for one tier (then nothing is compared).
        text: The verdict in one paragraph, in the figures the table prints.
        best: The better baseline's name (``None`` without baselines).
        margin: Policy quality minus the better baseline's.

    """

    outcome: Literal["better", "equal", "worse", "no routing"]
    text: str
    best: str | None = None
    margin: float = 0.0


def _pct(v: float) -> str:
    return f"{v:.1%}"


def judge(result: EvalResult) -> Verdict | None:
    """Return the verdict of ``result`` (``None`` when it has no baselines).

    Shares are named as the table names them: "fast share (answered fast)" counts turns the
    fast tier answered, so a threshold that decides every turn for the fast tier, whose drafts
    then all escalate, is said to do that, not to "send every turn to the fast tier".
    """
    s = result.summary
    if not result.baselines:
        return None
    best = max(result.baselines, key=lambda b: b.quality)
    margin = s.quality - best.quality
    same_cost = any(b.name.endswith("(same cost)") for b in result.baselines)
    if s.routed_fast_share in (0.0, 1.0) and result.panel is None:
        tier = "fast" if s.routed_fast_share == 1.0 else "frontier"
        what = f"the scores decide every turn for the {tier} tier on this data"
        if tier == "fast":
            what += (
                f" (answered fast: {_pct(s.fast_share)}; frontier calls: "
                f"{_pct(s.frontier_call_share)}, {s.escalations} of them escalations)"
            )
        return Verdict(
            outcome="no routing",
            text=(
                f"verdict: {what}, so there is no routing to compare with random and prompt "
                "length. Calibrate the threshold on data like your traffic: `tiered-router "
                "calibrate POLICY --data YOUR_DATA --target-quality-retained 0.95`."
            ),
            best=best.name,
            margin=margin,
        )
    if margin < -1e-9:
        return Verdict(
            outcome="worse",
            text=(
                f"verdict: the policy keeps LESS quality than {best.name} at the same frontier "
                f"share ({_pct(s.frontier_call_share)}): {s.quality:.4f} against "
                f"{best.quality:.4f}. Try `tiered-router calibrate POLICY --data YOUR_DATA ...` "
                "on data like your traffic, a scorer fitted on it (`tiered-router fit-scorer "
                "POLICY --data YOUR_DATA -o scorer.json`), or another scorer (scoring.type: "
                "transfer | learned | heuristic; docs/scoring.md)."
            ),
            best=best.name,
            margin=margin,
        )
    than = "more quality than" if margin > 1e-9 else "as much quality as"
    return Verdict(
        outcome="better" if margin > 1e-9 else "equal",
        text=(
            f"verdict: the policy keeps {than} random and prompt length at the same "
            + ("frontier share and cost" if same_cost else "frontier share")
            + f" (+{margin:.4f} over the {'best' if same_cost else 'better'}, {best.name})."
        ),
        best=best.name,
        margin=margin,
    )


def small_sample(n: int) -> str | None:
    """Return a warning when ``n`` turns are too few to trust a threshold (else ``None``)."""
    if n >= MIN_CALIBRATION_ROWS:
        return None
    return (
        f"only {n} turn(s) with outcomes of both tiers: fewer than {MIN_CALIBRATION_ROWS}, the "
        "figures and any threshold found here are noise (calibrate --write refuses without "
        "--force); record more traffic first"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdInterval:
    """Where the calibrated threshold lands when the rows are resampled.

    Attributes:
        low: 2.5th percentile of the thresholds picked on bootstrap resamples.
        high: 97.5th percentile.
        resamples: Resamples drawn.
        unmet: Resamples on which no threshold met the target.

    """

    low: float
    high: float
    resamples: int
    unmet: int


def threshold_interval(
    result: EvalResult,
    target: Target,
    *,
    resamples: int = 200,
    seed: int = 0,
) -> ThresholdInterval | None:
    """Bootstrap the threshold calibration: resample the rows, sweep, pick again.

    Args:
        result: The evaluation whose rows are resampled.
        target: The calibration target (as ``calibrate`` was given it).
        resamples: How many resamples to draw.
        seed: Seed of the resampling (the same result gives the same interval).

    Returns:
        The interval, or ``None`` when no resample met the target.

    """
    rows = list(result.rows)
    if not rows:
        return None
    rng = random.Random(seed)
    picked: list[float] = []
    unmet = 0
    for _ in range(resamples):
        drawn = rng.choices(rows, k=len(rows))
        quality = sum(r.frontier.quality for r in drawn) / len(drawn)
        cost = sum(r.frontier.cost for r in drawn)
        try:
            point = calibrate(
                sweep(drawn),
                fast_share=target.fast_share,
                quality_retained=target.quality_retained,
                max_cost_per_turn=target.max_cost_per_turn,
                max_cost_share=target.max_cost_share,
                frontier_quality=quality,
                frontier_cost=cost,
            )
            picked.append(point.threshold)
        except (CalibrationError, ValueError):
            unmet += 1
    if not picked:
        return None
    picked.sort()

    def at(q: float) -> float:
        return picked[min(len(picked) - 1, max(0, round(q * (len(picked) - 1))))]

    return ThresholdInterval(low=at(0.025), high=at(0.975), resamples=resamples, unmet=unmet)
