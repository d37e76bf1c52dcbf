"""Fit the learned scorer on your own recorded traffic, and check it by cross-validation.

A scorer trained on other traffic carries what separated hard requests *there*: held out by
source over the shared data, no scorer beats prompt length by much (``docs/scoring.md``).
Fitted on a deployment's own labelled turns, the learned scorer does better on that
traffic. :func:`fit_scorer` measures this before you switch: it scores every row with a
model fitted on the other folds (rows of one agent task stay in one fold), compares the
out-of-fold APGR with prompt length, random and any scorer you pass (your current one), with
bootstrap intervals, and then fits the model you keep on every row.

```python
from tiered_router.evaluation import load_data
from tiered_router.evaluation.scorer_fit import fit_scorer

report = fit_scorer(load_data("my_traffic.jsonl"))
print(report.apgr["fitted"], report.apgr["prompt length"], report.verdict)
report.model.save("scorer.json")     # scoring: {type: learned, options: {path: scorer.json}}
```

``tiered-router fit-scorer`` is the command-line face of this module.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_router.evaluation.dataset import Dataset, DatasetError
from tiered_router.evaluation.metrics import apgr, threshold_curve

if TYPE_CHECKING:
    from tiered_router.scoring import Scorer
    from tiered_router.scoring.learned import LearnedModel
    from tiered_router.turn import Turn

__all__ = ["MIN_ROWS", "ScorerFitReport", "cross_validated_scores", "fit_scorer", "fold_of"]

MIN_ROWS = 50
"""The fewest rows with both tiers' outcomes that :func:`fit_scorer` fits on."""

_FEW_ROWS = 300


@dataclass(frozen=True)
class ScorerFitReport:
    """What :func:`fit_scorer` measured, and the model fitted on every row.

    Attributes:
        dataset: The data's name.
        fast_model: The fast tier's model in the data.
        frontier_model: The frontier tier's model in the data.
        rows: Rows used (both tiers' outcomes recorded).
        skipped: Rows of ``dataset`` left out here because one tier's outcome is missing
            (rows a loader already left out are counted in its notes, kept in ``notes``).
        folds: Cross-validation folds.
        q_fast: Mean label of the fast model on the rows.
        q_frontier: Mean label of the frontier model on the rows.
        apgr: Out-of-fold APGR per router: ``fitted``, ``prompt length``, ``random`` (its expected
            APGR, 0.5) and every scorer passed in ``compare``. ``nan`` when the frontier model
            is not better than the fast one on these rows.
        intervals: 95 % bootstrap interval of each APGR but ``random``.
        differences: ``fitted`` minus each other router (but ``random``): the difference of
            APGR and its paired 95 % bootstrap interval, as ``(difference, low, high)``.
        model: The learned model fitted on every row (save it with ``model.save(path)``).
        notes: The dataset's own notes, then caveats (few rows, an undefined APGR, ...).
    """

    dataset: str
    fast_model: str
    frontier_model: str
    rows: int
    skipped: int
    folds: int
    q_fast: float
    q_frontier: float
    apgr: Mapping[str, float]
    intervals: Mapping[str, tuple[float, float]]
    differences: Mapping[str, tuple[float, float, float]]
    model: LearnedModel = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def beats(self) -> tuple[str, ...]:
        """The routers the fitted scorer beats on this data.

        ``random`` when the fitted scorer's interval lies above random's APGR; every other
        router when the paired interval of the difference lies above 0.
        """
        out = []
        low = self.intervals["fitted"][0]
        if not math.isnan(low) and low > self.apgr["random"]:
            out.append("random")
        out.extend(name for name, (_, lo, _hi) in self.differences.items() if lo > 0.0)
        return tuple(out)

    @property
    def verdict(self) -> str:
        """One sentence: whether the fitted scorer is worth switching to on this data."""
        if math.isnan(self.apgr["fitted"]):
            return (
                f"the frontier model ({self.frontier_model}) is not better than the fast one "
                f"({self.fast_model}) on these rows: no scorer gains by sending turns to it"
            )
        lost = [name for name in ("random", *self.differences) if name not in self.beats]
        if lost:
            return (
                "the fitted scorer is not clearly better than " + ", ".join(lost) + " on this "
                "data (95 % interval): keep your current scorer, or label more turns"
            )
        return (
            "the fitted scorer beats " + ", ".join(("random", *self.differences)) + " on this "
            "data: switch to it, then calibrate its threshold"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the model itself is left out: save it apart)."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 4)

        return {
            "dataset": self.dataset,
            "fast_model": self.fast_model,
            "frontier_model": self.frontier_model,
            "rows": self.rows,
            "skipped": self.skipped,
            "folds": self.folds,
            "q_fast": num(self.q_fast),
            "q_frontier": num(self.q_frontier),
            "apgr": {k: num(v) for k, v in self.apgr.items()},
            "intervals": {k: [num(lo), num(hi)] for k, (lo, hi) in self.intervals.items()},
            "differences": {
                k: {"difference": num(d), "low": num(lo), "high": num(hi)}
                for k, (d, lo, hi) in self.differences.items()
            },
            "beats": list(self.beats),
            "verdict": self.verdict,
            "notes": list(self.notes),
        }


