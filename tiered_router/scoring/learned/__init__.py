"""The learned scorer: logistic regression with weights trained on recorded outcomes.

Two weight formats, told apart by ``version``:

- **Version 2** (what :func:`fit_model` trains and the package ships): the heuristic
  features plus structure features of the request (answer options, stem length, numbers,
  negations, ...; :mod:`tiered_router.scoring.learned._features`), with one set of weights
  per *block*: ``choice`` (the focus message has lettered answer options) and ``open``.
  The default target ``gain`` has two heads, P(frontier right) and P(fast right), and the
  score is the expected gain of the frontier tier mapped to [0, 1]::

      value = (P_frontier_right - P_fast_right + 1) / 2

  so 0.5 means "the frontier tier is not expected to do better". Targets ``weak_wrong``
  (value = P(fast wrong)) and ``strong_only`` (value = P(frontier right and fast wrong))
  have one head, ``frontier``.
- **Version 1**: one head over the heuristic features (+ hashed words), trained by
  :func:`fit`; still read and scored as before.

Weights file, version 2::

    {
      "format": "tiered-router/learned-scorer",
      "version": 2,
      "target": "gain",
      "heads": {
        "strong": {"choice": {"bias": 1.2, "weights": {"option_overlap": -0.8, ...}},
                   "open": {"bias": 2.0, "weights": {...}}},
        "weak": {"choice": {...}, "open": {...}}
      },
      "hashing": {"buckets": 1024, "word_pairs": false},
      "meta": {"examples": 13241, ...}
    }

- a head's ``weights`` map feature names (:data:`V2_FEATURES`) to weights on their
  activations; a missing name weighs 0; an unknown name is an error; with ``hashing``,
  each head block also has ``hash_weights`` (``buckets`` numbers). ``hashing`` and
  ``meta`` are optional; ``meta`` is ignored by the scorer. A block missing from a head
  falls back to the head's other block.

Weights file, version 1::

    {
      "format": "tiered-router/learned-scorer",
      "version": 1,
      "bias": -1.25,
      "weights": {"prompt_tokens": 0.41, "reasoning": 2.9, ...},
      "hashing": {"buckets": 256, "weights": [0.0, 0.12, ...]},
      "meta": {"examples": 1200, "epochs": 300, "l2": 0.001}
    }

where ``weights`` are over the heuristic features, and each distinct word of the focus
message lands in bucket ``zlib.crc32(word) % buckets`` with value
``1 / sqrt(number of distinct words)``.

The package ships version-2 weights trained on RouteLLM's recorded MMLU and GSM8K outcomes
(GPT-4 vs Mixtral-8x7B; see ``tiered_router/scoring/data/ATTRIBUTION.md``):
:meth:`LearnedScorer.default`, or ``scoring: {type: learned}`` in a policy. Retrain with::

    python -m tiered_router.scoring.learned train --data ../shared/data --out weights.json

Example:
    ```python
    scorer = LearnedScorer.default()
    scorer.score(turn).value
    model = fit_model(turns, strong=[1, 1, 0], weak=[0, 1, 0])
    model.save("scorer.json")
    LearnedScorer.from_file("scorer.json")
    ```
"""

from __future__ import annotations

import json
import os
from typing import Any

from tiered_router.scoring._base import Score, Scorer
from tiered_router.scoring.learned._features import BLOCKS, STRUCTURE_FEATURES, V2_FEATURES
from tiered_router.scoring.learned._model import (
    FORMAT,
    TARGETS,
    Head,
    LearnedModel,
    compile_model,
)
from tiered_router.scoring.learned._v1 import CompiledV1, LearnedWeights, fit
from tiered_router.turn import Turn

__all__ = [
    "BLOCKS",
    "DEFAULT_WEIGHTS_FILE",
    "FORMAT",
    "STRUCTURE_FEATURES",
    "TARGETS",
    "V2_FEATURES",
    "Head",
    "LearnedModel",
    "LearnedScorer",
    "LearnedWeights",
    "fit",
    "fit_model",
    "load_weights",
]


