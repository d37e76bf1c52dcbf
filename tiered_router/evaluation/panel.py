"""Offline replay of a draft panel: the policy's ``drafts:`` section over recorded outcomes.

A panel sends a fast turn to ``k`` drafts and accepts the majority answer only when at least
``min_agreement`` of them give it (:func:`tiered_router.panels.tally`); the accepted draft is
then gated as a single draft is. Offline, the drafts come from the data:

- from ``samples``: with one drafting model (``drafts.backends`` empty or naming backends of
  one model), draft 0 is the model's outcome and draft ``i`` its ``samples[i - 1]``;
- from several recorded models: when ``drafts.backends`` name backends whose ``model:`` (or
  ``options.outcome_model``) are keys of the rows' ``outcomes``, draft ``i`` is the outcome of
  ``backends[i % len(backends)]``'s model (its samples when a model comes round again).

Each row's fast path becomes the panel's path: every draft's cost is counted (cancelling a
decided panel's last drafts saves time, not money that was already spent); the latency is
the slowest draft's (they run concurrently), plus the frontier path's when it escalates. A
disagreement escalates with reason ``drafts_disagree``; a panel that cannot compare its
drafts (no checkable answer) falls back to the gate on the first draft. A draft the data does
not have counts as failed (against agreement), and the result says on how many rows.

Pure computation over recorded data: no model calls, no clock, no randomness.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tiered_router.evaluation.dataset import Dataset, DatasetError, EvalRow, Outcome
from tiered_router.evaluation.replay import simulated_latency
from tiered_router.evaluation.runner import Replay
from tiered_router.evaluation.sweep import PathOutcome, RowRun
from tiered_router.gate import QualityGate
from tiered_router.panels import (
    AnswerKey,
    answer_key,
    normalise_answer,
    panel_kinds,
    tally,
    turn_kind,
)
from tiered_router.policy import Policy
from tiered_router.policy._drafts import in_zone
from tiered_router.turn import Turn

__all__ = [
    "PanelSpec",
    "PanelStats",
    "apply_panel",
    "draft_key",
    "merge_stats",
    "panel_models",
    "panel_specs",
    "single_draft",
]

DISAGREE = "drafts_disagree"
"""The escalation reason of a panel whose drafts disagree."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelSpec:
    """The panel replayed: size, agreement needed, and the recorded model of each draft.

    Attributes:
        k: Drafts per turn.
        min_agreement: Share of the ``k`` drafts that must give the majority answer.
        models: The recorded model of draft ``i`` (length ``k``).
        backend: The policy backend name the drafts' latency model comes from.
        when: The ``drafts.when`` kinds of turn that get a panel (the others keep one draft).
    """

    k: int
    min_agreement: float
    models: tuple[str, ...]
    backend: str = ""
    when: tuple[str, ...] = ("all",)
    kind: str | None = None
    """Only turns of this :func:`~tiered_router.panels.turn_kind` (a ``drafts.kinds`` entry)."""
    exclude: tuple[str, ...] = ()
    """Turn kinds left to their own ``drafts.kinds`` entry."""
    panel_above: float | None = None
    """``drafts.panel_above``: a row scored at or below it keeps its one draft (``None`` or
    ``0``: no zone)."""

    def applies(self, turn: Turn) -> bool:
        """Whether a turn gets this panel (as the engine plans it)."""
        kind = turn_kind(turn)
        if self.kind is not None:
            return kind == self.kind
        return kind not in self.exclude and bool(panel_kinds(turn).intersection(self.when))

    def with_size(self, k: int, min_agreement: float) -> PanelSpec:
        """The same drafting models (in turn) for another ``k`` and ``min_agreement``."""
        cycle = _cycle(self.models)
        models = tuple(cycle[i % len(cycle)] for i in range(k))
        return dataclasses.replace(self, k=k, min_agreement=min_agreement, models=models)


