"""``calibrate`` chooses the whole verification: threshold, drafters, ``k``, agreement, per kind.

From recorded outcomes (a dataset, or the user's traces made into one), for a target, the
chooser replays every candidate verification without re-running the router (the drafts are
re-counted over the same recorded rows, :func:`~tiered_router.evaluation.panel.apply_panel`):

- **which fast backends draft**: every non-empty subset of ``drafts.backends`` (in their
  listed order; the fast tier's backend when the list is empty);
- **``k``** from the subset's size to the drafts the data records for it (at most 9), and
  **``min_agreement``** in :data:`~tiered_router.evaluation.panel.AGREEMENTS` (values that
  need the same number of votes are tried once);
- **per turn kind** (:func:`tiered_router.panels.turn_kind`: ``tools``, ``json``, ``answer``
  (a checkable final answer), ``prose``): each kind gets its own panel (prose is written
  to the section's own keys: a panel that cannot compare prose falls back to the gate on
  one draft, so it is chosen for prose only where the figures say so);
- **the one-draft zone** per kind (``drafts.kinds.<kind>.panel_above``, :mod:`._panel_zone`):
  each panel again with the turns scored at or below one of 15 score quantiles left to one
  draft and the gate (not for prose, whose choice is the section's own);
- **the threshold** (one for the policy: it is decided before any draft);
- with ``drafts.deferral`` (a model ``fit-scorer`` fitted for the policy's panel), **the
  deferral threshold** per kind: the policy's panel (its ``k`` and backends) at every
  majority ``min_agreement`` and 41 thresholds (quantiles of the model's scores on the
  calibration rows), beside the verifications above
  (:func:`tiered_router.evaluation.deferral.deferral_candidates`).

**The bound.** A target is met when a one-sided lower confidence bound (default 95 %) of
the quality retained meets it, not the point estimate. Quality retained is a ratio of two
means over the same rows, ``R = mean(q_policy) / mean(q_frontier)``; its bound is Fieller's:
the smallest ``r`` for which the paired differences ``d_i = q_policy_i - r * q_frontier_i``
have ``mean(d) - z * sd(d) / sqrt(n) = 0`` (``z`` the normal quantile of the confidence),
a root of a quadratic in ``r``. A cost target (``--max-cost``) is met when the one-sided
*upper* bound of the cost (the same construction on costs) is within it. The bound is per
kind: every kind meets the target (so the whole traffic does, whatever its mix). With
``scope="traffic"`` (``calibrate --scope traffic``) one bound over all the calibration rows
meets it instead, the kinds traded against each other (:mod:`._traffic_scope`): cheaper, and
a guarantee for traffic with the calibration rows' mix of kinds only.

Among the verifications that meet a quality target, the cheapest (then the best); for a
cost target, the best quality. Pure computation over recorded data: no model calls, no
clock; a hold-out split is by a hash of the row id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiered_router.evaluation._bounds import (
    Figures,
    _figures,
    _Sums,
    _z,
    cost_upper_bound,
    retained_lower_bound,
)
from tiered_router.evaluation._kind_sums import _Kind, _Zoned
from tiered_router.evaluation._panel_zone import without_zones, zone_values, zoned
from tiered_router.evaluation._traffic_scope import best_combination
from tiered_router.evaluation.baselines import shares_at_cost
from tiered_router.evaluation.panel import (
    AGREEMENTS,
    PanelSpec,
    apply_panel,
    draft_key,
    panel_models,
    recorded_drafts,
    single_draft,
)
from tiered_router.evaluation.sweep import CalibrationError, RowRun
from tiered_router.gate import QualityGate
from tiered_router.panels import TURN_KINDS, AnswerKey, needed_votes, turn_kind

if TYPE_CHECKING:
    from tiered_router.evaluation.calibration import Target
    from tiered_router.evaluation.dataset import Dataset, EvalRow, Outcome
    from tiered_router.evaluation.runner import Replay
    from tiered_router.policy import Policy
    from tiered_router.policy._drafts import DraftsConfig

__all__ = [
    "Choice",
    "Figures",
    "SCOPES",
    "KindChoice",
    "Verification",
    "choose_verification",
    "cost_upper_bound",
    "holdout_split",
    "retained_lower_bound",
]

_MAX_K = 9
SCOPES = ("kind", "traffic")
"""Where the target's bound holds: on every turn kind, or over the whole traffic."""


