"""The version-2 learned model: logistic heads per block over structure features.

See :mod:`tiered_router.scoring.learned` for the file format and
:mod:`tiered_router.scoring.learned._features` for the features.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import mul
from types import MappingProxyType
from typing import Any

from tiered_router.scoring._base import Score
from tiered_router.scoring.features import focus_text, sigmoid
from tiered_router.scoring.heuristic import _describe as _describe_heuristic
from tiered_router.scoring.learned._features import (
    BLOCKS,
    STRUCTURE_FEATURES,
    V2_FEATURES,
    V2Vector,
    hashed_words,
    v2_features,
)
from tiered_router.turn import Turn

__all__ = ["FORMAT", "TARGETS", "Head", "LearnedModel", "compile_model"]

FORMAT = "tiered-router/learned-scorer"
"""Value of the ``format`` key of a weights file."""

TARGETS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"gain": ("strong", "weak"), "weak_wrong": ("frontier",), "strong_only": ("frontier",)}
)
"""Training targets and the heads each one has."""

_NAMES = frozenset(V2_FEATURES)
_MAX_BUCKETS = 1 << 20
_MIN_REASON_SHARE = 0.005


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """One logistic head of one block: ``P = sigmoid(bias + w . activations + words)``.

    Attributes:
        bias: Log-odds with every activation at 0.
        weights: Weight per feature name (:data:`V2_FEATURES`); a missing name weighs 0.
        hash_weights: One weight per hashed-word bucket (empty without hashing).
    """

    bias: float
    weights: Mapping[str, float]
    hash_weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.weights) - _NAMES
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}")
        values = [self.bias, *self.weights.values(), *self.hash_weights]
        if not all(_is_number(v) and math.isfinite(v) for v in values):
            raise ValueError("every weight must be a finite number")
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready mapping of the head."""
        data: dict[str, Any] = {"bias": self.bias, "weights": dict(self.weights)}
        if self.hash_weights:
            data["hash_weights"] = list(self.hash_weights)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedModel:
    """Trained version-2 weights: heads (by target) per block (``choice``, ``open``).

    Attributes:
        target: What the heads predict (a key of :data:`TARGETS`).
        heads: Head name -> block name -> :class:`Head`.
        hash_buckets: Hashed-word buckets (0: none).
        word_pairs: Whether neighbouring word pairs are hashed too.
        meta: Free-form training information.
    """

    target: str
    heads: Mapping[str, Mapping[str, Head]]
    hash_buckets: int = 0
    word_pairs: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; known: {', '.join(TARGETS)}")
        if set(self.heads) != set(TARGETS[self.target]):
            raise ValueError(
                f"target {self.target!r} needs the head(s) {list(TARGETS[self.target])}, "
                f"got {sorted(self.heads)}"
            )
        if not 0 <= self.hash_buckets <= _MAX_BUCKETS:
            raise ValueError(f"hash buckets must be in [0, {_MAX_BUCKETS}]")
        for name, blocks in self.heads.items():
            if not blocks or set(blocks) - set(BLOCKS):
                raise ValueError(f"head {name!r}: blocks must be a non-empty subset of {BLOCKS}")
            for block, head in blocks.items():
                if len(head.hash_weights) != self.hash_buckets:
                    raise ValueError(
                        f"head {name!r} block {block!r}: {self.hash_buckets} hash buckets but "
                        f"{len(head.hash_weights)} hash weights"
                    )
        frozen = {n: MappingProxyType(dict(b)) for n, b in self.heads.items()}
        object.__setattr__(self, "heads", MappingProxyType(frozen))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready mapping (version 2 of the file format)."""
        data: dict[str, Any] = {
            "format": FORMAT,
            "version": 2,
            "target": self.target,
            "heads": {
                name: {block: head.to_dict() for block, head in blocks.items()}
                for name, blocks in self.heads.items()
            },
        }
        if self.hash_buckets:
            data["hashing"] = {"buckets": self.hash_buckets, "word_pairs": self.word_pairs}
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON to ``path`` (UTF-8, sorted keys).

        Args:
            path: Destination file.
        """
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<weights>") -> LearnedModel:
        """Validate a version-2 mapping and build the model.

        Args:
            data: The decoded JSON (``format`` and ``version`` already checked).
            source: Where it came from, for error messages.

        Raises:
            ValueError: When the mapping is not a valid version-2 document.
        """
        unknown = set(data) - {"format", "version", "target", "heads", "hashing", "meta"}
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {sorted(unknown)}")
        hashing = data.get("hashing") or {}
        if not isinstance(hashing, Mapping) or set(hashing) - {"buckets", "word_pairs"}:
            raise ValueError(f"{source}: 'hashing' must be {{'buckets': int, 'word_pairs': bool}}")
        buckets = hashing.get("buckets", 0)
        pairs = hashing.get("word_pairs", False)
        if not isinstance(buckets, int) or isinstance(buckets, bool) or not isinstance(pairs, bool):
            raise ValueError(f"{source}: 'hashing.buckets' must be an integer, 'word_pairs' a bool")
        heads_data = data.get("heads")
        if not isinstance(heads_data, Mapping):
            raise ValueError(f"{source}: 'heads' must map head names to blocks")
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ValueError(f"{source}: 'meta' must be an object")
        try:
            heads = {
                str(name): {
                    str(block): _head(spec, f"heads.{name}.{block}")
                    for block, spec in _mapping(blocks, f"heads.{name}").items()
                }
                for name, blocks in heads_data.items()
            }
            return cls(
                target=str(data.get("target")),
                heads=heads,
                hash_buckets=buckets,
                word_pairs=pairs,
                meta=meta,
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from exc


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    return value


def _head(spec: Any, where: str) -> Head:
    spec = _mapping(spec, where)
    if set(spec) - {"bias", "weights", "hash_weights"}:
        raise ValueError(f"{where}: unknown key(s) {sorted(set(spec) - {'bias', 'weights'})}")
    weights = spec.get("weights", {})
    hash_weights = spec.get("hash_weights", [])
    bias = spec.get("bias", 0.0)
    if not isinstance(weights, Mapping) or not all(_is_number(v) for v in weights.values()):
        raise ValueError(f"{where}.weights: must map feature names to numbers")
    if not isinstance(hash_weights, list) or not all(_is_number(v) for v in hash_weights):
        raise ValueError(f"{where}.hash_weights: must be a list of numbers")
    if not _is_number(bias):
        raise ValueError(f"{where}.bias: must be a number, got {bias!r}")
    try:
        return Head(
            bias=float(bias),
            weights={str(k): float(v) for k, v in weights.items()},
            hash_weights=tuple(float(v) for v in hash_weights),
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


_CompiledHead = tuple[float, tuple[float, ...], tuple[float, ...]]

_TEMPLATES: Mapping[str, str] = {
    "text_chars": "request of {:.0f} characters",
    "stem_chars": "question stem of {:.0f} characters",
    "stem_words": "question stem of {:.0f} words",
    "sentences": "{:.0f} sentences",
    "question_marks": "{:.0f} question marks",
    "numbers": "{:.0f} numbers",
    "distinct_numbers": "{:.0f} distinct numbers",
    "digit_share": "digits {:.0%} of the text",
    "capitalised": "capitalised words {:.0%}",
    "long_words": "long words {:.0%}",
    "word_length": "mean word length {:.1f}",
    "distinct_words": "distinct words {:.0%}",
    "quantity_words": "{:.0f} quantity words (each, per, twice, ...)",
    "options": "{:.0f} answer options",
    "option_chars": "options of {:.0f} characters on average",
    "option_chars_max": "longest option {:.0f} characters",
    "option_spread": "option lengths spread {:.2f}",
    "option_words": "options of {:.1f} words on average",
    "numeric_options": "numeric options {:.0%}",
    "option_overlap": "options alike (word overlap {:.2f})",
    "option_overlap_max": "two options alike (word overlap {:.2f})",
}
_FLAGS: Mapping[str, str] = {
    "decimals": "decimal numbers",
    "large_numbers": "large numbers",
    "money": "amounts of money",
    "percent": "percentages",
    "fractions": "fractions",
    "negation_caps": "emphasised negation (NOT, EXCEPT, ...)",
    "negation": "negation (not, except, ...)",
    "blank": "a blank to fill",
    "quotes": "quoted text",
    "symbols": "symbol density",
    "which_of": '"which of the following"',
    "paired_options": "paired options (a, b)",
    "option_catchall": '"all / none of the above"',
    "statements": "two statements to judge",
}
_STRUCTURE = frozenset(STRUCTURE_FEATURES)


def _reason(name: str, vector: V2Vector) -> str:
    if name == "words":
        return "wording of the request"
    if name not in _STRUCTURE:
        return _describe_heuristic(name, vector.heuristic)
    raw = vector.raw[name]
    if name in _TEMPLATES:
        return _TEMPLATES[name].format(raw)
    return f"{_FLAGS.get(name, name)}: {raw:g}"


class CompiledModel:
    """A :class:`LearnedModel` laid out for fast scoring (weights as tuples per block).

    Args:
        model: The model.
        max_reasons: How many reasons a score carries.
    """

    __slots__ = ("_buckets", "_heads", "_max_reasons", "_pairs", "_sign")

    def __init__(self, model: LearnedModel, *, max_reasons: int) -> None:
        self._buckets = model.hash_buckets
        self._pairs = model.word_pairs
        self._max_reasons = max_reasons
        heads: list[tuple[_CompiledHead, _CompiledHead]] = []
        for name in TARGETS[model.target]:
            blocks = model.heads[name]
            laid = {
                block: (
                    head.bias,
                    tuple(head.weights.get(f, 0.0) for f in V2_FEATURES),
                    head.hash_weights,
                )
                for block, head in blocks.items()
            }
            # a block the model was not trained on uses the block it was trained on
            choice = laid.get("choice") or laid["open"]
            heads.append((choice, laid.get("open") or choice))
        self._heads = tuple(heads)
        self._sign = (0.5, -0.5) if model.target == "gain" else (1.0,)

    def score(self, turn: Turn) -> Score:
        """Score one turn (see :class:`~tiered_router.scoring.learned.LearnedScorer`)."""
        vector = v2_features(turn)
        acts = vector.activations
        hashed = hashed_words(focus_text(turn), self._buckets, self._pairs) if self._buckets else ()
        value = 0.5 if len(self._sign) == 2 else 0.0
        factors: list[float] = []
        products: list[list[float]] = []
        words_share = 0.0
        for sign, blocks in zip(self._sign, self._heads, strict=True):
            bias, weights, hash_weights = blocks[vector.block]
            pushes = list(map(mul, weights, acts))
            words = sum(hash_weights[b] * v for b, v in hashed)
            total = sum(pushes) + words
            p = sigmoid(bias + total)
            p0 = sigmoid(bias)
            # secant slope of the sigmoid: the shares add up exactly to p - p0
            factor = sign * ((p - p0) / total if abs(total) > 1e-9 else p0 * (1.0 - p0))
            value += sign * p
            words_share += factor * words
            factors.append(factor)
            products.append(pushes)
        if len(factors) == 2:
            f0, f1 = factors
            shares = [f0 * x + f1 * y for x, y in zip(products[0], products[1], strict=True)]
        else:
            f0 = factors[0]
            shares = [f0 * x for x in products[0]]
        contributions = dict(zip(V2_FEATURES, shares, strict=True))
        if self._buckets:
            contributions["words"] = words_share
        # sorted() runs in C; ties (rare) resolve by name, deterministically
        top = sorted(
            zip(map(abs, contributions.values()), contributions, strict=True), reverse=True
        )
        reasons = tuple(
            f"{_reason(name, vector)} ({contributions[name]:+.2f})"
            for size, name in top[: self._max_reasons]
            if size >= _MIN_REASON_SHARE
        )
        return Score(
            value=min(1.0, max(0.0, value)),
            features=vector.raw,
            contributions=contributions,
            reasons=reasons,
        )


def compile_model(model: LearnedModel, *, max_reasons: int = 5) -> CompiledModel:
    """Lay a model out for scoring.

    Args:
        model: The model.
        max_reasons: How many reasons a score carries.

    Returns:
        The compiled model; its ``score(turn)`` is the scorer's.
    """
    return CompiledModel(model, max_reasons=max_reasons)
