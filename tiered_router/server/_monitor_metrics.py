"""The quality monitor's series on ``/metrics`` (only when the policy has ``monitor:``).

Gauges, per turn kind, set from ``Router.quality()`` on each scrape:
``tiered_router_monitor_matched_share``, ``tiered_router_monitor_lower_bound``,
``tiered_router_monitor_target`` and ``tiered_router_monitor_enforcing`` (0 / 1). Counters,
per kind, from the shadow calls' traces (``metadata.monitor``), added up over workers:
``tiered_router_monitor_compared_total``, ``tiered_router_monitor_matched_total`` and
``tiered_router_monitor_shadow_calls_total{kind,outcome}``. With ``--workers N`` a gauge
shows the most recent value any worker set (on a shared store every worker reads the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

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


class MonitorMetrics:
    """The monitor's gauges and counters (see the module docstring).

    Args:
        kinds: The monitored kinds: their series start at 0, so a dashboard has them
            before the first comparison.
    """

    def __init__(self, kinds: Iterable[str]) -> None:
        p = "tiered_router_monitor_"

        def gauge(name: str, help_: str) -> Gauge:
            return Gauge(p + name, help_, ("kind",), registry=None, multiprocess_mode="mostrecent")

        def counter(name: str, help_: str, labels: tuple[str, ...] = ("kind",)) -> Counter:
            return Counter(p + name, help_, labels, registry=None)

        self.matched_share = gauge(
            "matched_share", "Share of compared accepted fast answers that matched the frontier's."
        )
        self.lower_bound = gauge(
            "lower_bound", "Lower confidence bound (Wilson score) of the matched share."
        )
        self.target = gauge("target", "The policy's monitor.target.")
        self.enforcing = gauge("enforcing", "1 while the kind is tightened (enforcing), else 0.")
        self.compared = counter("compared", "Accepted fast answers compared with the frontier's.")
        self.matched = counter("matched", "Compared fast answers that matched the frontier's.")
        self.shadow_calls = counter(
            "shadow_calls", "Shadow calls to the frontier by kind and outcome.", ("kind", "outcome")
        )
        self.all: tuple[Counter | Gauge, ...] = (
            self.matched_share,
            self.lower_bound,
            self.target,
            self.enforcing,
            self.compared,
            self.matched,
            self.shadow_calls,
        )
        self._children: dict[tuple[object, ...], Any] = {}
        for kind in kinds:
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
        """Count one shadow call from its trace's ``metadata.monitor``."""
        kind = str(info.get("kind", "unknown"))
        outcome = str(info.get("outcome") or "cancelled")  # no outcome: stopped before one
        self._child(self.shadow_calls, kind, outcome).inc()
        if outcome in ("matched", "mismatched"):
            self._child(self.compared, kind).inc()
            if outcome == "matched":
                self._child(self.matched, kind).inc()

    def show(self, figures: Mapping[str, _Figures]) -> None:
        """Set the gauges from ``Router.quality()``."""
        for kind, q in figures.items():
            self._child(self.matched_share, kind).set(q.matched_share)
            self._child(self.lower_bound, kind).set(q.lower_bound)
            self._child(self.target, kind).set(q.target)
            self._child(self.enforcing, kind).set(1.0 if q.state == "enforcing" else 0.0)