def _cycle(models: Sequence[str]) -> list[str]:
    """The shortest repeating unit of ``models`` (``a b a b`` -> ``a b``)."""
    for n in range(1, len(models) + 1):
        if all(models[i] == models[i % n] for i in range(len(models))):
            return list(models[:n])
    return list(models)


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelStats:
    """How the panel decided over the rows.

    Attributes:
        k: Drafts per turn.
        min_agreement: Share needed.
        models: Recorded model of each draft.
        agreed: Rows whose drafts agreed.
        disagreed: Rows whose drafts disagreed (escalated).
        not_comparable: Rows the panel could not judge (fell back to the gate).
        missing_drafts: Rows where the data had fewer than ``k`` drafts.
        draft_cost: Cost of every draft, US dollars.
        single_draft_rows: Rows left to one draft (``drafts.when``, or scored at or below
            ``drafts.panel_above``).
    """

    k: int
    min_agreement: float
    models: tuple[str, ...]
    agreed: int
    disagreed: int
    not_comparable: int
    missing_drafts: int
    draft_cost: float
    single_draft_rows: int = 0

    def to_dict(self) -> dict[str, object]:
        """Return the figures, JSON-ready."""
        out = dataclasses.asdict(self)
        out["models"] = list(self.models)
        return out


def merge_stats(a: PanelStats, b: PanelStats) -> PanelStats:
    """Two panels' figures over disjoint rows (``drafts.kinds``) as one.

    ``k`` and ``min_agreement`` are the larger panel's; ``models`` lists both panels'.
    """
    big = a if a.k >= b.k else b
    return PanelStats(
        k=big.k,
        min_agreement=big.min_agreement,
        models=tuple(dict.fromkeys((*a.models, *b.models))),
        agreed=a.agreed + b.agreed,
        disagreed=a.disagreed + b.disagreed,
        not_comparable=a.not_comparable + b.not_comparable,
        missing_drafts=a.missing_drafts + b.missing_drafts,
        draft_cost=a.draft_cost + b.draft_cost,
        single_draft_rows=min(a.single_draft_rows, b.single_draft_rows),
    )


def single_draft(policy: Policy) -> Policy:
    """The policy without its panel.

    The router the panel replay starts from (one fast draft and the gate per row), and what
    the baselines route with.
    """
    return policy.model_copy(update={"drafts": None})


def panel_models(policy: Policy, dataset: Dataset, fast_model: str) -> PanelSpec | None:
    """The panel the policy's ``drafts:`` section asks for, or ``None`` without one.

    Raises:
        DatasetError: When a drafts backend's model has no outcomes in the data.
    """
    drafts = policy.drafts
    if drafts is None:
        return None
    if not drafts.backends:  # the fast tier's model, sampled k times
        models = [fast_model]
        names = [policy.tiers.fast]
    else:
        names = list(drafts.backends)
        models = []
        for name in names:
            config = policy.backends[name]
            model = config.options.get("outcome_model") or config.model
            if name == policy.tiers.fast and model not in dataset.models:
                model = fast_model  # the fast tier replays the data's fast model
            if not isinstance(model, str) or model not in dataset.models:
                raise DatasetError(
                    f"{dataset.name}: drafts backend {name!r} names model {model!r}, which has "
                    f"no outcomes; known: {', '.join(dataset.models)}"
                )
            models.append(model)
    if len(set(models)) == 1 and drafts.k == 1:
        return None  # one draft of one model: the ordinary fast path
    spec = PanelSpec(
        k=1,
        min_agreement=drafts.min_agreement,
        models=(models[0],),
        backend=names[0],
        when=tuple(drafts.when),
        panel_above=drafts.panel_above,
    )
    return dataclasses.replace(spec, models=tuple(models)).with_size(drafts.k, drafts.min_agreement)


