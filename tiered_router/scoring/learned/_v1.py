"""Version 1 of the learned scorer's weights: one logistic head over the heuristic features.

The feature vector is the heuristic scorer's (:data:`FEATURE_ORDER`, activations in
[0, 1]), optionally extended with a hashed bag of words of the focus message. Weights are
trained from labelled turns by :func:`fit` (plain Python: full-batch gradient descent on
the log-loss with L2) and stored as JSON (format in :mod:`tiered_router.scoring.learned`).
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tiered_router.scoring._base import Score
from tiered_router.scoring.features import (
    FEATURE_ORDER,
    extract,
    focus_text,
    normalised_words,
    sigmoid,
)
from tiered_router.scoring.heuristic import FEATURE_NAMES, explain
from tiered_router.scoring.learned._model import FORMAT
from tiered_router.turn import Turn

__all__ = ["CompiledV1", "LearnedWeights", "fit"]

_VERSION = 1
_MAX_BUCKETS = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedWeights:
    """Version-1 weights of a :class:`LearnedScorer` (file format in the package docstring).

    Attributes:
        bias: Log-odds of a turn whose features are all zero.
        weights: Weight of each feature, by name (every name in ``FEATURE_NAMES``).
        hash_buckets: Number of hashed-word buckets; 0 disables them.
        hash_weights: One weight per bucket (``hash_buckets`` numbers).
        meta: Free-form training information.
    """

    bias: float
    weights: Mapping[str, float]
    hash_buckets: int = 0
    hash_weights: tuple[float, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.weights) - FEATURE_NAMES
        if unknown:
            raise ValueError(
                f"learned weights: unknown feature(s) {sorted(unknown)}; "
                f"known: {', '.join(sorted(FEATURE_NAMES))}"
            )
        full = {name: float(self.weights.get(name, 0.0)) for name in FEATURE_ORDER}
        values = [self.bias, *full.values(), *self.hash_weights]
        if not all(math.isfinite(v) for v in values):
            raise ValueError("learned weights: every weight must be a finite number")
        if not 0 <= self.hash_buckets <= _MAX_BUCKETS:
            raise ValueError(
                f"learned weights: hash_buckets must be in [0, {_MAX_BUCKETS}], "
                f"got {self.hash_buckets}"
            )
        if len(self.hash_weights) != self.hash_buckets:
            raise ValueError(
                f"learned weights: {self.hash_buckets} hash buckets but "
                f"{len(self.hash_weights)} hash weights"
            )
        object.__setattr__(self, "weights", MappingProxyType(full))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready mapping (the file format of the module docstring)."""
        data: dict[str, Any] = {
            "format": FORMAT,
            "version": _VERSION,
            "bias": self.bias,
            "weights": dict(self.weights),
        }
        if self.hash_buckets:
            data["hashing"] = {"buckets": self.hash_buckets, "weights": list(self.hash_weights)}
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the weights as JSON to ``path`` (UTF-8, sorted keys).

        Args:
            path: Destination file.
        """
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<weights>") -> LearnedWeights:
        """Validate a mapping in the file format and build the weights.

        Args:
            data: The decoded JSON.
            source: Where it came from, for error messages.

        Raises:
            ValueError: When the mapping is not a valid version-1 weights document.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: learned scorer weights must be a JSON object")
        if data.get("format") != FORMAT:
            raise ValueError(f"{source}: 'format' must be {FORMAT!r}, got {data.get('format')!r}")
        if data.get("version") != _VERSION:
            raise ValueError(f"{source}: 'version' must be {_VERSION}, got {data.get('version')!r}")
        unknown = set(data) - {"format", "version", "bias", "weights", "hashing", "meta"}
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {sorted(unknown)}")
        weights = data.get("weights", {})
        if not isinstance(weights, Mapping) or not all(_is_number(v) for v in weights.values()):
            raise ValueError(f"{source}: 'weights' must map feature names to numbers")
        bias = data.get("bias", 0.0)
        if not _is_number(bias):
            raise ValueError(f"{source}: 'bias' must be a number, got {bias!r}")
        buckets = 0
        hash_weights: tuple[float, ...] = ()
        hashing = data.get("hashing")
        if hashing is not None:
            if not isinstance(hashing, Mapping) or set(hashing) != {"buckets", "weights"}:
                raise ValueError(
                    f"{source}: 'hashing' must be {{'buckets': int, 'weights': [...]}}"
                )
            buckets = hashing["buckets"]
            values = hashing["weights"]
            if not isinstance(buckets, int) or isinstance(buckets, bool):
                raise ValueError(f"{source}: 'hashing.buckets' must be an integer")
            if not isinstance(values, list) or not all(_is_number(v) for v in values):
                raise ValueError(f"{source}: 'hashing.weights' must be a list of numbers")
            hash_weights = tuple(float(v) for v in values)
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ValueError(f"{source}: 'meta' must be an object")
        try:
            return cls(
                bias=float(bias),
                weights={str(k): float(v) for k, v in weights.items()},
                hash_buckets=buckets,
                hash_weights=hash_weights,
                meta=meta,
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from exc

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> LearnedWeights:
        """Read weights from a JSON file.

        Args:
            path: The weights file.

        Raises:
            ValueError: When the file cannot be read, is not JSON, or is not valid weights.
        """
        source = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ValueError(f"{source}: cannot read learned scorer weights: {reason}") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{source}:{exc.lineno}: learned scorer weights are not valid JSON: {exc.msg}"
            ) from exc
        return cls.from_dict(data, source=source)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _hashed(turn: Turn, buckets: int) -> dict[int, float]:
    words = normalised_words(focus_text(turn))
    if not words:
        return {}
    value = 1.0 / math.sqrt(len(words))
    out: dict[int, float] = {}
    for word in sorted(words):  # sorted: set order varies with the hash seed, sums must not
        bucket = zlib.crc32(word) % buckets
        out[bucket] = out.get(bucket, 0.0) + value
    return out


