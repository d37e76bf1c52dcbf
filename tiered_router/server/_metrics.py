"""Prometheus metrics of the proxy, exposed by ``prometheus_client``.

:class:`Metrics` is fed by the router as a trace sink (one call per routed turn) and by the
HTTP layer (status codes, overhead, streams). With one process the numbers live in memory,
as plain numbers (:mod:`tiered_router.server._series`) that a scrape turns into families;
with ``serve --workers N`` the server points ``PROMETHEUS_MULTIPROC_DIR`` at a directory of
its own, every count is written through to ``prometheus_client``, and its multiprocess mode
adds up every worker's numbers on each scrape (:func:`tiered_router.server.serve`).

Nothing secret is ever a label: labels are tier, backend names, check names, error types,
escalation reasons and HTTP status codes.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from tiered_router.server._series import Families, Kind, Series, series

if TYPE_CHECKING:
    from tiered_router.server._monitor_metrics import MonitorMetrics
    from tiered_router.trace import Attempt, Trace

__all__ = ["CONTENT_TYPE", "MULTIPROC_DIR_ENV", "CountsDropped", "Metrics", "worker_metrics"]

logger = logging.getLogger("tiered_router.server")

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess directory (set by ``serve --workers N``)."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 1.0)
_BREAKER_STATES = ("closed", "open", "half_open")
_SIGNIFICANT = 12  # digits kept on /metrics: 0.1 + 0.2 dollars print as 0.3


@runtime_checkable
class CountsDropped(Protocol):
    """A trace sink that counts the traces it could not write (fed to ``traces_dropped``)."""

    @property
    def dropped(self) -> int:
        """Traces this sink has dropped so far."""
        ...


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


class _Exposed:
    """The scrape's collector: values rounded to 12 digits, no ``_created`` samples.

    One process and ``--workers N`` print the same series: the multiprocess collector has
    no ``_created`` samples, so the in-memory one leaves them out too.
    """

    def __init__(self, source: Collector) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            family.samples = [
                sample._replace(value=float(f"{sample.value:.{_SIGNIFICANT}g}"))
                for sample in family.samples
                if not sample.name.endswith("_created")
            ]
            yield family


class Metrics:
    """The proxy's metrics; also a :class:`~tiered_router.TraceSink` (``emit``).

    Example:
        ```python
        metrics = Metrics()
        router = Router(policy, sinks=[metrics])
        text = metrics.render()     # Prometheus text format
        ```

    Args:
        multiprocess_dir: prometheus_client's multiprocess directory: a scrape adds up the
            numbers of every process writing there (``None``: this process's numbers).

    """

    def __init__(self, *, multiprocess_dir: str | None = None) -> None:
        p = "tiered_router_"
        self.multiprocess_dir = multiprocess_dir
        shared = multiprocess_dir is not None
        kind_of_series = series(shared)
        self._lock = threading.Lock()
        """One lock for every series: a turn is counted under it once (see :meth:`emit`)."""

        def make(
            kind: Kind, name: str, help_: str, labels: tuple[str, ...] = (), **more: Any
        ) -> Series:
            return kind_of_series(kind, name, help_, labels, lock=self._lock, **more)

        def counter(name: str, help_: str, labels: tuple[str, ...] = ()) -> Series:
            return make("counter", p + name, help_, labels)

        self.turns = counter(
            "requests_total", "Routed turns by serving tier.", ("tier", "escalated")
        )
        self.escalations = counter("escalations_total", "Escalations by reason.", ("reason",))
        self.gate_failures = counter(
            "gate_failures_total", "Drafts failing a gate check, by check.", ("check",)
        )
        self.backend_errors = counter(
            "backend_errors_total", "Failed backend calls.", ("backend", "error")
        )
        self.cost = counter("cost_usd_total", "Cost of backend calls, US dollars.", ("backend",))
        self.tokens = counter("tokens_total", "Tokens billed.", ("backend", "direction"))
        self.cost_all_frontier = counter(
            "cost_all_frontier_usd_total",
            "What the routed turns would have cost on the frontier tier: each answer's tokens "
            "at the frontier backend's prices (an estimate: another model writes other "
            "tokens), US dollars. Cost saved is this minus cost_usd_total.",
        )
        self.responses = counter(
            "http_responses_total", "HTTP responses by path and status.", ("path", "code")
        )
        self.interrupted = counter(
            "stream_interruptions_total", "Streams ended with an in-band error."
        )
        self.state_fallbacks = counter(
            "state_fallbacks_total",
            "State-store operations answered from in-process state because the shared store "
            "failed.",
        )
        self.task_reads_saved = counter(
            "state_task_reads_saved_total",
            "Task turns that used this process's copy of the task's totals instead of reading "
            "the shared store (state.task_cache_s).",
        )
        self.traces_dropped = counter(
            "traces_dropped_total", "Traces a trace sink could not write."
        )
        self.concurrent_calls = counter(
            "concurrent_calls_total",
            "Calls a turn had in flight at once, by role (draft, hedge) and outcome "
            "(answered, failed, cancelled).",
            ("role", "outcome"),
        )
        self.panels = counter(
            "panels_total",
            "Draft panels by result (agreed, disagreed, not_comparable).",
            ("result",),
        )
        self.latency = make(
            "histogram",
            p + "turn_latency_seconds",
            "Wall time of routed turns.",
            ("tier",),
            buckets=_LATENCY_BUCKETS,
        )
        self.overhead = make(
            "histogram",
            p + "overhead_seconds",
            "Time the proxy added on top of upstream calls, per routed request.",
            buckets=_OVERHEAD_BUCKETS,
        )
        self.in_flight = make("gauge", p + "in_flight", "Requests being served.")
        self.breaker_state = Gauge(
            p + "breaker_state",
            "Circuit breaker of each backend: 1 for its state (closed, open, half_open), 0 "
            "for the others; read on each scrape (with --workers, the highest any worker "
            "read).",
            ("backend", "state"),
            registry=None,
            multiprocess_mode="livemax",
        )
        self.frontier_cost: Callable[[Trace], float] | None = None
        """What a turn would have cost on the frontier tier (set by the app; ``None``: 0)."""
        self._tracked: list[tuple[Series, Callable[[], float], list[float]]] = []
        self._series: tuple[Series, ...] = tuple(
            v for v in vars(self).values() if isinstance(v, Series)
        )
        self._metrics: tuple[Collector, ...] = (self.breaker_state,)
        # series whose labels are known up front start at 0, so a scrape shows them before
        # the first panel or hedge (a multiprocess scrape shows only series that exist)
        for result in ("agreed", "disagreed", "not_comparable"):
            self.panels.add((result,), 0.0)
        for role in ("draft", "hedge"):
            for outcome in ("answered", "failed", "cancelled"):
                self.concurrent_calls.add((role, outcome), 0.0)
        self.monitor: MonitorMetrics | None = None
        """The quality monitor's series (:meth:`watch_monitor`), when the policy has one."""
        self.workers: Gauge | None = None
        """Worker processes alive (each sets 1; with ``multiprocess_dir`` only)."""
        if multiprocess_dir is not None:
            self.workers = Gauge(
                p + "workers",
                "Worker processes alive.",
                registry=None,
                multiprocess_mode="livesum",
            )
            self.workers.set(1)

    def watch_monitor(self, kinds: Iterable[str]) -> MonitorMetrics:
        """Add the quality monitor's series for ``kinds`` (``monitor:``; see its module)."""
        from tiered_router.server._monitor_metrics import MonitorMetrics

        self.monitor = MonitorMetrics(kinds)
        self._metrics = (*self._metrics, *self.monitor.all)
        return self.monitor

    def track(self, counter: Series, read: Callable[[], float]) -> None:
        """Feed ``counter`` from a running total kept elsewhere (read after each turn).

        Args:
            counter: An unlabelled counter of these metrics (its running total is read
                on each scrape, and after each turn with ``--workers N``).
            read: Returns the running total (never decreasing).

        """
        self._tracked.append((counter, read, [0.0]))

    def track_dropped(self, sinks: Iterable[object]) -> None:
        """Count the traces dropped by every sink that counts them (:class:`CountsDropped`)."""
        counting = [sink for sink in sinks if isinstance(sink, CountsDropped)]
        if counting:
            self.track(self.traces_dropped, lambda: float(sum(s.dropped for s in counting)))

    def sync(self) -> None:
        """Bring the tracked counters up to their running totals (under the series' lock)."""
        with self._lock:  # two threads must not both add what one total grew by
            for counter, read, seen in self._tracked:
                now = read()
                if now > seen[0]:
                    counter.add_held((), now - seen[0])
                    seen[0] = now

    def emit(self, trace: Trace) -> None:
        """Count one finished turn (the router calls this as a trace sink).

        A shadow run (``metadata.shadow``) is not a turn: only its calls, cost and tokens
        are counted. The turn is counted under the series' one lock, taken once.
        """
        tier = trace.tier or "none"
        shadow = trace.metadata.get("shadow") is True
        if shadow and self.monitor is not None and "monitor" in trace.metadata:
            self.monitor.count(trace.metadata["monitor"])
        panel = trace.panel
        if panel is not None:
            comparable = panel.get("comparable", True)
            agreed = panel.get("agreed")
            panel_result = "agreed" if agreed else "disagreed" if comparable else "not_comparable"
        frontier_cost = None
        if not shadow and self.frontier_cost is not None:
            frontier_cost = self.frontier_cost(trace)
        with self._lock:
            if not shadow:
                self.turns.add_held((tier, "true" if trace.escalated else "false"))
            for reason in trace.escalations:
                self.escalations.add_held((reason,))
            if panel is not None:
                self.panels.add_held((panel_result,))
            for attempt in trace.attempts:
                self._attempt(attempt)
            if not shadow:
                self.latency.observe_held((tier,), trace.latency_s)
            if frontier_cost is not None and frontier_cost > 0:
                self.cost_all_frontier.add_held((), frontier_cost)
        if self._tracked and self.multiprocess_dir is not None:
            self.sync()  # one process: read on each scrape (render)

    def _attempt(self, attempt: Attempt) -> None:
        """Count one call of a turn (the caller holds the lock)."""
        if attempt.role != "call":
            cancelled, error = attempt.cancelled, attempt.error
            outcome = "cancelled" if cancelled else "failed" if error else "answered"
            self.concurrent_calls.add_held((attempt.role, outcome))
        verdict = attempt.verdict
        if verdict is not None:
            for failure in verdict.failures:
                self.gate_failures.add_held((failure.check,))
        backend = attempt.backend
        if attempt.error is not None:
            self.backend_errors.add_held((backend, str(attempt.error.get("type", "error"))))
        # counters only go up: a negative (or missing) count is not counted
        cost = attempt.cost or 0.0
        if cost > 0:
            self.cost.add_held((backend,), cost)
        usage = attempt.usage
        tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
        if tokens_in > 0:
            self.tokens.add_held((backend, "input"), tokens_in)
        if tokens_out > 0:
            self.tokens.add_held((backend, "output"), tokens_out)

    def breakers(self, states: Mapping[str, str]) -> None:
        """Set each backend's breaker state (``{backend: "closed" | "open" | "half_open"}``)."""
        for backend, current in states.items():
            for state in _BREAKER_STATES:
                self.breaker_state.labels(backend, state).set(1.0 if state == current else 0.0)

    def response(self, path: str, status: int) -> None:
        """Count one HTTP response."""
        self.responses.add((path, str(status)))

    def close(self) -> None:
        """Finish up at shutdown (the multiprocess files stay for the other workers)."""

    def _source(self) -> Collector:
        if self.multiprocess_dir is None:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(Families(self._series))
            for metric in self._metrics:
                registry.register(metric)
            return registry
        # a worker that died keeps its counts but leaves the live gauges (in flight, alive)
        for path in glob.glob(os.path.join(self.multiprocess_dir, "gauge_live*_*.db")):
            pid = path.rsplit("_", 1)[1].removesuffix(".db")
            if pid.isdigit() and not _alive(int(pid)):
                mark_process_dead(int(pid), self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return MultiProcessCollector(None, self.multiprocess_dir)  # type: ignore[no-untyped-call]

    def render(self) -> str:
        """Return every metric in the Prometheus text format (every worker's, added up)."""
        self.sync()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Exposed(self._source()))
        return generate_latest(registry).decode()


def worker_metrics() -> Metrics:
    """Return this process's :class:`Metrics`: summed over workers when ``serve`` set a directory.

    ``PROMETHEUS_MULTIPROC_DIR`` must be set before ``prometheus_client`` is first imported
    (it picks where values live then); a process where it came later keeps its numbers in
    memory and serves only its own.
    """
    from prometheus_client import values

    directory = os.environ.get(MULTIPROC_DIR_ENV)
    if not directory:
        return Metrics()
    if values.ValueClass is values.MutexValue:
        logger.warning(
            "%s was set after prometheus_client was imported: /metrics shows this process only",
            MULTIPROC_DIR_ENV,
        )
        return Metrics()
    return Metrics(multiprocess_dir=directory)
