"""The quality monitor's series on ``/metrics`` (only when the policy has ``monitor:``).

Gauges, per turn kind: ``tiered_router_monitor_judged`` (1 once the kind has a verdict:
enough comparisons to be judged, else 0), ``tiered_router_monitor_matched_share`` and
``tiered_router_monitor_lower_bound`` (exported for a kind only once it is judged: before
that they say nothing about the target, and a 0 would read as "below target"),
``tiered_router_monitor_target`` and ``tiered_router_monitor_enforcing`` (0 / 1). A worker
sets them from each comparison it records (the shadow call's ``metadata.monitor``) and from
``Router.quality()`` when it answers a scrape. Counters, per kind, from the shadow calls'
traces, added up over workers: ``tiered_router_monitor_compared_total``,
``tiered_router_monitor_matched_total`` and
``tiered_router_monitor_shadow_calls_total{kind,outcome}``.

With ``serve --workers N`` each gauge has a prometheus_client multiprocess mode, so the
exported value is defined whichever worker answers: ``matched_share`` and ``lower_bound``
are the lowest of the live workers that have a verdict (``livemin``: the worst worker; on a
shared store every worker reads the same figures), ``judged``, ``enforcing`` and ``target``
the highest of the live workers (``livemax``: some worker has a verdict, some worker is
tightening the kind).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from prometheus_client import Counter, Gauge

__all__ = ["MonitorMetrics"]

_OUTCOMES = ("matched", "mismatched", "not_comparable", "failed", "cancelled")


class _Figures(Protocol):
    @property
    def matched_share(self) -> float: ...
    @property
    def lower_bound(self) -> float: ...
    @property
    def target(self) -> float: ...
    @property
    def state(self) -> str: ...
    @property
    def judged(self) -> bool: ...


class MonitorMetrics:
    """The monitor's gauges and counters (see the module docstring).

    Args:
        kinds: The monitored kinds: their counters and their ``judged`` and ``enforcing``
            gauges start at 0, so a dashboard has them before the first comparison.
    """

    def __init__(self, kinds: Iterable[str]) -> None:
        p = "tiered_router_monitor_"

        def gauge(name: str, help_: str, mode: Literal["livemin", "livemax"]) -> Gauge:
            # a worker's gauges go with it (live*); see the module docstring for the modes
            return Gauge(p + name, help_, ("kind",), registry=None, multiprocess_mode=mode)

        def counter(name: str, help_: str, labels: tuple[str, ...] = ("kind",)) -> Counter:
            return Counter(p + name, help_, labels, registry=None)

        self.matched_share = gauge(
            "matched_share",
            "Share of compared accepted fast answers that matched the frontier's "
            "(judged kinds only; the lowest worker's).",
            "livemin",
        )
        self.lower_bound = gauge(
            "lower_bound",
            "Lower confidence bound (Wilson score) of the matched share "
            "(judged kinds only; the lowest worker's).",
            "livemin",
        )
        self.judged = gauge(
            "judged", "1 once the kind has enough comparisons to be judged, else 0.", "livemax"
        )
        self.target = gauge("target", "The policy's monitor.target.", "livemax")
        self.enforcing = gauge(
            "enforcing", "1 while the kind is tightened (enforcing), else 0.", "livemax"
        )
        self.compared = counter("compared", "Accepted fast answers compared with the frontier's.")
        self.matched = counter("matched", "Compared fast answers that matched the frontier's.")
        self.shadow_calls = counter(
            "shadow_calls", "Shadow calls to the frontier by kind and outcome.", ("kind", "outcome")
        )
        self.all: tuple[Counter | Gauge, ...] = (
            self.matched_share,
            self.lower_bound,
            self.judged,
            self.target,
            self.enforcing,
            self.compared,
            self.matched,
            self.shadow_calls,
        )
        self._children: dict[tuple[object, ...], Any] = {}
        for kind in kinds:
            self._child(self.judged, kind).set(0.0)
            self._child(self.enforcing, kind).set(0.0)
            self._child(self.compared, kind)
            self._child(self.matched, kind)
            for outcome in _OUTCOMES:
                self._child(self.shadow_calls, kind, outcome)

    def _child(self, metric: Counter | Gauge, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def count(self, info: Mapping[str, Any]) -> None:
        """Count one shadow call from its trace's ``metadata.monitor``.

        A compared call's ``info`` carries the kind's figures after it: they set this
        worker's gauges, so every worker's gauges are as current as its last comparison.
        """
        kind = str(info.get("kind", "unknown"))
        outcome = str(info.get("outcome") or "cancelled")  # no outcome: stopped before one
        self._child(self.shadow_calls, kind, outcome).inc()
        if outcome in ("matched", "mismatched"):
            self._child(self.compared, kind).inc()
            if outcome == "matched":
                self._child(self.matched, kind).inc()
        compared = info.get("compared")
        if isinstance(compared, int) and compared > 0 and "lower_bound" in info:
            self._set(
                kind,
                judged=bool(info.get("judged")),
                matched_share=float(info.get("matched", 0)) / compared,
                lower_bound=float(info["lower_bound"]),
                target=float(info.get("target", 0.0)),
                enforcing=info.get("state") == "enforcing",
            )

    def show(self, figures: Mapping[str, _Figures]) -> None:
        """Set the gauges from ``Router.quality()``."""
        for kind, q in figures.items():
            self._set(
                kind,
                judged=q.judged,
                matched_share=q.matched_share,
                lower_bound=q.lower_bound,
                target=q.target,
                enforcing=q.state == "enforcing",
            )

    def _set(
        self,
        kind: str,
        *,
        judged: bool,
        matched_share: float,
        lower_bound: float,
        target: float,
        enforcing: bool,
    ) -> None:
        self._child(self.judged, kind).set(1.0 if judged else 0.0)
        self._child(self.target, kind).set(target)
        self._child(self.enforcing, kind).set(1.0 if enforcing else 0.0)
        if judged:
            # no sample before the first verdict: a child, once made, is written out (with
            # --workers, even at 0), and would drag the workers' minimum down
            # to the traces' six decimals: a scrape's read and a record's agree exactly
            self._child(self.matched_share, kind).set(round(matched_share, 6))
            self._child(self.lower_bound, kind).set(round(lower_bound, 6))
