"""Training of the version-2 learned scorer: L-BFGS logistic regression in plain Python.

Each head (for the ``gain`` target: P(frontier right) and P(fast right)) is fitted per
block (``choice`` / ``open``) on that block's rows. Dense features are standardised on the
training rows (a constant column gets weight 0), the objective is the mean log-loss plus
``l2 / 2 * |w|^2`` (bias not regularised), minimised by L-BFGS (10 pairs, backtracking
Armijo line search) from zero weights; the weights are then mapped back to the raw
activations, so the file holds weights that multiply activations directly.

Deterministic: the same rows in the same order give the same weights (no random start,
fixed summation order). Column-major lists keep one gradient evaluation over ~13,000
rows and ~50 features to a few tens of milliseconds.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered_router.scoring.features import focus_text
from tiered_router.scoring.learned._features import BLOCKS, V2_FEATURES, hashed_words, v2_features
from tiered_router.scoring.learned._model import TARGETS, Head, LearnedModel
from tiered_router.turn import Turn

__all__ = ["RouteLLMExample", "fit_model", "load_routellm_examples", "minimise"]

STRONG_MODEL = "gpt-4-1106-preview"
"""RouteLLM's strong model (the frontier tier of the shipped weights)."""
WEAK_MODEL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
"""RouteLLM's weak model (the fast tier of the shipped weights)."""

_MIN_ROWS = 10


def _log1pexp(z: float) -> float:
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def minimise(
    f_and_grad: Callable[[list[float]], tuple[float, list[float]]],
    x0: Sequence[float],
    *,
    max_iter: int = 300,
    memory: int = 10,
    tol: float = 1e-6,
) -> list[float]:
    """Minimise a smooth function with L-BFGS (two-loop recursion, Armijo backtracking).

    Args:
        f_and_grad: Returns the value and the gradient at a point.
        x0: Starting point.
        max_iter: Iteration cap.
        memory: Number of correction pairs kept.
        tol: Stop when the largest gradient component is below this.

    Returns:
        The minimiser found.
    """
    x = list(x0)
    fx, g = f_and_grad(x)
    pairs: list[tuple[list[float], list[float], float]] = []
    for iteration in range(max_iter):
        if max((abs(v) for v in g), default=0.0) < tol:
            break
        # two-loop recursion: d = -H g
        q = list(g)
        alphas = []
        for s, y, rho in reversed(pairs):
            a = rho * sum(si * qi for si, qi in zip(s, q, strict=True))
            alphas.append(a)
            q = [qi - a * yi for qi, yi in zip(q, y, strict=True)]
        if pairs:
            s, y, _ = pairs[-1]
            gamma = sum(si * yi for si, yi in zip(s, y, strict=True)) / sum(yi * yi for yi in y)
        else:
            gamma = 1.0 / max(1.0, math.sqrt(sum(v * v for v in g)))
        r = [gamma * qi for qi in q]
        for (s, y, rho), a in zip(pairs, reversed(alphas), strict=True):
            b = rho * sum(yi * ri for yi, ri in zip(y, r, strict=True))
            r = [ri + (a - b) * si for ri, si in zip(r, s, strict=True)]
        d = [-ri for ri in r]
        slope = sum(gi * di for gi, di in zip(g, d, strict=True))
        if slope >= 0:  # not a descent direction: restart from steepest descent
            pairs.clear()
            d = [-gi for gi in g]
            slope = -sum(gi * gi for gi in g)
        step = 1.0
        while True:
            x_new = [xi + step * di for xi, di in zip(x, d, strict=True)]
            f_new, g_new = f_and_grad(x_new)
            if f_new <= fx + 1e-4 * step * slope or step < 1e-10:
                break
            step *= 0.5
        s = [a - b for a, b in zip(x_new, x, strict=True)]
        y = [a - b for a, b in zip(g_new, g, strict=True)]
        sy = sum(si * yi for si, yi in zip(s, y, strict=True))
        if sy > 1e-12:
            pairs.append((s, y, 1.0 / sy))
            if len(pairs) > memory:
                pairs.pop(0)
        converged = abs(fx - f_new) <= 1e-12 * max(1.0, abs(fx))
        x, fx, g = x_new, f_new, g_new
        if converged and iteration > 0:
            break
    return x


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockData:
    columns: list[list[float]]
    sparse: list[tuple[tuple[int, ...], tuple[float, ...]]]
    means: list[float]
    scales: list[float]