def holdout_split(dataset: Dataset, share: float) -> tuple[set[str], set[str]]:
    """Row ids for calibration and for the hold-out (``share`` of them, by ``sha256(id)``)."""
    if not 0 < share < 1:
        raise ValueError(f"--holdout: a share in (0, 1), got {share}")
    calib: set[str] = set()
    held: set[str] = set()
    for row in dataset.rows:
        h = int.from_bytes(hashlib.sha256(row.id.encode()).digest()[:4], "big") / 2**32
        (held if h < share else calib).add(row.id)
    return calib, held


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    """One candidate verification of a kind of turn.

    Attributes:
        backends: Policy backends that draft, in turn.
        k: Drafts per turn (1: one draft and the gate).
        min_agreement: Share of the drafts that must agree.
        defer_above: The deferral threshold (``None``: no deferral model asked).
        panel_above: The score at or below which a turn gets one draft and the gate
            (``drafts.panel_above``; ``None``: the panel on every fast turn of the kind).
    """

    backends: tuple[str, ...]
    k: int
    min_agreement: float
    defer_above: float | None = None
    panel_above: float | None = None

    def describe(self) -> str:
        """In words."""
        if self.k == 1:
            return f"one draft of {self.backends[0]} + gate"
        text = (
            f"{self.k} drafts of {'+'.join(self.backends)}, "
            f"{needed_votes(self.k, self.min_agreement)} must agree ({self.min_agreement:g})"
        )
        if self.defer_above is not None:
            text += f", deferred above {self.defer_above:.4g}"
        if self.panel_above is not None:
            text += f"; one draft + gate at or below score {self.panel_above:.4g}"
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class KindChoice:
    """The verification chosen for one kind of turn, with its figures on the calibration rows."""

    kind: str
    verification: Verification
    figures: Figures


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """What :func:`choose_verification` chose.

    Attributes:
        threshold: ``scoring.threshold``.
        kinds: The verification per kind of turn present in the rows.
        calibration: Totals on the calibration rows.
        holdout: Totals on the hold-out rows (``None`` without ``--holdout``).
        baselines: Name -> (quality retained, cost share) on the hold-out rows (or the
            calibration rows without one): ``random (same cost)``, ``prompt length (same
            cost)``, ``all-fast``, ``all-frontier``.
        confidence: Confidence of the bounds.
        tried: Verifications replayed (per kind, over every threshold).
        scope: Where the bound holds: ``kind`` (each kind of turn) or ``traffic`` (all rows).
    """

    threshold: float
    kinds: tuple[KindChoice, ...]
    calibration: Figures
    holdout: Figures | None
    baselines: Mapping[str, tuple[float, float]]
    confidence: float
    tried: int
    scope: str = "kind"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "threshold": self.threshold,
            "confidence": self.confidence,
            "bound": "one-sided Fieller bound of the quality ratio (normal approximation)",
            "scope": self.scope,
            "kinds": {
                c.kind: {
                    "backends": list(c.verification.backends),
                    "k": c.verification.k,
                    "min_agreement": c.verification.min_agreement,
                    "deferral_threshold": c.verification.defer_above,
                    "panel_above": c.verification.panel_above,
                    "figures": c.figures.to_dict(),
                }
                for c in self.kinds
            },
            "calibration": self.calibration.to_dict(),
            "holdout": None if self.holdout is None else self.holdout.to_dict(),
            "baselines": {
                k: {"retained": v[0], "cost_share": v[1]} for k, v in self.baselines.items()
            },
            "tried": self.tried,
        }


