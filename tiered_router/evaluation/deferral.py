"""Offline: fit a panel's deferral model on recorded outcomes, check it, and replay it.

A policy with ``drafts:`` sends a fast turn to a panel; the answer the panel would accept
is then scored by a deferral model (:mod:`tiered_router.scoring.deferral`) over the turn's
prompt features and what the drafts say beyond their majority, and a score above the
threshold escalates the turn (reason ``deferred``). This module does the offline side:

- :func:`panel_vectors` replays the policy's panel over recorded rows and gives, per row
  the panel judges, the deferral vector of its drafts (the same function the engine calls,
  over the same drafts in the same order, each gated by the policy's gate);
- :func:`fit_deferral_model` cross-validates the model (rows of one agent task in one fold)
  against the panel alone (its agreement: the least agreed answers first), prompt length
  and random, **at the same cost**, then fits the model kept on every row;
- :func:`apply_deferral` turns a panel replay into the replay with a deferral threshold,
  for ``eval`` and for ``calibrate`` (:func:`deferral_candidates`), which chooses the
  threshold under the same lower-bound rule as the rest of the verification.

Pure computation over recorded data: no model calls, no clock; folds are seeded.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_router.evaluation.dataset import Dataset, DatasetError, EvalRow, Outcome
from tiered_router.evaluation.panel import (
    AGREEMENTS,
    PanelSpec,
    _drafts,
    apply_panel,
    draft_key,
    panel_models,
    single_draft,
)
from tiered_router.evaluation.sweep import PathOutcome, RowRun
from tiered_router.gate import QualityGate
from tiered_router.panels import AnswerKey, DraftView, draft_text, needed_votes
from tiered_router.policy._drafts import in_zone
from tiered_router.scoring.deferral import (
    DEFERRAL_FEATURES,
    DeferralModel,
    deferral_features,
    fit_deferral,
)

if TYPE_CHECKING:
    from tiered_router.evaluation.runner import Replay
    from tiered_router.policy import Policy

__all__ = [
    "DEFERRED",
    "DeferralFitReport",
    "apply_deferral",
    "deferral_candidates",
    "fit_deferral_model",
    "panel_vectors",
    "replay_deferral",
]

DEFERRED = "deferred"
"""The escalation reason of a panel answer the deferral model sent on."""

MIN_ROWS = 50
"""The fewest rows with an accepted panel answer that :func:`fit_deferral_model` fits on."""

_MAJORITY = DEFERRAL_FEATURES.index("majority_share")
_THRESHOLDS = 40
_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)


def _panel_spec(policy: Policy, dataset: Dataset, replay: Replay) -> PanelSpec:
    spec = panel_models(policy, dataset, replay.fast_model)
    if spec is None:
        raise DatasetError(
            "a deferral model reads a panel's drafts: the policy's drafts: section must ask for "
            "k >= 2 drafts (or drafting backends of another model than the fast tier's)"
        )
    return spec


def panel_vectors(
    replay: Replay,
    spec: PanelSpec,
    *,
    gate: QualityGate | None = None,
    key: Callable[[Outcome, str, EvalRow], AnswerKey] = draft_key,
) -> dict[str, tuple[float, ...]]:
    """The deferral vector of each row the panel judges (by row id).

    Draft ``i`` is the panel's draft ``i`` (:func:`~.panel.apply_panel`'s), a draft the data
    lacks or that failed is a failed draft; each answered draft is gated by ``gate``.
    """
    gate = gate or QualityGate.from_config(replay.policy.gate)
    out: dict[str, tuple[float, ...]] = {}
    for row in replay.dataset.rows:
        if not spec.applies(row.turn):
            continue
        views = []
        for draft in _drafts(row, spec):
            if draft is None:
                views.append(DraftView(key=None))
                continue
            model, outcome = draft
            completion = outcome.completion(model=model, backend=model)
            views.append(
                DraftView(
                    key=key(outcome, model, row),
                    text=draft_text(completion),
                    passed=gate.evaluate(completion, row.turn).passed,
                )
            )
        out[row.id] = deferral_features(row.turn, views)
    return out


def _accepted(run: RowRun) -> bool:
    """Whether the panel's path returned a fast answer (what the engine asks the model on)."""
    return run.fast.tier == "fast" and not run.fast.escalated