def _standardise(
    rows: Sequence[Sequence[float]],
) -> tuple[list[list[float]], list[float], list[float]]:
    n = len(rows)
    columns: list[list[float]] = []
    means: list[float] = []
    scales: list[float] = []
    for j in range(len(rows[0])):
        col = [r[j] for r in rows]
        mean = math.fsum(col) / n
        var = math.fsum((v - mean) ** 2 for v in col) / n
        scale = math.sqrt(var)
        if scale < 1e-9:
            columns.append([])  # constant on these rows: no weight
            scale = 0.0
        else:
            columns.append([(v - mean) / scale for v in col])
        means.append(mean)
        scales.append(scale)
    return columns, means, scales


def _fit_head(data: _BlockData, labels: Sequence[float], *, l2: float, buckets: int) -> Head:
    n = len(labels)
    k = len(data.columns)
    live = [j for j in range(k) if data.columns[j]]

    def f_and_grad(theta: list[float]) -> tuple[float, list[float]]:
        b = theta[0]
        w = theta[1 : 1 + k]
        h = theta[1 + k :]
        z = [b] * n
        for j in live:
            c = w[j]
            if c:
                z = [zi + c * x for zi, x in zip(z, data.columns[j], strict=True)]
        if buckets:
            for i, (idx, val) in enumerate(data.sparse):
                z[i] += sum(h[t] * v for t, v in zip(idx, val, strict=True))
        loss = math.fsum(_log1pexp(zi) - yi * zi for zi, yi in zip(z, labels, strict=True)) / n
        err = [(_sigmoid(zi) - yi) / n for zi, yi in zip(z, labels, strict=True)]
        grad = [0.0] * len(theta)
        grad[0] = math.fsum(err)
        for j in live:
            grad[1 + j] = sum(e * x for e, x in zip(err, data.columns[j], strict=True)) + l2 * w[j]
        if buckets:
            gh = [l2 * v for v in h]
            for e, (idx, val) in zip(err, data.sparse, strict=True):
                for t, v in zip(idx, val, strict=True):
                    gh[t] += e * v
            grad[1 + k :] = gh
        penalty = math.fsum(w[j] * w[j] for j in live) + math.fsum(v * v for v in h)
        return loss + 0.5 * l2 * penalty, grad

    theta = minimise(f_and_grad, [0.0] * (1 + k + buckets))
    bias = theta[0]
    weights: dict[str, float] = {}
    for j, name in enumerate(V2_FEATURES):
        if data.scales[j] == 0.0:
            continue
        weight = theta[1 + j] / data.scales[j]
        bias -= weight * data.means[j]
        weights[name] = weight
    return Head(bias=bias, weights=weights, hash_weights=tuple(theta[1 + k :]))


_HEAD_LABELS: Mapping[str, Mapping[str, Callable[[float, float], float]]] = {
    "gain": {"strong": lambda s, w: s, "weak": lambda s, w: w},
    "weak_wrong": {"frontier": lambda s, w: 1.0 - w},
    "strong_only": {"frontier": lambda s, w: s * (1.0 - w)},
}