def __getattr__(name: str) -> object:
    # the training code loads only when asked for: scoring a turn never needs it
    if name == "fit_model":
        from tiered_router.scoring.learned._train import fit_model

        return fit_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_WEIGHTS_FILE = "learned_default.json"
"""File name of the shipped weights in the ``tiered_router.scoring`` package's ``data/``."""


def load_weights(path: str | os.PathLike[str]) -> LearnedWeights | LearnedModel:
    """Read a weights file of either version.

    Args:
        path: The weights file.

    Returns:
        :class:`LearnedWeights` for version 1, :class:`LearnedModel` for version 2.

    Raises:
        ValueError: When the file cannot be read, is not JSON, or is not valid weights;
            the message starts with the path.
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
    return _from_dict(data, source=source)


def _from_dict(data: Any, *, source: str) -> LearnedWeights | LearnedModel:
    if isinstance(data, dict) and data.get("format") == FORMAT and data.get("version") == 2:
        return LearnedModel.from_dict(data, source=source)
    if isinstance(data, dict) and data.get("format") == FORMAT and data.get("version") != 1:
        raise ValueError(f"{source}: 'version' must be 1 or 2, got {data.get('version')!r}")
    return LearnedWeights.from_dict(data, source=source)


class LearnedScorer:
    """Logistic-regression scorer with trained weights (version 1 or 2).

    Example:
        ```python
        scorer = LearnedScorer.default()          # the shipped weights
        scorer = LearnedScorer.from_file("scorer.json")
        scorer.score(turn).value
        ```

    Args:
        weights: The trained weights.
        max_reasons: How many reasons a score carries, most important first.

    Raises:
        ValueError: When ``max_reasons`` is negative.
    """

    __slots__ = ("_compiled", "weights")

    def __init__(self, weights: LearnedWeights | LearnedModel, *, max_reasons: int = 5) -> None:
        if max_reasons < 0:
            raise ValueError(f"max_reasons: must be >= 0, got {max_reasons}")
        self.weights = weights
        """The weights in use."""
        self._compiled: Scorer
        if isinstance(weights, LearnedModel):
            self._compiled = compile_model(weights, max_reasons=max_reasons)
        else:
            self._compiled = CompiledV1(weights, max_reasons=max_reasons)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, max_reasons: int = 5) -> LearnedScorer:
        """Build a scorer from a weights JSON file (version 1 or 2).

        Args:
            path: The weights file (format in the package docstring).
            max_reasons: How many reasons a score carries.

        Raises:
            ValueError: When the file cannot be read or is not valid weights.
        """
        return cls(load_weights(path), max_reasons=max_reasons)

    @classmethod
    def default(cls, *, max_reasons: int = 5) -> LearnedScorer:
        """Build a scorer with the weights shipped in the package.

        They are trained on RouteLLM's recorded MMLU and GSM8K outcomes (frontier
        GPT-4-1106-preview, fast Mixtral-8x7B-Instruct); ``docs/scoring.md`` has their
        held-out figures.

        Args:
            max_reasons: How many reasons a score carries.
        """
        from importlib import resources

        ref = resources.files("tiered_router.scoring") / "data" / DEFAULT_WEIGHTS_FILE
        source = f"tiered_router/scoring/data/{DEFAULT_WEIGHTS_FILE}"
        data = json.loads(ref.read_text(encoding="utf-8"))
        return cls(_from_dict(data, source=source), max_reasons=max_reasons)

    def score(self, turn: Turn) -> Score:
        """Score one turn: pure and deterministic.

        Args:
            turn: The turn.

        Returns:
            Value in [0, 1], raw features, signed contributions (they add up to the value
            minus the value with every feature at 0; hashed words under the name
            ``words``) and reasons, most important first.
        """
        return self._compiled.score(turn)

    def __repr__(self) -> str:
        w = self.weights
        if isinstance(w, LearnedModel):
            return f"LearnedScorer(version=2, target={w.target!r}, hash_buckets={w.hash_buckets})"
        return f"LearnedScorer(bias={w.bias!r}, hash_buckets={w.hash_buckets})"
