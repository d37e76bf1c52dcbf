"""Fit the policy's scorer for a panel: which turns to send to the frontier before any draft.

A policy with ``drafts:`` decides twice. Its scorer decides, before any draft, whether the
turn goes to the frontier tier at once; the panel (and its deferral model) decides after
the drafts. The learned scorer fitted by :func:`~tiered_router.evaluation.scorer_fit.
fit_scorer` learns where *one* fast answer loses to the frontier's. In front of a panel
the question is another one: where the panel will not give a right answer of its own, so
that its drafts are spent for nothing (it escalates) or for a wrong answer (it agrees on
one). Where cheap models fail together (a two-way choice they are near chance on), that
is a kind of request the prompt shows, before any draft is paid for.

:func:`fit_panel_scorer` replays the policy's panel on the recorded rows
(:func:`~tiered_router.evaluation.panel.apply_panel`, the drafts each row records), labels
each row by whether the panel answered it itself and right (its quality when it did, 0
when it escalated), and fits the learned scorer with that label in place of the fast
model's, cross-validated and compared with prompt length and random exactly as
``fit_scorer`` does. ``tiered-router fit-scorer POLICY --panel-labels`` is its command.
Write the model to a file, name it in ``scoring: {type: learned, options: {path: ...}}``
and let ``calibrate`` pick its threshold beside the panel's.

Measured in ``benchmarks/bench_deferral.py`` (docs/panels.md): on RouterBench's
multiple-choice and code rows, with it, the deferral model and ``calibrate --scope
traffic`` fitted and calibrated on one half, the held-out half keeps 97.1 % of GPT-4's
accuracy at 45.4 % of its cost (random at that cost: 88.4 %).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiered_router.evaluation._outcome import Outcome
from tiered_router.evaluation.dataset import Dataset, DatasetError, EvalRow

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tiered_router.evaluation.scorer_fit import ScorerFitReport
    from tiered_router.policy import Policy
    from tiered_router.scoring import Scorer

__all__ = ["fit_panel_scorer", "panel_labelled"]


def panel_labelled(
    policy: Policy,
    dataset: Dataset,
    *,
    fast_model: str | None = None,
    frontier_model: str | None = None,
) -> Dataset:
    """The rows with the policy's panels as the fast side: quality where they answered.

    Each row is replayed as the policy's ``drafts:`` section plays it (its own panel, each
    ``drafts.kinds`` entry's, one draft and the gate for the kinds ``when`` leaves out) and
    gains the outcome named by :attr:`Dataset.fast_model` of the result (``panel of k
    (models)``): the answer's quality when the turn was answered on the fast path (the
    drafts agreed and passed, or the one draft passed the gate), 0 when it escalated; its
    cost is what that path cost. Rows that lack an outcome of a drafting model are left out.

    Raises:
        DatasetError: The policy has no ``drafts:`` section, or no panel the data records
            several drafts of, or a drafting model has no outcomes in the data.
    """
    from tiered_router.evaluation.panel import (
        apply_panel,
        panel_specs,
        recorded_drafts,
        single_draft,
    )
    from tiered_router.evaluation.runner import Replay, run_rows
    from tiered_router.gate import QualityGate

    if policy.drafts is None:
        raise DatasetError("--panel-labels: the policy has no drafts: section to label by")
    replay = Replay.bind(
        single_draft(policy), dataset, fast_model=fast_model, frontier_model=frontier_model
    )
    specs = [
        spec
        for spec in panel_specs(policy, dataset, replay.fast_model)
        if len(set(spec.models)) > 1 or recorded_drafts(dataset, spec) >= 2
    ]
    if not specs:
        raise DatasetError(
            "--panel-labels: the policy's drafts: section asks for no panel the data can replay "
            "(k >= 2 drafts of several models, or samples of one: the data records one draft "
            "per turn of each drafting model here)"
        )
    models = sorted({m for spec in specs for m in spec.models})
    kept = tuple(r for r in dataset.rows if all(m in r.outcomes for m in models))
    if not kept:
        raise DatasetError(f"--panel-labels: no row records a draft of each of {models}")
    rows_in = dataclasses.replace(dataset, rows=kept)
    replay = Replay.bind(
        single_draft(policy), rows_in, fast_model=fast_model, frontier_model=frontier_model
    )
    gate = QualityGate.from_config(policy.gate)
    runs = run_rows(replay)
    for spec in specs:
        runs = apply_panel(replay, runs, spec, gate=gate)[0]
    first = max(specs, key=lambda spec: spec.k)
    name = f"panel of {first.k} ({', '.join(first.models)})"
    by_id = {r.id: r for r in kept}
    rows: list[EvalRow] = []
    for run in runs:
        row = by_id[run.row_id]
        answered = run.fast.tier == "fast" and not run.fast.escalated
        label = Outcome(quality=run.fast.quality if answered else 0.0, cost=run.fast.cost)
        rows.append(dataclasses.replace(row, outcomes={**row.outcomes, name: label}))
    return dataclasses.replace(
        dataset, rows=tuple(rows), fast_model=name, frontier_model=replay.frontier_model
    )


def fit_panel_scorer(
    policy: Policy,
    dataset: Dataset,
    *,
    fast_model: str | None = None,
    frontier_model: str | None = None,
    compare: Mapping[str, Scorer] | None = None,
    folds: int = 5,
    seed: int = 0,
    bootstrap: int = 200,
) -> ScorerFitReport:
    """Fit the learned scorer on whether the policy's panel answers each row right itself.

    The report is :func:`~tiered_router.evaluation.scorer_fit.fit_scorer`'s, on
    :func:`panel_labelled` rows: its ``fast_model`` names the panel; ``compare`` adds other
    scorers (the policy's current one), scored as they are on the same labels.

    Raises:
        DatasetError: No panel to replay, or too few rows (as ``fit_scorer``).
        ValueError: On a bad ``folds`` or ``bootstrap``.
    """
    from tiered_router.evaluation.scorer_fit import fit_scorer

    labelled = panel_labelled(policy, dataset, fast_model=fast_model, frontier_model=frontier_model)
    return fit_scorer(labelled, compare=compare, folds=folds, seed=seed, bootstrap=bootstrap)