def _deferred(fast: PathOutcome, front: PathOutcome) -> PathOutcome:
    return PathOutcome(
        quality=front.quality,
        cost=fast.cost + front.cost,
        latency_s=fast.latency_s + front.latency_s,
        tier=front.tier,
        frontier_called=front.frontier_called,
        escalated=True,
        escalations=(DEFERRED,),
        error=front.error,
    )


def apply_deferral(
    runs: Sequence[RowRun], scores: Mapping[str, float], threshold: float
) -> list[RowRun]:
    """The panel's runs with the deferral model asked after it.

    A row whose panel path returned a fast answer and whose score (``scores[row_id]``) is
    above ``threshold`` goes on to the frontier (its drafts' cost kept, reason ``deferred``).
    """
    out: list[RowRun] = []
    for run in runs:
        score = scores.get(run.row_id)
        if score is None or score <= threshold or not _accepted(run):
            out.append(run)
            continue
        path = _deferred(run.fast, run.frontier)
        headline = path if run.decided == "fast" else run.headline
        out.append(dataclasses.replace(run, fast=path, headline=headline))
    return out


def replay_deferral(
    policy: Policy,
    replay: Replay,
    runs: Sequence[RowRun],
    spec: PanelSpec,
    *,
    model: DeferralModel,
) -> tuple[list[RowRun], int]:
    """A panel's runs with the policy's deferral model asked after it, as the engine asks it.

    Each row the panel ``spec`` judges is scored on its drafts (:func:`panel_vectors`, the
    policy's gate); an accepted answer scored above the threshold goes on to the frontier
    (:func:`apply_deferral`). The threshold is the kind's own
    (``drafts.kinds.<kind>.deferral_threshold``) for a kind's panel, else
    ``drafts.deferral.threshold``. A model fitted on a panel of another size is not asked.

    Returns:
        The runs, and how many accepted panel answers of turns the policy sends fast were
        deferred.
    """
    drafts = policy.drafts
    # as the engine: a model fitted on a panel of another size is not asked
    if drafts is None or drafts.deferral is None or model.panel.get("k", spec.k) != spec.k:
        return list(runs), 0
    own = None if spec.kind is None else drafts.deferral_threshold(spec.kind)
    threshold = drafts.deferral.threshold if own is None else own
    # as the engine: a turn in the panel's one-draft zone has no panel to ask the model on
    zone = {r.row_id for r in runs if in_zone(r.score, spec.panel_above)}
    scores = {
        rid: model.score_vector(v)
        for rid, v in panel_vectors(replay, spec).items()
        if rid not in zone
    }
    out = apply_deferral(runs, scores, threshold)
    # counted where the policy sends the turn fast (elsewhere no panel runs: the changed fast
    # path only feeds the threshold sweep)
    deferred = sum(
        after.decided == "fast"
        and DEFERRED in after.fast.escalations
        and DEFERRED not in before.fast.escalations
        for before, after in zip(runs, out, strict=True)
    )
    return out, deferred


def deferral_candidates(
    policy: Policy,
    dataset: Dataset,
    replay: Replay,
    single: Sequence[RowRun],
    *,
    gate: QualityGate,
    key: Callable[[Outcome, str, EvalRow], AnswerKey],
    model: DeferralModel,
    ids: set[str],
) -> list[tuple[int, float, float, list[RowRun]]]:
    """Every panel + deferral threshold ``calibrate`` tries: ``(k, min_agreement, t, runs)``.

    The panel is the policy's own (the one the model was fitted on); ``min_agreement`` runs
    over :data:`~.panel.AGREEMENTS` (majorities only), the threshold over quantiles of the
    scores on the rows ``ids`` (the calibration rows).
    """
    spec = dataclasses.replace(_panel_spec(policy, dataset, replay), when=("all",))
    vectors = panel_vectors(replay, spec, gate=gate, key=key)
    scores = {rid: model.score_vector(v) for rid, v in vectors.items()}
    seen = sorted({s for rid, s in scores.items() if rid in ids})
    if not seen:
        return []
    last = len(seen) - 1
    thresholds = sorted({seen[round(i * last / _THRESHOLDS)] for i in range(_THRESHOLDS + 1)})
    out: list[tuple[int, float, float, list[RowRun]]] = []
    votes_seen: set[int] = set()
    for agreement in sorted(AGREEMENTS, reverse=True):
        votes = needed_votes(spec.k, agreement)
        if votes in votes_seen or votes * 2 <= spec.k:
            continue
        votes_seen.add(votes)
        sized = dataclasses.replace(spec.with_size(spec.k, agreement), when=("all",))
        runs = apply_panel(replay, single, sized, gate=gate, key=key)[0]
        for t in thresholds:
            out.append((spec.k, agreement, t, apply_deferral(runs, scores, t)))
    return out