class CompiledV1:
    """Version-1 weights laid out for scoring (see :class:`LearnedScorer`).

    Args:
        weights: The weights.
        max_reasons: How many reasons a score carries.
    """

    __slots__ = ("_bias", "_buckets", "_hash", "_max_reasons", "_weights")

    def __init__(self, weights: LearnedWeights, *, max_reasons: int) -> None:
        self._weights = tuple(weights.weights[name] for name in FEATURE_ORDER)
        self._bias = weights.bias
        self._buckets = weights.hash_buckets
        self._hash = weights.hash_weights
        self._max_reasons = max_reasons

    def score(self, turn: Turn) -> Score:
        """Score one turn: the heuristic features (+ hashed words), trained weights."""
        vector = extract(turn)
        logits = tuple(w * a for w, a in zip(self._weights, vector.activations, strict=True))
        extra: tuple[tuple[str, float, str], ...] = ()
        if self._buckets:
            hashed = _hashed(turn, self._buckets)
            push = math.fsum(self._hash[b] * v for b, v in hashed.items())
            extra = (("words", push, "wording of the request"),)
        return explain(vector, logits, self._bias, max_reasons=self._max_reasons, extra=extra)


def fit(
    turns: Sequence[Turn],
    labels: Sequence[float],
    *,
    epochs: int = 300,
    learning_rate: float = 0.5,
    l2: float = 1e-3,
    hash_buckets: int = 0,
    meta: Mapping[str, Any] | None = None,
) -> LearnedWeights:
    """Train logistic-regression weights on labelled turns (pure Python, deterministic).

    Full-batch gradient descent on the mean log-loss plus ``l2 / 2 * |w|^2`` (the bias is
    not regularised), starting from zero weights.

    Args:
        turns: Training turns.
        labels: One label per turn in [0, 1]: 1 when the turn needs the frontier tier
            (for example "fast model wrong, frontier right"), 0 when the fast tier does.
        epochs: Gradient steps over the whole set.
        learning_rate: Step size.
        l2: L2 regularisation strength (>= 0).
        hash_buckets: Hashed bag-of-words buckets of the focus message; 0 turns them off.
        meta: Extra free-form information stored with the weights.

    Returns:
        The trained weights (``.save(path)`` writes them).

    Raises:
        ValueError: On empty input, a length mismatch, a label outside [0, 1] or a bad
            hyper-parameter.
    """
    if len(turns) != len(labels):
        raise ValueError(f"fit: {len(turns)} turns but {len(labels)} labels")
    if not turns:
        raise ValueError("fit: at least one labelled turn is required")
    if any(not _is_number(y) or not 0.0 <= y <= 1.0 for y in labels):
        raise ValueError("fit: every label must be a number in [0, 1]")
    if epochs < 1 or learning_rate <= 0 or l2 < 0:
        raise ValueError("fit: epochs must be >= 1, learning_rate > 0 and l2 >= 0")
    if not 0 <= hash_buckets <= _MAX_BUCKETS:
        raise ValueError(f"fit: hash_buckets must be in [0, {_MAX_BUCKETS}]")

    dense = [extract(t).activations for t in turns]
    sparse = [_hashed(t, hash_buckets) for t in turns] if hash_buckets else []
    n = len(turns)
    k = len(FEATURE_ORDER)
    w = [0.0] * k
    h = [0.0] * hash_buckets
    b = 0.0
    for _ in range(epochs):
        grad_w = [0.0] * k
        grad_h: dict[int, float] = {}
        grad_b = 0.0
        for i in range(n):
            x = dense[i]
            z = b + sum(wj * xj for wj, xj in zip(w, x, strict=True))
            if hash_buckets:
                z += sum(h[j] * v for j, v in sparse[i].items())
            err = sigmoid(z) - float(labels[i])
            grad_b += err
            for j in range(k):
                grad_w[j] += err * x[j]
            if hash_buckets:
                for j, v in sparse[i].items():
                    grad_h[j] = grad_h.get(j, 0.0) + err * v
        step = learning_rate / n
        b -= step * grad_b
        for j in range(k):
            w[j] -= step * grad_w[j] + learning_rate * l2 * w[j]
        if hash_buckets:
            decay = 1.0 - learning_rate * l2
            h = [hj * decay for hj in h]
            for j, g in grad_h.items():
                h[j] -= step * g
    info: dict[str, Any] = {"examples": n, "epochs": epochs, "learning_rate": learning_rate}
    info["l2"] = l2
    info.update(meta or {})
    return LearnedWeights(
        bias=b,
        weights=dict(zip(FEATURE_ORDER, w, strict=True)),
        hash_buckets=hash_buckets,
        hash_weights=tuple(h),
        meta=info,
    )
