"""The transfer scorer: few features, chosen because they hold on traffic never trained on.

Under leave-one-source-out cross-validation over the shared data (``docs/scoring.md``),
most request features that separate hard from easy questions *within* one benchmark
(reasoning markers, numbers, stem structure, words, sentence embeddings) point the other
way on another benchmark. What held across sources:

- ``length``: the request's length, ``ln(1 + characters)`` of every message but the system
  and developer messages (an agent repeats those on every step: context, not difficulty);
- ``option_overlap`` and ``option_overlap_max`` (multiple-choice requests only): how alike
  the lettered answer options are (mean and largest word overlap, Jaccard); options that
  share most of their words ask for a fine distinction.

The score is a logistic function of them, with one set of weights per *block* (``choice``:
the focus message has at least two lettered options; ``open``: any other request)::

    value = sigmoid(bias[block] + sum(weight[block][f] * x[f]))

Two optional **up-front signals** (``up_front=``, off by default) read tool turns for
mistakes a quality gate cannot see in a fast draft, and lift the score to 1.0 (frontier
first) when they fire:

- ``several_targets``: tools are offered and the request enumerates several targets ("in
  Paris, London and Rome", "for 3 and 5", "each of", "respectively"), which fast models
  often answer with one call;
- ``no_tool_fits``: tools are offered and none shares a content word with the request (the
  right answer is probably prose or a question, which fast models rarely give).

Weights file (``tiered_router/scoring/data/transfer_default.json``, trained by
``python -m tiered_router.scoring._transfer_fit ../shared/data``)::

    {
      "format": "tiered-router/transfer-scorer",
      "version": 1,
      "blocks": {
        "choice": {"bias": -0.1, "weights": {"length": 0.01, "option_overlap": 1.2}},
        "open": {"bias": -0.5, "weights": {"length": 0.03}}
      },
      "meta": {...}
    }

Example:
    ```python
    scorer = TransferScorer.default()
    scorer.score(turn).value
    TransferScorer.default(up_front=("several_targets",))
    ```
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from tiered_router.scoring._base import Score
from tiered_router.scoring._choices import option_overlap as _overlap
from tiered_router.scoring._choices import split_options as _options
from tiered_router.scoring.features import focus_text, request_chars, sigmoid
from tiered_router.turn import Turn

__all__ = [
    "FEATURES",
    "FORMAT",
    "TRANSFER_BLOCKS",
    "UP_FRONT_SIGNALS",
    "TransferModel",
    "TransferScorer",
    "several_targets",
    "tool_fit",
]

FORMAT = "tiered-router/transfer-scorer"
"""Value of ``format`` in a transfer-scorer weights file."""

FEATURES: tuple[str, ...] = ("length", "option_overlap", "option_overlap_max")
"""Names of the weighted features."""

TRANSFER_BLOCKS: tuple[str, str] = ("choice", "open")
"""Blocks with their own weights: multiple-choice requests and everything else."""

UP_FRONT_SIGNALS: tuple[str, ...] = ("several_targets", "no_tool_fits")
"""Signals that send a tool turn to the frontier tier up front."""

DEFAULT_WEIGHTS_FILE = "transfer_default.json"
"""File name of the shipped weights in ``tiered_router/scoring/data/``."""

_MIN_REASON_SHARE = 0.005


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferModel:
    """Weights of a transfer scorer: per block, a bias and feature weights.

    Attributes:
        blocks: ``{"choice": (bias, {feature: weight}), "open": (...)}``.
        meta: Free-form information about training (ignored when scoring).
    """

    blocks: Mapping[str, tuple[float, Mapping[str, float]]]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (see the module docstring)."""
        return {
            "format": FORMAT,
            "version": 1,
            "blocks": {
                name: {"bias": bias, "weights": dict(weights)}
                for name, (bias, weights) in self.blocks.items()
            },
            "meta": dict(self.meta),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the weights as JSON (sorted keys, so the same weights give the same file)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<weights>") -> TransferModel:
        """Validate and build weights from their JSON form.

        Raises:
            ValueError: On a wrong format or version, a missing block, an unknown feature
                or a weight that is not a finite number; the message starts with ``source``.
        """
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"{source}: not a transfer-scorer weights file ('format': {FORMAT})")
        if data.get("version") != 1:
            raise ValueError(f"{source}: 'version' must be 1, got {data.get('version')!r}")
        raw_blocks = data.get("blocks")
        if not isinstance(raw_blocks, Mapping):
            raise ValueError(f"{source}: 'blocks' must be an object")
        blocks: dict[str, tuple[float, Mapping[str, float]]] = {}
        for name in TRANSFER_BLOCKS:
            block = raw_blocks.get(name)
            if not isinstance(block, Mapping):
                raise ValueError(f"{source}: blocks.{name}: missing")
            bias = _number(block.get("bias"), f"{source}: blocks.{name}.bias")
            weights: dict[str, float] = {}
            raw_weights = block.get("weights", {})
            if not isinstance(raw_weights, Mapping):
                raise ValueError(f"{source}: blocks.{name}.weights must be an object")
            for feature, value in raw_weights.items():
                if feature not in FEATURES:
                    raise ValueError(
                        f"{source}: blocks.{name}.weights: unknown feature {feature!r}; "
                        f"known: {', '.join(FEATURES)}"
                    )
                weights[feature] = _number(value, f"{source}: blocks.{name}.weights.{feature}")
            blocks[name] = (bias, MappingProxyType(weights))
        meta = data.get("meta", {})
        return cls(blocks=MappingProxyType(blocks), meta=MappingProxyType(dict(meta or {})))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: must be a finite number, got {value!r}")
    return float(value)