def _memo_key() -> Callable[[Outcome, str, EvalRow], AnswerKey]:
    cache: dict[tuple[str, str, int], AnswerKey] = {}

    def key(outcome: Outcome, model: str, row: EvalRow) -> AnswerKey:
        at = (row.id, model, id(outcome))
        hit = cache.get(at)
        if hit is None:
            hit = cache[at] = draft_key(outcome, model, row)
        return hit

    return key


def _candidates(
    policy: Policy, dataset: Dataset, replay: Replay
) -> list[tuple[Verification, PanelSpec | None]]:
    """Every verification to replay: subsets of the drafters x ``k`` x agreement."""
    drafts = policy.drafts
    names = list(drafts.backends) if drafts is not None and drafts.backends else []
    names = names or [policy.tiers.fast]
    out: list[tuple[Verification, PanelSpec | None]] = [
        (Verification(backends=(policy.tiers.fast,), k=1, min_agreement=1.0), None)
    ]
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            own = policy.model_copy(
                update={
                    "drafts": (drafts or _default_drafts()).model_copy(
                        update={"backends": list(subset), "k": size, "kinds": {}, "when": ["all"]}
                    )
                }
            )
            spec = panel_models(own, dataset, replay.fast_model)
            if spec is None:  # one draft of the fast tier's model: the single-draft path
                spec = PanelSpec(
                    k=1, min_agreement=1.0, models=(replay.fast_model,), backend=subset[0]
                )
            top = min(_MAX_K, max(size, recorded_drafts(dataset, spec)))
            for k in range(size, top + 1):
                if k == 1 and subset[0] == policy.tiers.fast:
                    continue  # the single draft, already first
                seen: set[int] = set()
                for agreement in sorted(AGREEMENTS, reverse=True) if k > 1 else (1.0,):
                    votes = needed_votes(k, agreement)
                    if votes in seen or (k > 1 and votes * 2 <= k):
                        continue  # the same panel, or a minority could "agree"
                    seen.add(votes)
                    out.append(
                        (
                            Verification(backends=subset, k=k, min_agreement=agreement),
                            dataclasses.replace(spec.with_size(k, agreement), when=("all",)),
                        )
                    )
    return out


def _with_deferral(
    policy: Policy,
    dataset: Dataset,
    replay: Replay,
    single: list[RowRun],
    gate: QualityGate,
    key: Callable[[Outcome, str, EvalRow], AnswerKey],
    ids: set[str],
) -> list[tuple[Verification, list[RowRun]]]:
    """The policy's panel with its deferral model at each threshold (none without one)."""
    drafts = policy.drafts
    if drafts is None or drafts.deferral is None:
        return []
    from tiered_router.evaluation.deferral import deferral_candidates
    from tiered_router.scoring import load_deferral

    model = load_deferral(drafts.deferral.path)
    names = tuple(drafts.backends) or (policy.tiers.fast,)
    return [
        (Verification(backends=names, k=k, min_agreement=a, defer_above=t), runs)
        for k, a, t, runs in deferral_candidates(
            policy, dataset, replay, single, gate=gate, key=key, model=model, ids=ids
        )
    ]


def _default_drafts() -> DraftsConfig:
    from tiered_router.policy._drafts import DraftsConfig

    return DraftsConfig()


def _meets(fig: Figures, target: Target) -> bool:
    if target.quality_retained is not None:
        return fig.retained_low >= target.quality_retained - 1e-12
    if target.max_cost_share is not None:
        return fig.cost_share_high <= target.max_cost_share + 1e-12
    if target.max_cost_per_turn is not None:
        return fig.cost / max(fig.n, 1) <= target.max_cost_per_turn + 1e-15
    assert target.fast_share is not None
    return fig.fast_share >= target.fast_share - 1e-12


def _rank(fig: Figures, target: Target) -> tuple[float, float]:
    if target.quality_retained is not None:
        return (fig.cost, -fig.quality)
    return (-fig.retained_low, fig.cost)