def fold_of(rows_groups: Sequence[str], *, folds: int, seed: int) -> list[int]:
    """Deal rows into ``folds`` folds, keeping rows of one group (an agent task) together.

    Groups are shuffled with ``random.Random(seed)`` and dealt round-robin, so the folds
    differ in size by at most one group.

    Args:
        rows_groups: Each row's group (its task id, or its own id when it has no task).
        folds: Number of folds (>= 2).
        seed: Shuffle seed.

    Returns:
        Each row's fold index.

    Raises:
        ValueError: When ``folds`` < 2 or there are fewer groups than folds.
    """
    if folds < 2:
        raise ValueError(f"folds: must be >= 2, got {folds}")
    groups = list(dict.fromkeys(rows_groups))
    if len(groups) < folds:
        raise ValueError(f"folds: {folds} folds need at least {folds} tasks, got {len(groups)}")
    random.Random(seed).shuffle(groups)
    index = {g: i % folds for i, g in enumerate(groups)}
    return [index[g] for g in rows_groups]


def cross_validated_scores(
    turns: Sequence[Turn],
    *,
    strong: Sequence[float],
    weak: Sequence[float],
    fold: Sequence[int],
    train_rows: int | None = None,
    seed: int = 0,
    l2: float = 0.01,
    hash_buckets: int = 0,
) -> list[float]:
    """Score every turn with a learned model fitted on the other folds.

    Args:
        turns: The turns.
        strong: The frontier model's label per turn, in [0, 1].
        weak: The fast model's label per turn, in [0, 1].
        fold: Each turn's fold (:func:`fold_of`).
        train_rows: Fit each fold's model on at most this many of the other folds' rows
            (a random subset, seeded): for learning curves.
        seed: Seed of that subset.
        l2: L2 strength of :func:`~tiered_router.scoring.learned.fit_model`.
        hash_buckets: Hashed-word buckets of ``fit_model`` (0: none).

    Returns:
        The out-of-fold score of each turn.

    Raises:
        ValueError: As :func:`~tiered_router.scoring.learned.fit_model` does.
    """
    from tiered_router.scoring.learned import LearnedScorer
    from tiered_router.scoring.learned._train import fit_model

    n = len(turns)
    out = [0.0] * n
    rng = random.Random(seed)
    for k in sorted(set(fold)):
        train = [i for i in range(n) if fold[i] != k]
        if train_rows is not None and len(train) > train_rows:
            train = sorted(rng.sample(train, train_rows))
        model = fit_model(
            [turns[i] for i in train],
            strong=[strong[i] for i in train],
            weak=[weak[i] for i in train],
            l2=l2,
            hash_buckets=hash_buckets,
        )
        scorer = LearnedScorer(model, max_reasons=0)
        for i in range(n):
            if fold[i] == k:
                out[i] = scorer.score(turns[i]).value
    return out


def _apgr(scores: Sequence[float], weak: Sequence[float], strong: Sequence[float]) -> float:
    q_w, q_s = sum(weak) / len(weak), sum(strong) / len(strong)
    if q_s <= q_w:
        return math.nan
    return apgr(threshold_curve(scores, weak, strong), q_weak=q_w, q_strong=q_s)


def _resampled(
    scores: Sequence[float],
    weak: Sequence[float],
    strong: Sequence[float],
    samples: Sequence[Sequence[int]],
) -> list[float]:
    """APGR on each bootstrap resample (lists of row indices)."""
    return [
        _apgr([scores[i] for i in s], [weak[i] for i in s], [strong[i] for i in s]) for s in samples
    ]


def _interval(values: Sequence[float]) -> tuple[float, float]:
    got = sorted(v for v in values if not math.isnan(v))
    if not got:
        return math.nan, math.nan
    return got[int(0.025 * (len(got) - 1))], got[int(0.975 * (len(got) - 1))]