def load_transfer_model(path: str | os.PathLike[str]) -> TransferModel:
    """Read a transfer-scorer weights file.

    Raises:
        ValueError: When the file cannot be read, is not JSON or not valid weights.
    """
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ValueError(f"{source}: cannot read transfer scorer weights: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    return TransferModel.from_dict(data, source=source)


# --- tool-turn signals -------------------------------------------------------------------

_WORD = re.compile(r"[a-z][a-z0-9]+")
_STOP = frozenset(
    """about above after again against also among another any around based been before
    being below between both call calculate can could does doing down during each find from
    function further give have having here into just like make more most need only other
    over please provide same should show some such than that their them then there these
    they this those through under until used using want what when where which while with
    would your get the and for are you how its out use who why""".split()
)
# enumerations: "A, B and C", "A and B" where items are numbers or Capitalised names
_ITEM = r"(?:[-$]?\d[\d.,]*%?|[A-Z][\w'.-]*(?:\s[A-Z][\w'.-]*){0,2}|'[^']{1,40}'|\"[^\"]{1,40}\")"
_ENUM = re.compile(rf"{_ITEM}(?:\s*,\s*{_ITEM})*,?\s+(?:and|&)\s+{_ITEM}")
_ENUM_COMMA = re.compile(rf"{_ITEM}(?:\s*,\s*{_ITEM}){{2,}}")
_SEVERAL = re.compile(
    r"\b(?:respectively|each of|both|for each|for all|all three|all four|all of the|"
    r"two different|three different|several|multiple)\b",
    re.I,
)


def _stem(word: str) -> str:
    return word[:5]


@lru_cache(maxsize=4096)
def _content_stems(text: str) -> frozenset[str]:
    return frozenset(
        _stem(w) for w in _WORD.findall(text.lower().replace("_", " ")) if w not in _STOP
    )


def tool_fit(turn: Turn) -> float:
    """Largest share of a tool's name words found in the request (0 when no tool fits).

    A tool's words are those of its name (``get_current_weather`` -> get, current,
    weather) and description, stop words removed, compared on their first five letters.
    The value is, over the tools, the largest count of shared words (capped at 3) / 3.

    Args:
        turn: The turn (its tools and focus message).

    Returns:
        A value in [0, 1]; 1.0 when the turn has no tools.
    """
    if not turn.tools:
        return 1.0
    request = _content_stems(focus_text(turn))
    best = 0
    for tool in turn.tools:
        words = _content_stems(f"{tool.name} {tool.description}")
        best = max(best, len(words & request))
        if best >= 3:
            break
    return best / 3


@lru_cache(maxsize=4096)
def several_targets(text: str) -> int:
    """Number of targets a request enumerates (0 or 1 when it names one).

    Counts the items of the longest enumeration of numbers, capitalised names or quoted
    values (``Paris, London and Rome``: 3; ``radius 3 and 5``: 2), and returns 2 for
    words that ask for several (``each of``, ``respectively``, ``both``) when no list
    is longer.

    Args:
        text: The request.

    Returns:
        The count.
    """
    best = 0
    for pattern in (_ENUM, _ENUM_COMMA):
        for match in pattern.finditer(text):
            items = len(re.findall(r"\s*,\s*|\s+(?:and|&)\s+", match.group(0))) + 1
            best = max(best, items)
    if best < 2 and _SEVERAL.search(text):
        best = 2
    return best


# --- the scorer ----------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _choice_features(text: str) -> tuple[int, float, float]:
    _, options = _options(text)
    if len(options) < 2:
        return 1, 0.0, 0.0
    mean, top = _overlap(options)
    return 0, mean, top


class TransferScorer:
    """Prompt length and option overlap, weights trained on every source pooled.

    Example:
        ```python
        scorer = TransferScorer.default()
        score = scorer.score(turn)
        score.value, score.reasons
        ```

    Args:
        model: The weights.
        up_front: Which of :data:`UP_FRONT_SIGNALS` lift a tool turn's score to 1.0
            (none by default: on the shared data they cost more frontier calls than the
            quality they bring, ``docs/scoring.md``).
        max_reasons: How many reasons a score carries.

    Raises:
        ValueError: On an unknown up-front signal or a negative ``max_reasons``.
    """

    __slots__ = ("_blocks", "_max_reasons", "_up_front", "model")

    def __init__(
        self,
        model: TransferModel,
        *,
        up_front: Iterable[str] = (),
        max_reasons: int = 3,
    ) -> None:
        chosen = tuple(up_front)
        unknown = [s for s in chosen if s not in UP_FRONT_SIGNALS]
        if unknown:
            raise ValueError(
                f"up_front: unknown signal(s) {unknown}; known: {', '.join(UP_FRONT_SIGNALS)}"
            )
        if max_reasons < 0:
            raise ValueError(f"max_reasons: must be >= 0, got {max_reasons}")
        self.model = model
        """The weights in use."""
        self._up_front = frozenset(chosen)
        self._max_reasons = max_reasons
        self._blocks = tuple(
            (model.blocks[b][0], tuple(model.blocks[b][1].get(f, 0.0) for f in FEATURES))
            for b in TRANSFER_BLOCKS
        )

    @classmethod
    def default(cls, *, up_front: Iterable[str] = (), max_reasons: int = 3) -> TransferScorer:
        """Build a scorer with the weights shipped in the package (``docs/scoring.md``)."""
        return cls(_shipped(), up_front=up_front, max_reasons=max_reasons)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        up_front: Iterable[str] = (),
        max_reasons: int = 3,
    ) -> TransferScorer:
        """Build a scorer from a weights file (format in the module docstring)."""
        return cls(load_transfer_model(path), up_front=up_front, max_reasons=max_reasons)

    def score(self, turn: Turn) -> Score:
        """Score one turn: pure and deterministic.

        Returns:
            Value in [0, 1]; raw features (``prompt_chars`` and ``request_chars``, the
            option overlaps, ``block``,
            and for tool turns, when their signal is on, ``targets`` and ``tool_fit``);
            signed contributions that add
            up to the value minus the block's value with every feature at 0; reasons.
        """
        text = focus_text(turn)
        block, overlap, overlap_max = _choice_features(text)
        chars = request_chars(turn)
        x = (math.log1p(chars), overlap, overlap_max)
        bias, weights = self._blocks[block]
        z = bias + sum(w * v for w, v in zip(weights, x, strict=True))
        base = sigmoid(bias)
        value = sigmoid(z)
        slope = (value - base) / (z - bias) if z != bias else value * (1.0 - value)
        contributions = {f: w * v * slope for f, w, v in zip(FEATURES, weights, x, strict=True)}
        features: dict[str, float] = {
            "prompt_chars": float(turn.prompt_chars),
            "request_chars": float(chars),
            "option_overlap": overlap,
            "option_overlap_max": overlap_max,
            "block": float(block),
        }
        lifted: list[str] = []
        if turn.tools and self._up_front:
            if "several_targets" in self._up_front:
                targets = several_targets(text)
                features["targets"] = float(targets)
                if targets >= 2:
                    lifted.append(f"request names {targets} targets: frontier up front")
            if "no_tool_fits" in self._up_front:
                fit = tool_fit(turn)
                features["tool_fit"] = fit
                if fit == 0.0:
                    lifted.append("no offered tool matches the request: frontier up front")
        if lifted:
            contributions["up_front"] = 1.0 - value
            value = 1.0
        reasons = tuple(lifted) + self._reasons(contributions, chars, overlap)
        return Score(
            value=value,
            features=features,
            contributions=contributions,
            reasons=reasons[: max(self._max_reasons, len(lifted))],
        )

    def _reasons(
        self, contributions: Mapping[str, float], chars: int, overlap: float
    ) -> tuple[str, ...]:
        ranked = sorted(
            ((abs(c), f, c) for f, c in contributions.items() if f in _REASON_FEATURES),
            reverse=True,
        )
        # labels are written only for the contributions shown (most turns show one or none)
        return tuple(
            f"{_label(f, chars, overlap)} ({c:+.2f})"
            for size, f, c in ranked
            if size >= _MIN_REASON_SHARE
        )

    def __repr__(self) -> str:
        return f"TransferScorer(up_front={sorted(self._up_front)})"


_REASON_FEATURES = frozenset(FEATURES)
"""The contributions a reason is written for (not ``up_front``)."""


def _label(feature: str, chars: int, overlap: float) -> str:
    if feature == "length":
        return f"request {chars} characters"
    if feature == "option_overlap":
        return f"options alike (word overlap {overlap:.2f})"
    return "two options nearly the same"


@lru_cache(maxsize=1)
def _shipped() -> TransferModel:
    from importlib import resources  # with pathlib and tempfile under it: on first use

    ref = resources.files("tiered_router.scoring") / "data" / DEFAULT_WEIGHTS_FILE
    data = json.loads(ref.read_text(encoding="utf-8"))
    return TransferModel.from_dict(
        data, source=f"tiered_router/scoring/data/{DEFAULT_WEIGHTS_FILE}"
    )
