"""The quality monitor over time, read back from traces (``tiered-router monitor``).

Every shadow call of the monitor leaves a trace (rule ``monitor.shadow``) whose
``metadata.monitor`` says the turn kind, the outcome (``matched``, ``mismatched``,
``not_comparable``, ``failed``) and, for a comparison, the kind's figures right after it as
the state store held them (every worker's, on a shared store): compared count in the window,
matched count, lower bound, state, and a change of state when that record made one.
:func:`monitor_timeline` reads them in file order; :func:`timeline_rows` cuts the timeline
into stretches of ``every`` shadow calls per kind, the figures at the end of each.

Example:
    ```python
    timeline = monitor_timeline(["traces.jsonl"])
    for row in timeline_rows(timeline, every=50):
        print(row.kind, row.calls, row.matched_share, row.lower_bound, row.state)
    ```
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiered_router.evaluation.traces import _read_traces

__all__ = ["MonitorPoint", "MonitorRow", "monitor_timeline", "timeline_rows"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorPoint:
    """One shadow call of the monitor, as its trace recorded it.

    Attributes:
        where: ``file:line`` of the trace.
        kind: The turn kind.
        outcome: ``matched``, ``mismatched``, ``not_comparable``, ``failed`` or ``cancelled``.
        compared: The kind's comparisons in the window after this one (``None``: no
            comparison was recorded by this call).
        matched: Those that matched.
        lower_bound: The matched share's lower bound after it.
        target: The policy's target.
        state: The kind's state after it.
        change: ``ok->enforcing`` and the like, when this record changed the state.
        explore: Whether the turn was one of an enforcing kind's exploring turns.
    """

    where: str
    kind: str
    outcome: str
    compared: int | None = None
    matched: int | None = None
    lower_bound: float | None = None
    target: float | None = None
    state: str | None = None
    change: str | None = None
    explore: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorRow:
    """A kind's figures at the end of a stretch of shadow calls.

    Attributes:
        kind: The turn kind.
        calls: Shadow calls of the kind so far (the end of the stretch).
        outcomes: The stretch's shadow calls by outcome.
        compared: Comparisons in the window (the last recorded).
        matched_share: Matched over compared in the window.
        lower_bound: Its lower bound.
        target: The target.
        state: The state.
        changes: Changes of state within the stretch.
    """

    kind: str
    calls: int
    outcomes: Mapping[str, int] = field(default_factory=dict)
    compared: int = 0
    matched_share: float = 0.0
    lower_bound: float = 0.0
    target: float | None = None
    state: str = "ok"
    changes: tuple[str, ...] = ()


def _point(where: str, info: Mapping[str, Any]) -> MonitorPoint:
    def num(key: str) -> float | None:
        value = info.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    compared, matched = num("compared"), num("matched")
    return MonitorPoint(
        where=where,
        kind=str(info.get("kind", "unknown")),
        outcome=str(info.get("outcome") or "cancelled"),
        compared=None if compared is None else int(compared),
        matched=None if matched is None else int(matched),
        lower_bound=num("lower_bound"),
        target=num("target"),
        state=str(info["state"]) if info.get("state") is not None else None,
        change=str(info["change"]) if info.get("change") is not None else None,
        explore=info.get("explore") is True,
    )


def monitor_timeline(paths: Iterable[str | os.PathLike[str]]) -> list[MonitorPoint]:
    """Every monitor shadow call in the JSONL trace files, in file order.

    Raises:
        DatasetError: A file is missing, or a line is not JSON (named ``file:line``).
    """
    points: list[MonitorPoint] = []
    for where, trace in _read_traces(paths):
        if not isinstance(trace, dict):
            continue
        metadata = trace.get("metadata")
        info = metadata.get("monitor") if isinstance(metadata, dict) else None
        if isinstance(info, dict):
            points.append(_point(where, info))
    return points


def timeline_rows(points: Sequence[MonitorPoint], *, every: int = 50) -> list[MonitorRow]:
    """The figures per kind at the end of every ``every`` shadow calls of that kind.

    The last, shorter stretch of each kind ends the list; rows come in the order their
    stretches end.
    """
    if every < 1:
        raise ValueError("every must be at least 1")
    rows: list[MonitorRow] = []
    seen: dict[str, int] = {}
    stretch: dict[str, Counter[str]] = {}
    changes: dict[str, list[str]] = {}
    last: dict[str, MonitorPoint] = {}
    for point in points:
        kind = point.kind
        seen[kind] = seen.get(kind, 0) + 1
        stretch.setdefault(kind, Counter())[point.outcome] += 1
        if point.change:
            changes.setdefault(kind, []).append(f"{point.change} ({point.where})")
        if point.compared is not None:
            last[kind] = point
        if seen[kind] % every == 0:
            rows.append(_row(kind, seen[kind], stretch.pop(kind), changes.pop(kind, []), last))
    for kind, outcomes in stretch.items():
        rows.append(_row(kind, seen[kind], outcomes, changes.pop(kind, []), last))
    return rows


def _row(
    kind: str,
    calls: int,
    outcomes: Counter[str],
    changes: list[str],
    last: Mapping[str, MonitorPoint],
) -> MonitorRow:
    point = last.get(kind)
    compared = point.compared or 0 if point is not None else 0
    matched = point.matched or 0 if point is not None else 0
    return MonitorRow(
        kind=kind,
        calls=calls,
        outcomes=dict(outcomes),
        compared=compared,
        matched_share=matched / compared if compared else 0.0,
        lower_bound=point.lower_bound or 0.0 if point is not None else 0.0,
        target=point.target if point is not None else None,
        state=point.state or "ok" if point is not None else "ok",
        changes=tuple(changes),
    )