def panel_specs(policy: Policy, dataset: Dataset, fast_model: str) -> list[PanelSpec]:
    """Every panel the policy's ``drafts:`` asks for: the section's own, one per ``kinds`` entry.

    A kind whose entry gives one draft of the fast model has no panel (it is left out).

    Raises:
        DatasetError: When a drafts backend's model has no outcomes in the data.
    """
    drafts = policy.drafts
    if drafts is None:
        return []
    kinds = tuple(drafts.kinds)
    out: list[PanelSpec] = []
    base = panel_models(policy, dataset, fast_model)
    if base is not None:
        out.append(dataclasses.replace(base, exclude=kinds))
    for kind in kinds:
        k, agreement, backends = drafts.for_kind(kind)
        own = drafts.model_copy(
            update={
                "k": k,
                "min_agreement": agreement,
                "backends": backends,
                "kinds": {},
                "panel_above": drafts.panel_above_for(kind),
            }
        )
        spec = panel_models(policy.model_copy(update={"drafts": own}), dataset, fast_model)
        if spec is not None:
            out.append(dataclasses.replace(spec, kind=kind, when=("all",)))
    return out


def draft_key(outcome: Outcome, model: str, row: EvalRow) -> AnswerKey:
    """The answer key of one recorded draft: its recorded ``answer`` when it has one."""
    if outcome.answer is not None:
        value = normalise_answer(outcome.answer)
        if value is not None:
            return AnswerKey(kind="final", value=value, detail=value)
        return AnswerKey(kind="not_comparable", value="", detail="empty recorded answer")
    return answer_key(outcome.completion(model=model, backend=model), row.turn)


def _drafts(row: EvalRow, spec: PanelSpec) -> list[tuple[str, Outcome] | None]:
    seen: Counter[str] = Counter()
    out: list[tuple[str, Outcome] | None] = []
    for model in spec.models:
        index = seen[model]
        seen[model] += 1
        base = row.outcomes.get(model)
        if base is None:
            out.append(None)
            continue
        draft = (
            base
            if index == 0
            else (base.samples[index - 1] if index <= len(base.samples) else None)
        )
        out.append(None if draft is None or draft.error is not None else (model, draft))
    return out


def apply_panel(
    replay: Replay,
    runs: Sequence[RowRun],
    spec: PanelSpec,
    *,
    gate: QualityGate | None = None,
    key: Callable[[Outcome, str, EvalRow], AnswerKey] = draft_key,
) -> tuple[list[RowRun], PanelStats]:
    """Replace each row's fast path by the panel's (and the headline, where it went fast).

    Args:
        replay: The policy bound to its data (prices, latency models).
        runs: The rows' runs with a single fast draft (:func:`~.runner.run_rows`).
        spec: The panel.
        gate: The gate for the accepted draft (default: the policy's).
        key: How a draft's answer is read (:func:`draft_key`; a benchmark compares others).

    Returns:
        The runs with the panel's fast path, and how the panel decided.
    """
    gate = gate or QualityGate.from_config(replay.policy.gate)
    latency_model = replay.policy.backends[spec.backend or replay.policy.tiers.fast].latency
    counts: Counter[str] = Counter()
    draft_cost = 0.0
    out: list[RowRun] = []
    for run in runs:
        row = replay.dataset.get(run.row_id)
        if row is None:
            raise DatasetError(f"{replay.dataset.name}: no row {run.row_id!r}")
        if not spec.applies(row.turn) or in_zone(run.score, spec.panel_above):
            counts["single"] += 1
            out.append(run)  # a turn drafts.when leaves out: one draft, as the engine does
            continue
        drafts = _drafts(row, spec)
        present = [d for d in drafts if d is not None]
        counts["missing"] += len(present) < spec.k
        keys = [None if d is None else key(d[1], d[0], row) for d in drafts]
        failed = {i for i, d in enumerate(drafts) if d is None}
        result = tally(keys, k=spec.k, min_agreement=spec.min_agreement, failed=failed)
        cost = sum(replay.outcome_cost(o, m) for m, o in present)
        draft_cost += cost
        latency = (
            max(
                (simulated_latency(o, latency_model, prefer_recorded=replay.recorded_latency))
                for _, o in present
            )
            if present
            else 0.0
        )
        if result.agreed:
            counts["agreed"] += 1
            chosen: tuple[str, Outcome] | None = drafts[result.members[0]]
            reason = "gate_failed"
        elif not result.comparable:
            counts["not_comparable"] += 1
            chosen = present[0] if present else None
            reason = "gate_failed"
        else:
            counts["disagreed"] += 1
            chosen, reason = None, DISAGREE
        path = _path(run, row, chosen, gate, cost=cost, latency=latency, reason=reason)
        headline = path if run.decided == "fast" else run.headline
        out.append(dataclasses.replace(run, fast=path, headline=headline))
    stats = PanelStats(
        k=spec.k,
        min_agreement=spec.min_agreement,
        models=spec.models,
        agreed=counts["agreed"],
        disagreed=counts["disagreed"],
        not_comparable=counts["not_comparable"],
        missing_drafts=counts["missing"],
        draft_cost=draft_cost,
        single_draft_rows=counts["single"],
    )
    return out, stats