def fit_scorer(
    dataset: Dataset,
    *,
    compare: Mapping[str, Scorer] | None = None,
    folds: int = 5,
    seed: int = 0,
    bootstrap: int = 200,
    l2: float = 0.01,
    hash_buckets: int = 0,
) -> ScorerFitReport:
    """Cross-validate the learned scorer on recorded traffic, then fit it on every row.

    Uses the rows with both tiers' outcomes (``dataset.fast_model`` and
    ``dataset.frontier_model``; pick others with :meth:`Dataset.with_pair`). Each row is
    scored by a model fitted on the other folds (:func:`cross_validated_scores`; the rows of
    one ``metadata.task_id`` stay in one fold); the out-of-fold scores give the APGR of a
    score-threshold router, compared on the same rows with prompt length, random and each
    scorer in ``compare`` (scored as they are, not refitted). Intervals are percentile
    bootstraps over rows (``bootstrap`` resamples, seeded); the differences are paired.

    Args:
        dataset: Recorded outcomes of the two tiers (``tiered-router dataset from-traces``).
        compare: Other scorers to compare with, by name (e.g. the policy's current one).
        folds: Cross-validation folds (>= 2).
        seed: Seed of the folds and the bootstrap.
        bootstrap: Bootstrap resamples (0: no intervals).
        l2: L2 strength of the fit.
        hash_buckets: Hashed-word buckets of the fit (0: none, the shipped setting).

    Returns:
        The report, with the model fitted on every row.

    Raises:
        DatasetError: When the data names no model pair, or has fewer than
            :data:`MIN_ROWS` rows with both outcomes, or fewer tasks than folds.
        ValueError: On a bad ``folds``, ``bootstrap`` or fit setting.
    """
    from tiered_router.scoring.learned._train import fit_model

    fast, frontier = dataset.fast_model, dataset.frontier_model
    if not fast or not frontier:
        raise DatasetError(
            f"{dataset.name}: the data names no fast and frontier model; "
            "pick them (--fast-model / --frontier-model, or Dataset.with_pair)"
        )
    if bootstrap < 0:
        raise ValueError(f"bootstrap: must be >= 0, got {bootstrap}")
    clash = {"fitted", "prompt length", "random"} & set(compare or {})
    if clash:
        raise ValueError(f"compare: {min(clash)!r} is a name the report uses itself")
    paired = dataset.with_pair(fast, frontier)
    rows = paired.rows
    skipped = len(dataset.rows) - len(rows)
    if len(rows) < MIN_ROWS:
        raise DatasetError(
            f"{dataset.name}: {len(rows)} rows have outcomes of both {fast} and {frontier}; "
            f"fitting a scorer needs at least {MIN_ROWS} (label both tiers on more turns: "
            "shadow mode, docs/calibration.md)"
        )
    turns = [r.turn for r in rows]
    strong = [float(r.outcomes[frontier].quality) for r in rows]
    weak = [float(r.outcomes[fast].quality) for r in rows]
    try:
        fold = fold_of([r.task_id or f"row:{r.id}" for r in rows], folds=folds, seed=seed)
    except ValueError as exc:
        raise DatasetError(f"{dataset.name}: {exc}") from exc
    fit_kw: dict[str, Any] = {"l2": l2, "hash_buckets": hash_buckets}
    routers: dict[str, list[float]] = {
        "fitted": cross_validated_scores(
            turns, strong=strong, weak=weak, fold=fold, seed=seed, **fit_kw
        ),
        "prompt length": [float(t.prompt_chars) for t in turns],
    }
    for name, scorer in (compare or {}).items():
        routers[name] = [scorer.score(t).value for t in turns]
    n = len(rows)
    values = {name: _apgr(s, weak, strong) for name, s in routers.items()}
    rng = random.Random(seed)
    samples = [[rng.randrange(n) for _ in range(n)] for _ in range(bootstrap)]
    boots = {name: _resampled(s, weak, strong, samples) for name, s in routers.items()}
    intervals = {name: _interval(b) for name, b in boots.items()}
    differences = {}
    for name in routers:
        if name == "fitted":
            continue
        diffs = [a - b for a, b in zip(boots["fitted"], boots[name], strict=True)]
        low, high = _interval(diffs)
        differences[name] = (values["fitted"] - values[name], low, high)
    # a random router's expected curve is the line from all-fast to all-frontier: APGR 0.5
    values["random"] = math.nan if math.isnan(values["fitted"]) else 0.5
    notes = list(dataset.notes)
    if skipped:
        notes.append(f"{skipped} rows without outcomes of both models were left out")
    if n < _FEW_ROWS:
        notes.append(
            f"only {n} rows: the intervals are wide; a few hundred labelled turns or more "
            "give a steadier fit"
        )
    if math.isnan(values["fitted"]):
        notes.append("APGR is undefined: the frontier model is not better on these rows")
    model = fit_model(
        turns,
        strong=strong,
        weak=weak,
        meta={"data": dataset.name, "fast_model": fast, "frontier_model": frontier, "rows": n},
        **fit_kw,
    )
    return ScorerFitReport(
        dataset=dataset.name,
        fast_model=fast,
        frontier_model=frontier,
        rows=n,
        skipped=skipped,
        folds=folds,
        q_fast=math.fsum(weak) / n,
        q_frontier=math.fsum(strong) / n,
        apgr=values,
        intervals=intervals,
        differences=differences,
        model=model,
        notes=tuple(notes),
    )