def _thresholds(runs: Sequence[RowRun], points: int = 48) -> list[float]:
    scores = sorted({r.score for r in runs if r.rule is None})
    if not scores:
        return [1.0]
    last = len(scores) - 1
    picks = {scores[min(last, round(i * last / points))] for i in range(points + 1)}
    return sorted({-1.0, *picks, 1.0})


def choose_verification(
    policy: Policy,
    dataset: Dataset,
    target: Target,
    *,
    fast_model: str | None = None,
    frontier_model: str | None = None,
    confidence: float = 0.95,
    holdout: float | None = None,
    scope: str = "kind",
    zones: bool = True,
) -> Choice:
    """Choose threshold, drafters, ``k`` and ``min_agreement`` per kind (the module docs).

    Args:
        policy: The policy (its ``drafts.backends`` are the candidate drafters).
        dataset: Recorded outcomes.
        target: What must hold (for the bound).
        fast_model: Recorded model of the fast tier (default: the data's).
        frontier_model: Recorded model of the frontier tier.
        confidence: Confidence of the one-sided bounds.
        holdout: Share of rows kept out of the choice and reported apart.
        scope: ``kind`` (every kind meets the target) or ``traffic`` (the bound over all
            rows meets it; kinds traded against each other, :mod:`._traffic_scope`).
        zones: Also try each panel with a one-draft zone (``drafts.kinds.<kind>.panel_above``,
            :mod:`._panel_zone`); ``False`` tries the panels on every fast turn only.

    Raises:
        CalibrationError: When no verification and threshold meet the target (the message
            says the best bound reached).
    """
    from tiered_router.evaluation.runner import Replay, run_rows

    if scope not in SCOPES:
        raise ValueError(f"scope: must be one of {', '.join(SCOPES)}, got {scope!r}")
    z = _z(confidence)
    policy = without_zones(policy)  # the zone is chosen here, as k and the drafters are
    replay = Replay.bind(
        single_draft(policy), dataset, fast_model=fast_model, frontier_model=frontier_model
    )
    single = run_rows(replay)
    gate = QualityGate.from_config(policy.gate)
    key = _memo_key()
    calib_ids, held_ids = (
        holdout_split(dataset, holdout) if holdout else ({r.id for r in dataset.rows}, set())
    )
    kinds: dict[str, str] = {}
    for row in dataset.rows:
        kinds[row.id] = turn_kind(row.turn)
    present = [k for k in TURN_KINDS if k in {kinds[i] for i in calib_ids}]
    if not present:
        raise CalibrationError("no calibration rows (the hold-out share takes them all)")
    candidates = _candidates(policy, dataset, replay)
    all_runs: list[tuple[Verification, list[RowRun]]] = []
    for verification, spec in candidates:
        runs = single if spec is None else apply_panel(replay, single, spec, gate=gate, key=key)[0]
        all_runs.append((verification, runs))
    ends = zone_values([r for r in single if r.row_id in calib_ids]) if zones else []
    panels = [v for v, _ in all_runs if v.k > 1]
    all_runs += _with_deferral(policy, dataset, replay, single, gate, key, calib_ids)
    thresholds = _thresholds([r for r in single if r.row_id in calib_ids])
    # per kind and verification: the prefix sums on the calibration rows; a panel with a
    # one-draft zone is summed from the single draft's and the panel's own (not replayed)
    table: dict[str, list[tuple[Verification, _Kind | _Zoned]]] = {}
    for kind in present:
        plain = {
            v: _Kind([r for r in runs if r.row_id in calib_ids and kinds[r.row_id] == kind])
            for v, runs in all_runs
        }
        one = plain[all_runs[0][0]]
        own: list[tuple[Verification, _Kind | _Zoned]] = list(plain.items())
        if kind != "prose":  # prose is written to the section's keys: its zone would be all's
            own += [
                (dataclasses.replace(v, panel_above=e), _Zoned(one, plain[v], e))
                for v in panels
                for e in ends
            ]
        table[kind] = own
    best: tuple[tuple[float, float], float, dict[str, tuple[Verification, Figures]]] | None = None
    closest = 0.0
    for t in thresholds:
        chosen: dict[str, tuple[Verification, Figures]] = {}
        if scope == "traffic":
            found, low = best_combination(
                {k: [(v, s.at(t)) for v, s in table[k]] for k in present},
                lambda q, c, f: _figures(q, c, f, z),
                lambda fig: _meets(fig, target),
                lambda fig: _rank(fig, target),
                lambda fig: fig.retained_low,
            )
            closest = max(closest, low)
            if found is not None and (best is None or found[0] < best[0]):
                combo = {k: (v, _figures(*sums, z)) for k, (v, sums) in found[1].items()}
                best = (found[0], t, combo)
            continue
        for kind in present:
            pick: tuple[tuple[float, float], Verification, Figures] | None = None
            for v, sums in table[kind]:
                fig = _figures(*sums.at(t), z)
                closest = max(closest, fig.retained_low)
                if not _meets(fig, target):
                    continue
                rank = _rank(fig, target)
                if pick is None or rank < pick[0]:
                    pick = (rank, v, fig)
            if pick is None:
                break
            chosen[kind] = (pick[1], pick[2])
        else:
            total = _total(table, chosen, t, z)
            rank = _rank(total, target)
            if best is None or rank < best[0]:
                best = (rank, t, chosen)
    if best is None:
        where = "every kind of turn" if scope == "kind" else "all turns together"
        of = "on one kind" if scope == "kind" else "over all turns"
        raise CalibrationError(
            f"no verification and threshold meet {target.describe()} for the "
            f"{confidence:.0%} bound on {where}; the best lower bound of the quality "
            f"retained {of} was {closest:.1%}"
        )
    _, threshold, chosen = best
    calibration = _total(table, chosen, threshold, z)
    eval_ids = held_ids or calib_ids
    held_fig = None
    if held_ids:
        held_fig = _on_rows(all_runs, chosen, threshold, held_ids, kinds, z)
    base = shares_at_cost(single, dataset, eval_ids, (held_fig or calibration).cost)
    return Choice(
        threshold=threshold,
        kinds=tuple(KindChoice(kind=k, verification=v, figures=f) for k, (v, f) in chosen.items()),
        calibration=calibration,
        holdout=held_fig,
        baselines=base,
        confidence=confidence,
        tried=sum(len(v) for v in table.values()),
        scope=scope,
    )