def fit_model(
    turns: Sequence[Turn],
    *,
    strong: Sequence[float],
    weak: Sequence[float],
    target: str = "gain",
    l2: float = 0.01,
    hash_buckets: int = 0,
    word_pairs: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> LearnedModel:
    """Train a version-2 learned model from recorded outcomes of two models.

    Args:
        turns: Training turns.
        strong: Quality of the frontier model's answer per turn, in [0, 1].
        weak: Quality of the fast model's answer per turn, in [0, 1].
        target: ``gain`` (two heads, P(frontier right) and P(fast right); the score is
            ``(P_frontier - P_fast + 1) / 2``, the expected gain of sending the turn to the
            frontier tier), ``weak_wrong`` (one head: P(fast wrong)) or ``strong_only``
            (one head: P(frontier right and fast wrong)).
        l2: L2 strength on the standardised features (>= 0).
        hash_buckets: Hashed-word buckets of the focus message (0 turns them off).
        word_pairs: Also hash neighbouring word pairs.
        meta: Extra free-form information stored with the weights.

    Returns:
        The trained model.

    Raises:
        ValueError: On a length mismatch, a label outside [0, 1], an unknown target, a
            bad hyper-parameter, or when no block has enough rows (10).
    """
    n = len(turns)
    if len(strong) != n or len(weak) != n:
        raise ValueError(f"fit_model: {n} turns but {len(strong)} / {len(weak)} labels")
    if target not in TARGETS:
        raise ValueError(f"fit_model: unknown target {target!r}; known: {', '.join(TARGETS)}")
    if any(not 0.0 <= float(v) <= 1.0 for v in (*strong, *weak)):
        raise ValueError("fit_model: every label must be a number in [0, 1]")
    if l2 < 0 or hash_buckets < 0:
        raise ValueError("fit_model: l2 and hash_buckets must be >= 0")
    vectors = [v2_features(t) for t in turns]
    hashed = (
        [hashed_words(focus_text(t), hash_buckets, word_pairs) for t in turns]
        if hash_buckets
        else []
    )
    heads: dict[str, dict[str, Head]] = {name: {} for name in _HEAD_LABELS[target]}
    counts: dict[str, int] = {}
    for block_index, block in enumerate(BLOCKS):
        members = [i for i, v in enumerate(vectors) if v.block == block_index]
        counts[block] = len(members)
        if len(members) < _MIN_ROWS:
            continue
        columns, means, scales = _standardise([vectors[i].activations for i in members])
        sparse = []
        for i in members:
            pairs = hashed[i] if hash_buckets else ()
            sparse.append((tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)))
        data = _BlockData(columns=columns, sparse=sparse, means=means, scales=scales)
        for head, label_of in _HEAD_LABELS[target].items():
            labels = [label_of(float(strong[i]), float(weak[i])) for i in members]
            if min(labels) == max(labels):
                # one outcome only: the features cannot tell anything; a smoothed rate
                rate = (math.fsum(labels) + 0.5) / (len(labels) + 1)
                heads[head][block] = Head(
                    bias=math.log(rate / (1.0 - rate)),
                    weights={},
                    hash_weights=(0.0,) * hash_buckets,
                )
            else:
                heads[head][block] = _fit_head(data, labels, l2=l2, buckets=hash_buckets)
    if not all(heads.values()):
        raise ValueError(f"fit_model: no block has {_MIN_ROWS}+ rows (rows per block: {counts})")
    info: dict[str, Any] = {"examples": n, "rows_per_block": counts, "l2": l2}
    info.update(meta or {})
    return LearnedModel(
        target=target,
        heads=heads,
        hash_buckets=hash_buckets,
        word_pairs=word_pairs,
        meta=info,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteLLMExample:
    """One decontaminated RouteLLM row with both models' outcomes.

    Attributes:
        id: Row id (``mmlu.<subject>.<n>`` or ``gsm8k.<n>``).
        benchmark: ``mmlu`` or ``gsm8k``.
        group: The MMLU subject, or ``gsm8k``.
        turn: The prompt as a one-message turn.
        strong: 1.0 when the strong model answered right.
        weak: 1.0 when the weak model answered right.
    """

    id: str
    benchmark: str
    group: str
    turn: Turn
    strong: float
    weak: float


def load_routellm_examples(
    data_dir: str | os.PathLike[str],
    *,
    benchmarks: Sequence[str] = ("mmlu", "gsm8k"),
    strong_model: str = STRONG_MODEL,
    weak_model: str = WEAK_MODEL,
) -> list[RouteLLMExample]:
    """Read RouteLLM's recorded outcomes, leaving out rows flagged contaminated.

    Args:
        data_dir: The shared data folder (holding ``routellm_evals/``) or that folder.
        benchmarks: Which files (``<name>.jsonl``) to read.
        strong_model: Model id of the strong (frontier) model in ``correct``.
        weak_model: Model id of the weak (fast) model in ``correct``.

    Returns:
        The rows, in file order.

    Raises:
        ValueError: When a file is missing or a row lacks a model's outcome.
    """
    base = Path(data_dir)
    if (base / "routellm_evals").is_dir():
        base = base / "routellm_evals"
    out: list[RouteLLMExample] = []
    for name in benchmarks:
        path = base / f"{name}.jsonl"
        if not path.is_file():
            raise ValueError(f"{path}: not found (expected RouteLLM's {name}.jsonl)")
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("contaminated"):
                    continue
                correct = rec.get("correct", {})
                if strong_model not in correct or weak_model not in correct:
                    raise ValueError(
                        f"{path}:{number}: no outcome for {strong_model!r} and {weak_model!r}"
                    )
                out.append(
                    RouteLLMExample(
                        id=str(rec["id"]),
                        benchmark=name,
                        group=str(rec.get("subject") or name),
                        turn=Turn([{"role": "user", "content": str(rec["prompt"])}]),
                        strong=1.0 if correct[strong_model] else 0.0,
                        weak=1.0 if correct[weak_model] else 0.0,
                    )
                )
    return out
