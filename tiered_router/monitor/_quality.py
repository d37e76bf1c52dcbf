"""What :meth:`tiered_router.Router.quality` returns: one :class:`KindQuality` per kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tiered_router.state import MonitorSnapshot, MonitorState, wilson_lower

__all__ = ["SHADOW_OUTCOMES", "KindQuality", "quality_of"]

SHADOW_OUTCOMES = ("matched", "mismatched", "not_comparable", "failed", "cancelled")
"""How a shadow call ends: compared (``matched`` / ``mismatched``), ``not_comparable``
(neither answer is checkable; a prose turn), ``failed`` (the frontier gave no answer: an
error, a timeout), ``cancelled`` (the process stopped it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KindQuality:
    """One turn kind's live quality figures.

    Example:
        ```python
        q = router.quality()["tools"]
        q.compared, q.matched_share, q.lower_bound, q.state   # 180, 0.989, 0.962, "ok"
        ```

    Attributes:
        kind: ``tools``, ``json``, ``final`` or ``prose``.
        compared: Comparisons in the window (the newest ``monitor.window``), every worker's
            when the state store is shared.
        matched: Those in which the fast answer matched the frontier's.
        matched_share: ``matched / compared`` (0 before the first comparison).
        lower_bound: The Wilson score lower bound of the matched share at
            ``monitor.confidence`` (0 before the first comparison).
        target: ``monitor.target``.
        state: ``ok``, ``below_target`` or ``enforcing``.
        total: Comparisons ever recorded for the kind in the store.
        shadow_calls: Shadow calls this process made for the kind, by outcome.
    """

    kind: str
    compared: int
    matched: int
    matched_share: float
    lower_bound: float
    target: float
    state: MonitorState
    total: int = 0
    shadow_calls: Mapping[str, int] = field(default_factory=dict)


def quality_of(
    snapshot: MonitorSnapshot, *, z: float, target: float, calls: Mapping[str, int]
) -> KindQuality:
    """The :class:`KindQuality` of a store's snapshot."""
    return KindQuality(
        kind=snapshot.kind,
        compared=snapshot.compared,
        matched=snapshot.matched,
        matched_share=snapshot.matched_share,
        lower_bound=wilson_lower(snapshot.matched, snapshot.compared, z),
        target=target,
        state=snapshot.state,
        total=snapshot.total,
        shadow_calls=dict(calls),
    )