def _total(
    table: Mapping[str, list[tuple[Verification, _Kind | _Zoned]]],
    chosen: Mapping[str, tuple[Verification, Figures]],
    t: float,
    z: float,
) -> Figures:
    q = c = fast = _Sums()
    for kind, (v, _) in chosen.items():
        sums = next(s for w, s in table[kind] if w == v)
        qk, ck, fk = sums.at(t)
        q, c, fast = q + qk, c + ck, fast + fk
    return _figures(q, c, fast, z)


def _on_rows(
    all_runs: Sequence[tuple[Verification, list[RowRun]]],
    chosen: Mapping[str, tuple[Verification, Figures]],
    t: float,
    ids: set[str],
    kinds: Mapping[str, str],
    z: float,
) -> Figures:
    """The chosen verification's totals on other rows (the hold-out)."""
    runs_of = dict((v, runs) for v, runs in all_runs)
    single = all_runs[0][1]
    q = c = fast = _Sums()
    for kind in {kinds[i] for i in ids}:
        v = chosen[kind][0] if kind in chosen else all_runs[0][0]
        runs = runs_of.get(v)
        if runs is None and v.panel_above:  # a zoned panel: replayed here, for its rows only
            base = runs_of.get(dataclasses.replace(v, panel_above=None), single)
            runs = zoned(single, base, v.panel_above)
        rows = [r for r in runs or single if r.row_id in ids and kinds[r.row_id] == kind]
        qk, ck, fk = _Kind(rows).at(t)
        q, c, fast = q + qk, c + ck, fast + fk
    return _figures(q, c, fast, z)