def _path(
    run: RowRun,
    row: EvalRow,
    chosen: tuple[str, Outcome] | None,
    gate: QualityGate,
    *,
    cost: float,
    latency: float,
    reason: str,
) -> PathOutcome:
    """The panel's path for one row: the accepted draft, or the frontier after it."""
    checks: tuple[str, ...] = ()
    if chosen is not None:
        model, outcome = chosen
        if not outcome.recorded:
            return _fast(outcome, cost, latency)
        verdict = gate.evaluate(outcome.completion(model=model, backend=model), row.turn)
        if verdict.passed:
            return _fast(outcome, cost, latency)
        checks = verdict.failed_checks
    front = run.frontier
    return PathOutcome(
        quality=front.quality,
        cost=cost + front.cost,
        latency_s=latency + front.latency_s,
        tier=front.tier,
        frontier_called=front.frontier_called,
        escalated=True,
        escalations=(reason,),
        failed_checks=checks,
        error=front.error,
    )


def _fast(outcome: Outcome, cost: float, latency: float) -> PathOutcome:
    return PathOutcome(
        quality=outcome.quality, cost=cost, latency_s=latency, tier="fast", frontier_called=False
    )


AGREEMENTS = (0.5, 0.6, 0.67, 0.75, 0.8, 1.0)
"""The ``min_agreement`` values ``calibrate`` tries."""
_MAX_K = 9


def recorded_drafts(dataset: Dataset, spec: PanelSpec) -> int:
    """Drafts the data holds for the panel's models on most rows (at most 9).

    For each drafting model, its outcome and its samples; the count is the most common over
    the rows, so that a few rows with extra samples do not set it.
    """
    counts: Counter[int] = Counter()
    cycle = _cycle(spec.models)
    for row in dataset.rows:
        total = 0
        for model in cycle:
            outcome = row.outcomes.get(model)
            total += 0 if outcome is None else 1 + len(outcome.samples)
        counts[total] += 1
    most = counts.most_common(1)[0][0] if counts else 1
    return max(1, min(_MAX_K, most))


def panel_grid(
    replay: Replay,
    runs: Sequence[RowRun],
    spec: PanelSpec,
    *,
    ks: Sequence[int],
    agreements: Sequence[float] = AGREEMENTS,
) -> list[tuple[PanelSpec, list[RowRun], PanelStats]]:
    """The panel's runs for every ``k`` and ``min_agreement`` (for ``calibrate``).

    ``k = 1`` is the single-draft fast path itself (``runs``), tried once.
    """
    gate = QualityGate.from_config(replay.policy.gate)
    out: list[tuple[PanelSpec, list[RowRun], PanelStats]] = []
    for k in ks:
        for agreement in agreements if k > 1 else agreements[:1]:
            sized = spec.with_size(k, agreement)
            if k == 1 and sized.models[0] == replay.fast_model:
                stats = PanelStats(
                    k=1,
                    min_agreement=agreement,
                    models=sized.models,
                    agreed=0,
                    disagreed=0,
                    not_comparable=0,
                    missing_drafts=0,
                    draft_cost=sum(r.fast_only_cost for r in runs),
                )
                out.append((sized, list(runs), stats))
                continue
            panel_runs, stats = apply_panel(replay, runs, sized, gate=gate)
            out.append((sized, panel_runs, stats))
    return out