@dataclass(frozen=True)
class DeferralFitReport:
    """What :func:`fit_deferral_model` measured, and the model fitted on every row.

    Attributes:
        dataset: The data's name.
        fast_model: The fast tier's model in the data.
        frontier_model: The frontier tier's model.
        panel: The panel replayed (``k``, ``min_agreement``, ``models``).
        rows: Rows replayed.
        asked: Rows whose panel answer the model is asked on (accepted by the panel).
        folds: Cross-validation folds.
        costs: The cost shares compared (of all-frontier on the rows): the out-of-fold
            model's cost when it defers 10 % ... 50 % of the asked rows.
        retained: Router -> quality retained (of all-frontier) at each of ``costs``:
            ``deferral model`` (out of fold), ``panel alone`` (least agreed answers first),
            ``prompt length`` (longest first), ``random`` (expected), ``oracle``.
        panel_only: The panel without deferral: ``(retained, cost share)``.
        model: The model fitted on every asked row.
        notes: Caveats.
    """

    dataset: str
    fast_model: str
    frontier_model: str
    panel: Mapping[str, Any]
    rows: int
    asked: int
    folds: int
    costs: tuple[float, ...]
    retained: Mapping[str, tuple[float, ...]]
    panel_only: tuple[float, float]
    model: DeferralModel = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def beats(self) -> tuple[str, ...]:
        """The baselines the model keeps more quality than at every cost compared."""
        mine = self.retained["deferral model"]
        return tuple(
            name
            for name, values in self.retained.items()
            if name not in ("deferral model", "oracle")
            and all(a > b for a, b in zip(mine, values, strict=True))
        )

    @property
    def verdict(self) -> str:
        """One sentence: whether the model is worth using on this data."""
        lost = [n for n in ("panel alone", "prompt length", "random") if n not in self.beats]
        if lost:
            return (
                "the deferral model does not keep more quality than " + ", ".join(lost) + " at "
                "every cost compared: keep the panel alone, or record more turns"
            )
        return (
            "the deferral model keeps more quality than the panel alone, prompt length and "
            "random at every cost compared: use it, then calibrate its threshold"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the model itself is left out: save it apart)."""
        return {
            "dataset": self.dataset,
            "fast_model": self.fast_model,
            "frontier_model": self.frontier_model,
            "panel": dict(self.panel),
            "rows": self.rows,
            "asked": self.asked,
            "folds": self.folds,
            "costs": [round(c, 4) for c in self.costs],
            "retained": {k: [round(v, 4) for v in vs] for k, vs in self.retained.items()},
            "panel_only": {
                "retained": round(self.panel_only[0], 4),
                "cost_share": round(self.panel_only[1], 4),
            },
            "beats": list(self.beats),
            "verdict": self.verdict,
            "notes": list(self.notes),
        }


def _order_at_cost(
    runs: Sequence[RowRun], order: Sequence[int], budget: float, base_q: float, base_c: float
) -> float:
    """Quality (sum) when the asked rows are deferred in ``order`` until ``budget`` is spent.

    The last row is taken in part (its share of the gain), so every router is compared at
    exactly the same cost.
    """
    q, c = base_q, base_c
    for i in order:
        r = runs[i]
        extra = r.frontier.cost
        gain = r.frontier.quality - r.fast.quality
        if c + extra >= budget:
            part = (budget - c) / extra if extra > 0 else 1.0
            return q + max(0.0, part) * gain
        q, c = q + gain, c + extra
    return q


def fit_deferral_model(
    policy: Policy,
    dataset: Dataset,
    *,
    fast_model: str | None = None,
    frontier_model: str | None = None,
    folds: int = 5,
    seed: int = 0,
    l2: float = 0.01,
) -> DeferralFitReport:
    """Cross-validate a deferral model for the policy's panel, then fit it on every row.

    The panel is the policy's ``drafts:`` section (its ``k``, ``backends``, ``min_agreement``;
    every kind of turn). Each row the panel accepts is scored by a model fitted on the other
    folds; the routers then defer the accepted answers in their order until a cost is
    reached, and the quality retained is compared at the same costs.

    Raises:
        DatasetError: When the policy's panel cannot be replayed from the data, or fewer
            than :data:`MIN_ROWS` rows have an accepted panel answer, or fewer tasks than
            folds.
    """
    from tiered_router.evaluation.runner import Replay, run_rows
    from tiered_router.evaluation.scorer_fit import fold_of

    replay = Replay.bind(
        single_draft(policy), dataset, fast_model=fast_model, frontier_model=frontier_model
    )
    spec = dataclasses.replace(_panel_spec(policy, dataset, replay), when=("all",))
    gate = QualityGate.from_config(policy.gate)
    single = run_rows(replay)
    runs = apply_panel(replay, single, spec, gate=gate)[0]
    vectors = panel_vectors(replay, spec, gate=gate)
    asked = [i for i, r in enumerate(runs) if _accepted(r) and r.row_id in vectors]
    if len(asked) < MIN_ROWS:
        raise DatasetError(
            f"{dataset.name}: {len(asked)} rows have an answer the panel accepts; fitting a "
            f"deferral model needs at least {MIN_ROWS}"
        )
    rows = {r.id: r for r in dataset.rows}
    groups = [rows[runs[i].row_id].task_id or f"row:{runs[i].row_id}" for i in asked]
    try:
        fold = fold_of(groups, folds=folds, seed=seed)
    except ValueError as exc:
        raise DatasetError(f"{dataset.name}: {exc}") from exc
    x = [vectors[runs[i].row_id] for i in asked]
    y = [1.0 - runs[i].fast.quality for i in asked]
    oof = [0.0] * len(asked)
    for k in sorted(set(fold)):
        train = [j for j in range(len(asked)) if fold[j] != k]
        fitted = fit_deferral([x[j] for j in train], [y[j] for j in train], l2=l2)
        for j in range(len(asked)):
            if fold[j] == k:
                oof[j] = fitted.score_vector(x[j])
    qf = sum(r.frontier.quality for r in runs)
    cf = sum(r.frontier.cost for r in runs)
    base_q = sum(r.fast.quality for r in runs)
    base_c = sum(r.fast.cost for r in runs)
    by_model = sorted(range(len(asked)), key=lambda j: -oof[j])
    costs: list[float] = []
    for share in _SHARES:
        m = max(1, round(share * len(asked)))
        costs.append(base_c + sum(runs[asked[j]].frontier.cost for j in by_model[:m]))
    rng = random.Random(seed)
    shuffled = list(range(len(asked)))
    rng.shuffle(shuffled)
    chars = [rows[runs[i].row_id].turn.prompt_chars for i in asked]
    orders: dict[str, list[int]] = {
        "deferral model": by_model,
        # the panel alone: the least agreed first (majority share, then the tie in random order)
        "panel alone": sorted(shuffled, key=lambda j: x[j][_MAJORITY]),
        "prompt length": sorted(shuffled, key=lambda j: -chars[j]),
        "oracle": sorted(shuffled, key=lambda j: -_gain(runs[asked[j]])),
    }
    local = [runs[i] for i in asked]
    retained: dict[str, tuple[float, ...]] = {}
    for name, order in orders.items():
        retained[name] = tuple(_order_at_cost(local, order, c, base_q, base_c) / qf for c in costs)
    total_gain = sum(_gain(r) for r in local)
    total_extra = sum(r.frontier.cost for r in local)
    retained["random"] = tuple(
        (base_q + total_gain * min(1.0, (c - base_c) / total_extra)) / qf if total_extra else 0.0
        for c in costs
    )
    fast, frontier = replay.fast_model, replay.frontier_model
    panel = {
        "k": spec.k,
        "backends": list(policy.drafts.backends) if policy.drafts is not None else [],
        "min_agreement": spec.min_agreement,
        "models": list(spec.models),
    }
    model = fit_deferral(
        x,
        y,
        l2=l2,
        panel=panel,
        meta={"data": dataset.name, "fast_model": fast, "frontier_model": frontier},
    )
    notes = list(dataset.notes)
    if len(asked) < 300:
        notes.append(f"only {len(asked)} rows with an accepted panel answer: the figures are rough")
    return DeferralFitReport(
        dataset=dataset.name,
        fast_model=fast,
        frontier_model=frontier,
        panel=panel,
        rows=len(runs),
        asked=len(asked),
        folds=folds,
        costs=tuple(c / cf for c in costs),
        retained=retained,
        panel_only=(base_q / qf if qf else 0.0, base_c / cf if cf else 0.0),
        model=model,
        notes=tuple(notes),
    )


def _gain(run: RowRun) -> float:
    return run.frontier.quality - run.fast.quality
