"""Scoring: how hard is a turn? A :class:`Scorer` maps a turn to a :class:`Score` in [0, 1].

Scorers are pure: no I/O, no clock, no randomness. The same turn always gets the same score.
Two ship with the package: :class:`HeuristicScorer` (explainable features, hand-set weights
that a policy may override; the default) and :class:`LearnedScorer` (the same features plus
structure features of the request, weights trained on recorded outcomes; shipped weights
included). ``docs/scoring.md`` compares them.

Wing (docs/architecture.md): owns the scorers and their fitting; may import the root's
shared values, ``policy`` (its schema) and ``evaluation``'s data sources (fitting only). A new
scorer: a ``Scorer`` class, a ``scoring.type`` value, a branch in :func:`build_scorer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiered_router.scoring._base import Score, Scorer
from tiered_router.scoring.features import approx_tokens
from tiered_router.scoring.heuristic import (
    DEFAULT_WEIGHTS,
    FEATURE_NAMES,
    HeuristicScorer,
)
from tiered_router.scoring.transfer import TransferModel, TransferScorer

if TYPE_CHECKING:
    from tiered_router.policy._checks import Problems
    from tiered_router.policy._schema import Policy, ScoringConfig
    from tiered_router.scoring.deferral import DeferralModel
    from tiered_router.scoring.learned import (
        LearnedModel,
        LearnedScorer,
        LearnedWeights,
        fit,
        fit_model,
        load_weights,
    )

__all__ = [
    "DEFAULT_WEIGHTS",
    "FEATURE_NAMES",
    "HeuristicScorer",
    "LearnedModel",
    "LearnedScorer",
    "LearnedWeights",
    "Score",
    "Scorer",
    "TransferModel",
    "TransferScorer",
    "approx_tokens",
    "build_scorer",
    "scoring_problems",
    "fit",
    "fit_model",
    "load_deferral",
    "load_weights",
    "panel_deferral",
]

_LEARNED = frozenset(
    {"LearnedModel", "LearnedScorer", "LearnedWeights", "fit", "fit_model", "load_weights"}
)


def __getattr__(name: str) -> object:
    # the learned scorer (and its training code) loads on first use, not with the package
    if name in _LEARNED:
        from tiered_router.scoring import learned

        return getattr(learned, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_HEURISTIC_OPTIONS = frozenset({"max_reasons"})
_LEARNED_OPTIONS = frozenset({"path", "max_reasons"})
_TRANSFER_OPTIONS = frozenset({"path", "max_reasons", "up_front"})


def scoring_problems(policy: Policy) -> Problems:
    """Every problem building ``policy.scoring`` would meet (the scorer's load-time check).

    Heuristic weight names are checked against :data:`FEATURE_NAMES`, then the scorer is
    built (the learned scorer's weights file read); each problem comes back with its path.
    """
    from tiered_router.policy._base import did_you_mean
    from tiered_router.policy._checks import from_message

    scoring = policy.scoring
    if scoring.type == "heuristic" and scoring.weights:
        known = sorted({*FEATURE_NAMES, "bias"})
        unknown = [name for name in scoring.weights if name not in known]
        if unknown:
            return [
                (("scoring", "weights", n), f"unknown feature {n!r}{did_you_mean(n, known)}")
                for n in unknown
            ]
    try:
        build_scorer(scoring)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        # build_scorer names the field first: "scoring.options.path: no such file ..."
        return from_message(str(exc), "scoring")
    deferral = policy.drafts.deferral if policy.drafts is not None else None
    if deferral is not None:
        try:
            load_deferral(deferral.path)
        except ValueError as exc:
            return [(("drafts", "deferral", "path"), str(exc))]
    return []


def panel_deferral(policy: Policy) -> DeferralModel | None:
    """The deferral model ``policy.drafts.deferral`` names, read; ``None`` without one.

    Raises:
        ValueError: When the file cannot be read or is not a deferral model.
    """
    drafts = policy.drafts
    if drafts is None or drafts.deferral is None:
        return None
    return load_deferral(drafts.deferral.path)


def load_deferral(path: str) -> DeferralModel:
    """Read the deferral model a policy's ``drafts.deferral.path`` names.

    Raises:
        ValueError: When the file cannot be read or is not a deferral model.
    """
    from tiered_router.scoring.deferral import DeferralModel

    return DeferralModel.load(path)


def build_scorer(config: ScoringConfig) -> Scorer:
    """Build the scorer a policy's ``scoring`` section describes.

    Example:
        ```python
        scorer = build_scorer(policy.scoring)
        ```

    - ``type: heuristic``: :class:`HeuristicScorer` with ``weights`` as overrides;
      ``options`` may set ``max_reasons``.
    - ``type: transfer``: :class:`TransferScorer` (shipped weights, or ``options.path``);
      ``options.up_front`` lists the up-front signals to use.
    - ``type: learned``: :class:`LearnedScorer` with the weights shipped in the package
      (:meth:`LearnedScorer.default`), or from the JSON file at ``options.path`` (a
      relative path is relative to the working directory); ``weights`` must be empty.

    Args:
        config: The policy's scoring configuration.

    Returns:
        The scorer.

    Raises:
        ValueError: On an unknown type, unknown weight names or options, a missing or
            unreadable weights file; the message names the field.
    """
    options = dict(config.options)
    if config.type == "heuristic":
        _check_options(options, _HEURISTIC_OPTIONS, "heuristic")
        try:
            return HeuristicScorer(weights=config.weights, **_max_reasons(options))
        except ValueError as exc:
            raise ValueError(f"scoring.weights: {exc}") from exc
    if config.type == "learned":
        from tiered_router.scoring.learned import LearnedScorer

        _check_options(options, _LEARNED_OPTIONS, "learned")
        if config.weights:
            raise ValueError(
                "scoring.weights: only the heuristic scorer takes weight overrides; "
                "a learned scorer reads its weights from scoring.options.path"
            )
        path = options.get("path")
        if path is None:
            return LearnedScorer.default(**_max_reasons(options))
        if not isinstance(path, str) or not path:
            raise ValueError(
                "scoring.options.path: must be the path of a weights JSON file, "
                f"got {path!r} (leave it out for the shipped weights)"
            )
        try:
            return LearnedScorer.from_file(path, **_max_reasons(options))
        except ValueError as exc:
            raise ValueError(f"scoring.options.path: {exc}") from exc
    if config.type == "transfer":
        return _transfer(config, options)
    raise ValueError(
        f"scoring.type: unknown scorer {config.type!r}; known: heuristic, learned, transfer"
    )


def _transfer(config: ScoringConfig, options: dict[str, object]) -> Scorer:
    _check_options(options, _TRANSFER_OPTIONS, "transfer")
    if config.weights:
        raise ValueError(
            "scoring.weights: only the heuristic scorer takes weight overrides; "
            "a transfer scorer reads its weights from scoring.options.path"
        )
    up_front = options.get("up_front", [])
    if not isinstance(up_front, list) or not all(isinstance(s, str) for s in up_front):
        raise ValueError(
            f"scoring.options.up_front: must be a list of signal names, got {up_front!r}"
        )
    path = options.get("path")
    try:
        if path is None:
            return TransferScorer.default(up_front=up_front, **_max_reasons(options))
        if not isinstance(path, str) or not path:
            raise ValueError(f"must be the path of a weights JSON file, got {path!r}")
        return TransferScorer.from_file(path, up_front=up_front, **_max_reasons(options))
    except ValueError as exc:
        field = "up_front" if str(exc).startswith("up_front") else "path"
        raise ValueError(f"scoring.options.{field}: {exc}") from exc


def _check_options(options: dict[str, object], known: frozenset[str], kind: str) -> None:
    unknown = set(options) - known
    if unknown:
        raise ValueError(
            f"scoring.options: unknown option(s) {sorted(unknown)} for the {kind} scorer; "
            f"known: {', '.join(sorted(known))}"
        )


def _max_reasons(options: dict[str, object]) -> dict[str, int]:
    if "max_reasons" not in options:
        return {}
    value = options["max_reasons"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"scoring.options.max_reasons: must be an integer >= 0, got {value!r}")
    return {"max_reasons": value}
