"""The proxy's per-request counts as plain numbers, turned into Prometheus families on a scrape.

The proxy counts about a dozen things per request (the turn, its tokens and cost, the
response, the overhead, the requests in flight). Through ``prometheus_client`` each count
is a label lookup, a check that the metric may be observed, a lock and four Python calls.
In one process nothing reads the numbers until a scrape, so a :class:`Series` keeps them
in a dict by label values and :class:`Families` builds the families when ``/metrics`` is
asked for (``bench_metrics.py``: 6.4 -> 3.1 µs per request, the lock included).

With ``serve --workers N`` the numbers of every worker must be in ``prometheus_client``'s
shared files at once (any worker answers a scrape with the totals of all), so there a
:class:`SharedSeries` writes each count through to a ``prometheus_client`` metric of the
same name, labels and buckets, in its multiprocess mode.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

__all__ = ["Families", "Kind", "Series", "SharedSeries", "series"]

Kind = Literal["counter", "gauge", "histogram"]


class Series:
    """One metric's numbers by label values (one process; read by :class:`Families`).

    :meth:`add` and :meth:`observe` take the series' lock (a sync ``Router`` emits from its
    callers' threads). Series that are counted together share one lock, so that a caller
    counting several things at once takes it once and calls :meth:`add_held` and
    :meth:`observe_held` (as :class:`~tiered_router.server._metrics.Metrics` does per turn).

    Args:
        kind: ``"counter"``, ``"gauge"`` or ``"histogram"``.
        name: The metric's name (a counter's ends in ``_total``).
        help_: Its help text.
        labels: Its label names; every key given to :meth:`add` and :meth:`observe` has
            one value per name, in this order.
        buckets: A histogram's upper bounds, ascending (``+Inf`` is added).
        multiprocess_mode: A gauge's mode under ``--workers N`` (see :class:`SharedSeries`).
        lock: The lock to share (default: a lock of its own).

    Example:
        ```python
        turns = Series("counter", "turns_total", "Turns.", ("tier",))
        turns.add(("fast",))
        ```

    """

    __slots__ = ("_counter", "buckets", "help", "kind", "labels", "lock", "name", "sums", "values")

    def __init__(
        self,
        kind: Kind,
        name: str,
        help_: str,
        labels: tuple[str, ...] = (),
        *,
        buckets: tuple[float, ...] = (),
        multiprocess_mode: str = "livesum",
        lock: threading.Lock | None = None,
    ) -> None:
        if (kind == "histogram") != bool(buckets):
            raise ValueError(f"{name}: buckets are for histograms, and histograms need them")
        self.kind = kind
        self._counter = kind == "counter"
        self.lock = threading.Lock() if lock is None else lock
        self.name = name
        self.help = help_
        self.labels = labels
        self.buckets = buckets
        self.values: dict[tuple[str, ...], Any] = {}
        """Counters and gauges: the value by label values; histograms: per-bucket counts."""
        self.sums: dict[tuple[str, ...], float] = {}
        """Histograms: the sum of the observed values by label values."""
        if not labels:  # an unlabelled metric is shown from the start, as prometheus_client does
            if buckets:
                self.values[()] = [0] * (len(buckets) + 1)
                self.sums[()] = 0.0
            else:
                self.values[()] = 0.0
        self._attach(multiprocess_mode)

    def _attach(self, multiprocess_mode: str) -> None:
        """Set up where the numbers also go (nowhere: they stay in this process)."""

    def add(self, key: tuple[str, ...] = (), amount: float = 1.0) -> None:
        """Add ``amount`` to the counter or gauge of label values ``key`` (a gauge may go down).

        Raises:
            ValueError: A negative amount for a counter (as ``prometheus_client`` raises).

        """
        with self.lock:
            self.add_held(key, amount)

    def add_held(self, key: tuple[str, ...] = (), amount: float = 1.0) -> None:
        """:meth:`add`, for a caller holding :attr:`lock`."""
        if amount < 0 and self._counter:
            raise ValueError(f"{self.name}: a counter only goes up, got {amount}")
        values = self.values
        values[key] = values.get(key, 0.0) + amount

    def observe(self, key: tuple[str, ...], value: float) -> None:
        """Count ``value`` in the histogram of label values ``key`` (``NaN`` in no bucket)."""
        with self.lock:
            self.observe_held(key, value)

    def observe_held(self, key: tuple[str, ...], value: float) -> None:
        """:meth:`observe`, for a caller holding :attr:`lock`."""
        counts = self.values.get(key)
        if counts is None:
            counts = self.values[key] = [0] * (len(self.buckets) + 1)
        if value == value:  # the first bound >= value: "le"; NaN is below no bound
            counts[bisect_left(self.buckets, value)] += 1
        self.sums[key] = self.sums.get(key, 0.0) + value

    def family(self) -> Metric:
        """The numbers as a Prometheus family (what a scrape prints)."""
        labels = list(self.labels)
        with self.lock:  # a copy: counting goes on while the scrape is written
            values: dict[tuple[str, ...], Any] = {
                key: list(v) if isinstance(v, list) else v for key, v in self.values.items()
            }
            sums = dict(self.sums)
        if self.kind == "histogram":
            histogram = HistogramMetricFamily(self.name, self.help, labels=labels)
            bounds = [*(floatToGoString(b) for b in self.buckets), "+Inf"]  # type: ignore[no-untyped-call]
            for key, counts in values.items():
                cumulative, running = [], 0
                for bound, count in zip(bounds, counts, strict=True):
                    running += count
                    cumulative.append((bound, float(running)))
                histogram.add_metric(list(key), cumulative, sums[key])
            return histogram
        family_type = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        family = family_type(self.name, self.help, labels=labels)
        for key, value in values.items():
            family.add_metric(list(key), value)
        return family


class SharedSeries(Series):
    """A :class:`Series` that writes every count through to ``prometheus_client``.

    For ``--workers N``: the metric lives in ``prometheus_client``'s multiprocess files, so
    a scrape of any worker adds up every worker's numbers. Its children are looked up once
    per label values (``labels()`` checks and locks on every call).
    """

    __slots__ = ("_children", "metric")

    def _attach(self, multiprocess_mode: str) -> None:
        """Make the ``prometheus_client`` metric of the same name, labels and buckets."""
        name, help_, labels = self.name, self.help, self.labels
        self.metric: Counter | Gauge | Histogram
        if self.kind == "counter":
            self.metric = Counter(name, help_, labels, registry=None)
        elif self.kind == "gauge":
            self.metric = Gauge(
                name,
                help_,
                labels,
                registry=None,
                multiprocess_mode=multiprocess_mode,  # type: ignore[arg-type]
            )
        else:
            self.metric = Histogram(name, help_, labels, registry=None, buckets=self.buckets)
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, key: tuple[str, ...]) -> Any:
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.metric.labels(*key) if key else self.metric
        return child

    def add_held(self, key: tuple[str, ...] = (), amount: float = 1.0) -> None:
        """Add ``amount`` to the shared counter or gauge of label values ``key``."""
        self._child(key).inc(amount)

    def observe_held(self, key: tuple[str, ...], value: float) -> None:
        """Count ``value`` in the shared histogram of label values ``key``."""
        self._child(key).observe(value)


def series(shared: bool) -> type[Series]:
    """:class:`SharedSeries` with ``--workers N`` (``shared``), else :class:`Series`."""
    return SharedSeries if shared else Series


class Families:
    """A collector of :class:`Series`, for a ``prometheus_client`` registry (one process)."""

    def __init__(self, all_series: Iterable[Series]) -> None:
        self.series = tuple(all_series)

    def collect(self) -> Iterator[Metric]:
        """Yield each series' family, in the order given."""
        for one in self.series:
            yield one.family()
