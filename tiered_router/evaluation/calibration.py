"""Calibration targets, and writing a calibrated threshold back into a policy file.

``tiered-router calibrate POLICY --data ... --target-fast-share 0.7 --write`` picks the
threshold from the sweep (see :func:`~tiered_router.evaluation.sweep.calibrate`) and edits
``scoring.threshold`` in place: only the value's characters change, so comments, order,
quoting and indentation are kept. (Where the file has no ``scoring.threshold`` yet, the
key is added through ruamel.yaml's round-trip writer, which keeps comments too.)
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered_router.evaluation.results import EvalResult
from tiered_router.evaluation.sweep import SweepPoint, calibrate
from tiered_router.exceptions import PolicyError
from tiered_router.policy import load_policy
from tiered_router.policy._schema import Policy

if TYPE_CHECKING:
    from tiered_router.evaluation.dataset import Dataset

__all__ = [
    "PanelChoice",
    "Target",
    "calibrate_panel",
    "calibrate_policy",
    "load_policy_offline",
    "write_panel",
    "write_threshold",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One calibration target (exactly one field is set).

    Attributes:
        fast_share: Least share of turns answered by the fast tier.
        quality_retained: Least share of the all-frontier quality kept.
        max_cost_per_turn: Most mean cost per turn, US dollars.
        max_cost_share: Most total cost as a share of the all-frontier cost.

    """

    fast_share: float | None = None
    quality_retained: float | None = None
    max_cost_per_turn: float | None = None
    max_cost_share: float | None = None

    def __post_init__(self) -> None:
        values = [
            self.fast_share,
            self.quality_retained,
            self.max_cost_per_turn,
            self.max_cost_share,
        ]
        if sum(v is not None for v in values) != 1:
            raise ValueError("Target: set exactly one of fast_share, quality_retained, max_cost")
        for name in ("fast_share", "quality_retained", "max_cost_share"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= 1:
                raise ValueError(f"Target.{name}: must be in [0, 1] (a share), got {v}")
        if self.max_cost_per_turn is not None and self.max_cost_per_turn < 0:
            raise ValueError(
                f"Target.max_cost_per_turn: must be >= 0, got {self.max_cost_per_turn}"
            )

    @classmethod
    def max_cost(cls, text: str) -> Target:
        """Parse ``--max-cost``: ``40%`` (of the all-frontier cost) or ``0.002`` ($ per turn).

        Raises:
            ValueError: When the text is neither.

        """
        raw = text.strip()
        try:
            if raw.endswith("%"):
                return cls(max_cost_share=float(raw[:-1]) / 100)
            return cls(max_cost_per_turn=float(raw.lstrip("$")))
        except ValueError as exc:
            raise ValueError(
                f"--max-cost {text!r}: give dollars per turn (0.002) or a share of the "
                f"all-frontier cost (40%): {exc}"
            ) from exc

    def describe(self) -> str:
        """Return the target in words."""
        if self.fast_share is not None:
            return f"fast share >= {self.fast_share:.1%}"
        if self.quality_retained is not None:
            return f"quality retained >= {self.quality_retained:.1%}"
        if self.max_cost_share is not None:
            return f"cost <= {self.max_cost_share:.1%} of all-frontier"
        return f"cost <= ${self.max_cost_per_turn:g} per turn"


def calibrate_policy(result: EvalResult, target: Target) -> SweepPoint:
    """Pick the sweep point of ``result`` that meets ``target``.

    Raises:
        CalibrationError: When no threshold meets it (the message says what is reachable).

    """
    s = result.summary
    return calibrate(
        result.points,
        fast_share=target.fast_share,
        quality_retained=target.quality_retained,
        max_cost_per_turn=target.max_cost_per_turn,
        max_cost_share=target.max_cost_share,
        frontier_quality=s.quality_frontier,
        frontier_cost=s.cost_frontier,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelChoice:
    """The draft panel and threshold ``calibrate`` picked.

    Attributes:
        k: Drafts per turn.
        min_agreement: Share of drafts that must agree.
        point: The sweep point at the chosen threshold, with that panel.
        tried: Panels tried (``k`` and ``min_agreement`` pairs).
    """

    k: int
    min_agreement: float
    point: SweepPoint
    tried: int


def calibrate_panel(
    result: EvalResult, target: Target, *, policy: Policy, dataset: Dataset
) -> PanelChoice:
    """Sweep the panel's ``k`` and ``min_agreement`` with the threshold; pick one for ``target``.

    Every ``k`` from 1 to the drafts the data records (at most 9) and every
    ``min_agreement`` in :data:`~tiered_router.evaluation.panel.AGREEMENTS` is replayed
    (without re-running the router: the drafts are re-counted over the same recorded rows);
    each gets its threshold sweep. Among the points that meet the target: the cheapest for a
    quality target, the best quality for a cost or fast-share target.

    Raises:
        CalibrationError: When no panel and threshold meet the target.
        ValueError: When the policy has no ``drafts:`` panel.
    """
    from tiered_router.evaluation.panel import (
        panel_grid,
        panel_models,
        recorded_drafts,
        single_draft,
    )
    from tiered_router.evaluation.runner import Replay, run_rows
    from tiered_router.evaluation.sweep import CalibrationError, sweep

    replay = Replay.bind(
        single_draft(policy),
        dataset,
        fast_model=result.fast_model,
        frontier_model=result.frontier_model,
    )
    spec = panel_models(policy, dataset, replay.fast_model)
    if spec is None:
        raise ValueError("calibrate_panel: the policy has no drafts: panel")
    single = run_rows(replay)
    ks = range(1, max(spec.k, recorded_drafts(dataset, spec)) + 1)
    grid = panel_grid(replay, single, spec, ks=ks)
    best: tuple[tuple[float, float], PanelChoice] | None = None
    reasons: list[str] = []
    for sized, runs, _ in grid:
        try:
            point = calibrate_policy(dataclasses.replace(result, points=tuple(sweep(runs))), target)
        except CalibrationError as exc:
            reasons.append(f"k={sized.k}: {exc}")
            continue
        if target.quality_retained is not None:
            rank = (point.cost, -point.quality)
        else:
            rank = (-point.quality, point.cost)
        choice = PanelChoice(
            k=sized.k, min_agreement=sized.min_agreement, point=point, tried=len(grid)
        )
        if best is None or rank < best[0]:
            best = (rank, choice)
    if best is None:
        raise CalibrationError(f"no panel and threshold meet {target.describe()}: {reasons[-1]}")
    return best[1]


def write_panel(
    path: str | os.PathLike[str], *, threshold: float, k: int, min_agreement: float
) -> str:
    """Set ``scoring.threshold``, ``drafts.k`` and ``drafts.min_agreement`` in a policy file.

    Written with ruamel.yaml (comments kept), then loaded before the file is written.

    Returns:
        The new text of the file.

    Raises:
        PolicyError: When the file is not a valid policy, before or after the edit.
        ImportError: When ruamel.yaml (the ``cli`` extra) is not installed.
    """
    p = Path(path)
    before = p.read_text(encoding="utf-8")
    new = write_threshold(path, threshold)
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()
    data = yaml.load(new)
    drafts = data.get("drafts")
    if not isinstance(drafts, dict):
        drafts = CommentedMap()
        data["drafts"] = drafts
    drafts["k"] = k
    drafts["min_agreement"] = min_agreement
    return dump_checked(yaml, data, p, before=before)


def dump_checked(yaml: Any, data: Any, path: Path, *, before: str) -> str:
    """Write ``data`` (ruamel's round-trip form) to ``path`` if it loads as a policy.

    When it does not, ``path`` is given back its text ``before`` the edit and the
    :class:`PolicyError` says why.

    Returns:
        The text written.
    """
    out = io.StringIO()
    yaml.dump(data, out)
    text = out.getvalue()
    try:
        load_policy_offline(text)
    except PolicyError as exc:
        path.write_text(before, encoding="utf-8")  # leave the file as it was
        raise PolicyError(f"the edited policy would not load: {exc}", file=str(path)) from exc
    path.write_text(text, encoding="utf-8")
    return text


_UNSET_VAR = re.compile(r"environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set")


def load_policy_offline(source: str | os.PathLike[str]) -> Policy:
    """Load a policy for offline use: unset ``${VAR}`` s without a default get a placeholder.

    Evaluation replaces the tier backends by replay backends, so API keys and endpoints
    are not needed; everything else is validated as usual.

    Raises:
        PolicyError: When the policy is invalid for any other reason.

    """
    try:
        return load_policy(source)
    except PolicyError as exc:
        found = [(_UNSET_VAR.search(msg), field) for _, field, msg in exc.problems]
        if not found or not all(m for m, _ in found):
            raise
        missing = {m.group(1): field for m, field in found if m is not None}
    env = dict(os.environ)
    # a placeholder of the field's shape: a Redis URL must look like one to load
    env.update(
        {
            name: "redis://unset-offline:6379/0" if field == "state.url" else "unset-offline"
            for name, field in missing.items()
        }
    )
    return load_policy(source, env=env)


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def write_threshold(path: str | os.PathLike[str], threshold: float) -> str:
    """Set ``scoring.threshold`` in the policy file at ``path``, keeping its comments.

    The new text is loaded with :func:`~tiered_router.policy.load_policy` before it is
    written, so a file is never left invalid.

    Returns:
        The new text of the file.

    Raises:
        PolicyError: When the file is not a valid policy, before or after the edit.
        ImportError: When ruamel.yaml (the ``cli`` extra) is not installed.

    """
    try:
        from ruamel.yaml import YAML
    except ModuleNotFoundError as exc:
        from tiered_router.exceptions import missing_extra

        raise ImportError(
            missing_extra(
                "cli", "writing the threshold keeps the policy's comments with ruamel.yaml"
            )
        ) from exc

    p = Path(path)
    text = p.read_text(encoding="utf-8")
    yaml = YAML()
    try:
        data = yaml.load(text)
    except Exception as exc:  # ruamel raises many YAMLError subclasses and ValueError
        raise PolicyError(f"not valid YAML: {exc}", file=str(p)) from exc
    if not isinstance(data, dict):
        raise PolicyError("a policy is a mapping at the top level", file=str(p))
    value = _format(threshold)
    new = _replace_in_place(text, data, value)
    if new is None:
        new = _round_trip(yaml, data, threshold)
    try:
        load_policy_offline(new)
    except PolicyError as exc:
        raise PolicyError(f"the edited policy would not load: {exc}", file=str(p)) from exc
    p.write_text(new, encoding="utf-8")
    return new


def _format(threshold: float) -> str:
    """Six decimals at most, unless fewer would change the number.

    A threshold that is a row's score, rounded down, would send that row to the other tier.
    """
    text = f"{threshold:.6f}".rstrip("0")
    text = text + "0" if text.endswith(".") else text
    return text if float(text) == threshold else repr(threshold)


def _replace_in_place(text: str, data: dict[str, Any], value: str) -> str | None:
    from ruamel.yaml.comments import CommentedMap

    scoring = data.get("scoring")
    if not isinstance(scoring, CommentedMap) or "threshold" not in scoring:
        return None
    line, col = scoring.lc.value("threshold")
    lines = text.splitlines(keepends=True)
    target = lines[line]
    match = _NUMBER.match(target, col)
    if match is None:
        return None
    lines[line] = target[: match.start()] + value + target[match.end() :]
    return "".join(lines)


def _round_trip(yaml: Any, data: dict[str, Any], threshold: float) -> str:
    from ruamel.yaml.comments import CommentedMap

    scoring = data.get("scoring")
    if scoring is None:
        data["scoring"] = CommentedMap([("threshold", threshold)])
    elif isinstance(scoring, dict):
        scoring["threshold"] = threshold
    else:
        raise PolicyError("scoring: must be a mapping", field="scoring")
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()
