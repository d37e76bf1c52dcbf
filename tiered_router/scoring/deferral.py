"""The deferral model: after a panel, is its answer worth sending on to the frontier?

A prompt scorer decides before any draft; a panel decides from the drafts' agreement. Where
cheap models fail together (multiple choice, code), both miss what the drafts say beyond
their majority. The deferral model reads both at once: the learned scorer's prompt features
(:data:`~tiered_router.scoring.learned.V2_FEATURES`) and the panel's draft signals
(:data:`tiered_router.panels.SIGNAL_NAMES`), and returns P(the panel's answer is wrong), a
logistic regression fitted on recorded outcomes (``tiered-router fit-scorer`` on a policy
with ``drafts:``). The engine asks it after the panel; a score above the policy's
``drafts.deferral.threshold`` escalates the turn with reason ``deferred``.

:func:`deferral_features` is the one function that turns a turn and its drafts into the
model's vector; the engine (live) and the offline replay both call it, so the same drafts
give the same vector. Pure: no I/O, no clock, no randomness (reading a model file is
:meth:`DeferralModel.load`, done once when a router is built).

Model file::

    {
      "format": "tiered-router/deferral-model",
      "version": 1,
      "bias": -1.3,
      "weights": {"majority_share": -2.1, "option_overlap": 0.4, ...},
      "panel": {"k": 3, "backends": ["gpt35", "mixtral", "instant"]},
      "meta": {"rows": 1103, ...}
    }

``weights`` map feature names (:data:`DEFERRAL_FEATURES`) to weights on their activations; a
missing name weighs 0, an unknown one is an error. ``panel`` records the panel the model was
fitted on (its signals mean something for that panel: the same ``k``, the same backends in
the same positions).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tiered_router.panels import SIGNAL_NAMES, DraftView, draft_signals
from tiered_router.scoring.features import sigmoid
from tiered_router.scoring.learned._features import V2_FEATURES, v2_features
from tiered_router.turn import Turn

__all__ = [
    "DEFERRAL_FEATURES",
    "DEFERRAL_FORMAT",
    "DeferralModel",
    "deferral_features",
    "fit_deferral",
]

DEFERRAL_FORMAT = "tiered-router/deferral-model"
"""Value of the ``format`` key of a deferral model file."""

DEFERRAL_FEATURES: tuple[str, ...] = V2_FEATURES + SIGNAL_NAMES
"""The model's features: the learned scorer's prompt features, then the draft signals."""

_NAMES = frozenset(DEFERRAL_FEATURES)
_MIN_ROWS = 20


def deferral_features(turn: Turn, drafts: Sequence[DraftView]) -> tuple[float, ...]:
    """The deferral model's vector for a turn and its panel's drafts (in draft order).

    Args:
        turn: The turn.
        drafts: Every draft of its panel, in draft order.

    Returns:
        One activation per name of :data:`DEFERRAL_FEATURES`.
    """
    return v2_features(turn).activations + draft_signals(drafts)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferralModel:
    """A fitted deferral model (see the module docstring).

    Attributes:
        bias: Log-odds with every activation at 0.
        weights: Weight per feature name.
        panel: The panel it was fitted on (``k``, ``backends``).
        meta: Free-form fitting information.
    """

    bias: float
    weights: Mapping[str, float]
    panel: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.weights) - _NAMES
        if unknown:
            raise ValueError(f"weights: unknown feature(s) {sorted(unknown)}")
        values = [self.bias, *self.weights.values()]
        if not all(_number(v) and math.isfinite(v) for v in values):
            raise ValueError("weights: every weight must be a finite number")
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))
        object.__setattr__(self, "panel", MappingProxyType(dict(self.panel)))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def score_vector(self, vector: Sequence[float]) -> float:
        """P(the panel's answer is wrong) for a vector of :func:`deferral_features`."""
        if len(vector) != len(DEFERRAL_FEATURES):
            raise ValueError(
                f"a deferral vector has {len(DEFERRAL_FEATURES)} values, got {len(vector)}"
            )
        w = self.weights
        pairs = zip(DEFERRAL_FEATURES, vector, strict=True)
        return sigmoid(self.bias + sum(w.get(n, 0.0) * x for n, x in pairs))

    def score(self, turn: Turn, drafts: Sequence[DraftView]) -> float:
        """P(the panel's answer is wrong) for a turn and its drafts (pure)."""
        return self.score_vector(deferral_features(turn, drafts))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready file contents."""
        data: dict[str, Any] = {
            "format": DEFERRAL_FORMAT,
            "version": 1,
            "bias": self.bias,
            "weights": dict(self.weights),
            "panel": dict(self.panel),
        }
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<deferral model>") -> DeferralModel:
        """Validate a decoded model file.

        Raises:
            ValueError: When it is not a version-1 deferral model; the message starts
                with ``source``.
        """
        if not isinstance(data, Mapping) or data.get("format") != DEFERRAL_FORMAT:
            raise ValueError(f"{source}: not a deferral model (format {DEFERRAL_FORMAT!r})")
        if data.get("version") != 1:
            raise ValueError(f"{source}: 'version' must be 1, got {data.get('version')!r}")
        unknown = set(data) - {"format", "version", "bias", "weights", "panel", "meta"}
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {sorted(unknown)}")
        weights, bias = data.get("weights", {}), data.get("bias", 0.0)
        panel, meta = data.get("panel") or {}, data.get("meta") or {}
        if not isinstance(weights, Mapping) or not all(_number(v) for v in weights.values()):
            raise ValueError(f"{source}: 'weights' must map feature names to numbers")
        if not _number(bias):
            raise ValueError(f"{source}: 'bias' must be a number, got {bias!r}")
        if not isinstance(panel, Mapping) or not isinstance(meta, Mapping):
            raise ValueError(f"{source}: 'panel' and 'meta' must be objects")
        try:
            return cls(
                bias=float(bias),
                weights={str(k): float(v) for k, v in weights.items()},
                panel=panel,
                meta=meta,
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DeferralModel:
        """Read a model file.

        Raises:
            ValueError: When the file cannot be read or is not a deferral model; the message
                starts with the path.
        """
        source = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except OSError as exc:
            raise ValueError(
                f"{source}: cannot read the deferral model: {exc.strerror or type(exc).__name__}"
            ) from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
        return cls.from_dict(data, source=source)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fit_deferral(
    vectors: Sequence[Sequence[float]],
    wrong: Sequence[float],
    *,
    l2: float = 0.01,
    panel: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> DeferralModel:
    """Fit a deferral model: logistic regression of "the panel's answer is wrong".

    Features are standardised on the rows (a constant one gets weight 0); the mean log-loss
    plus ``l2 / 2 * |w|^2`` is minimised by L-BFGS from zero (deterministic); the weights
    are mapped back onto the raw activations.

    Args:
        vectors: :func:`deferral_features` of each row.
        wrong: Each row's label in [0, 1]: 1 when the answer the panel would return is wrong.
        l2: L2 strength (>= 0).
        panel: The panel the rows were drafted by (stored with the model).
        meta: Extra information stored with the model.

    Raises:
        ValueError: On a length mismatch, a label outside [0, 1], fewer than 20 rows, or
            one label only.
    """
    from tiered_router.scoring.learned._train import _standardise, minimise

    n = len(vectors)
    if len(wrong) != n:
        raise ValueError(f"fit_deferral: {n} vectors but {len(wrong)} labels")
    if n < _MIN_ROWS:
        raise ValueError(f"fit_deferral: {n} rows; at least {_MIN_ROWS} are needed")
    if any(not 0.0 <= float(y) <= 1.0 for y in wrong):
        raise ValueError("fit_deferral: every label must be a number in [0, 1]")
    if l2 < 0:
        raise ValueError(f"fit_deferral: l2 must be >= 0, got {l2}")
    labels = [float(y) for y in wrong]
    info: dict[str, Any] = {"rows": n, "l2": l2, "wrong_share": round(sum(labels) / n, 4)}
    info.update(meta or {})
    if min(labels) == max(labels):
        rate = (sum(labels) + 0.5) / (n + 1)
        return DeferralModel(
            bias=math.log(rate / (1 - rate)), weights={}, panel=panel or {}, meta=info
        )
    columns, means, scales = _standardise(vectors)
    k = len(columns)
    live = [j for j in range(k) if columns[j]]

    def f_and_grad(theta: list[float]) -> tuple[float, list[float]]:
        z = [theta[0]] * n
        for j in live:
            c = theta[1 + j]
            if c:
                z = [zi + c * x for zi, x in zip(z, columns[j], strict=True)]
        loss = math.fsum(_log1pexp(zi) - yi * zi for zi, yi in zip(z, labels, strict=True)) / n
        err = [(sigmoid(zi) - yi) / n for zi, yi in zip(z, labels, strict=True)]
        grad = [0.0] * (1 + k)
        grad[0] = math.fsum(err)
        for j in live:
            grad[1 + j] = (
                sum(e * x for e, x in zip(err, columns[j], strict=True)) + l2 * theta[1 + j]
            )
        penalty = math.fsum(theta[1 + j] ** 2 for j in live)
        return loss + 0.5 * l2 * penalty, grad

    theta = minimise(f_and_grad, [0.0] * (1 + k))
    bias = theta[0]
    weights: dict[str, float] = {}
    for j in live:
        weight = theta[1 + j] / scales[j]
        bias -= weight * means[j]
        weights[DEFERRAL_FEATURES[j]] = weight
    return DeferralModel(bias=bias, weights=weights, panel=panel or {}, meta=info)


def _log1pexp(z: float) -> float:
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))
