"""Prometheus metrics of the proxy, kept and exposed by ``prometheus_client``.

:class:`Metrics` is fed by the router as a trace sink (one call per routed turn) and by the
HTTP layer (status codes, overhead, streams). With one process the numbers live in memory;
with ``serve --workers N`` the server points ``PROMETHEUS_MULTIPROC_DIR`` at a directory of
its own and ``prometheus_client``'s multiprocess mode adds up every worker's numbers on each
scrape (:mod:`tiered_router.server._workers`).

Nothing secret is ever a label: labels are tier, backend names, check names, error types,
escalation reasons and HTTP status codes.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tiered_router.server._monitor_metrics import MonitorMetrics
    from tiered_router.trace import Trace

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
        self.turns = self._counter(
            p + "requests_total", "Routed turns by serving tier.", ("tier", "escalated")
        )
        self.escalations = self._counter(
            p + "escalations_total", "Escalations by reason.", ("reason",)
        )
        self.gate_failures = self._counter(
            p + "gate_failures_total", "Drafts failing a gate check, by check.", ("check",)
        )
        self.backend_errors = self._counter(
            p + "backend_errors_total", "Failed backend calls.", ("backend", "error")
        )
        self.cost = self._counter(
            p + "cost_usd_total", "Cost of backend calls, US dollars.", ("backend",)
        )
        self.tokens = self._counter(p + "tokens_total", "Tokens billed.", ("backend", "direction"))
        self.cost_all_frontier = self._counter(
            p + "cost_all_frontier_usd_total",
            "What the routed turns would have cost on the frontier tier: each answer's tokens "
            "at the frontier backend's prices (an estimate: another model writes other "
            "tokens), US dollars. Cost saved is this minus cost_usd_total.",
        )
        self.responses = self._counter(
            p + "http_responses_total", "HTTP responses by path and status.", ("path", "code")
        )
        self.interrupted = self._counter(
            p + "stream_interruptions_total", "Streams ended with an in-band error."
        )
        self.state_fallbacks = self._counter(
            p + "state_fallbacks_total",
            "State-store operations answered from in-process state because the shared store "
            "failed.",
        )
        self.task_reads_saved = self._counter(
            p + "state_task_reads_saved_total",
            "Task turns that used this process's copy of the task's totals instead of reading "
            "the shared store (state.task_cache_s).",
        )
        self.traces_dropped = self._counter(
            p + "traces_dropped_total", "Traces a trace sink could not write."
        )
        self.concurrent_calls = self._counter(
            p + "concurrent_calls_total",
            "Calls a turn had in flight at once, by role (draft, hedge) and outcome "
            "(answered, failed, cancelled).",
            ("role", "outcome"),
        )
        self.panels = self._counter(
            p + "panels_total",
            "Draft panels by result (agreed, disagreed, not_comparable).",
            ("result",),
        )
        # known label values start at 0, so a scrape shows the series before the first panel
        for result in ("agreed", "disagreed", "not_comparable"):
            self.panels.labels(result)
        for role in ("draft", "hedge"):
            for outcome in ("answered", "failed", "cancelled"):
                self.concurrent_calls.labels(role, outcome)
        self.latency = Histogram(
            p + "turn_latency_seconds",
            "Wall time of routed turns.",
            ("tier",),
            registry=None,
            buckets=_LATENCY_BUCKETS,
        )
        self.overhead = Histogram(
            p + "overhead_seconds",
            "Time the proxy added on top of upstream calls, per routed request.",
            registry=None,
            buckets=_OVERHEAD_BUCKETS,
        )
        self.in_flight = Gauge(
            p + "in_flight", "Requests being served.", registry=None, multiprocess_mode="livesum"
        )
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
        self._children: dict[tuple[object, ...], Any] = {}
        self._tracked: list[tuple[Counter, Callable[[], float], list[float]]] = []
        self._metrics: tuple[Counter | Gauge | Histogram, ...] = (
            *(v for v in vars(self).values() if isinstance(v, Counter)),
            self.latency,
            self.overhead,
            self.in_flight,
            self.breaker_state,
        )
        # series whose labels are known up front start at 0, so a scrape shows them before
        # the first panel or hedge (a multiprocess scrape shows only series that exist)
        for result in ("agreed", "disagreed", "not_comparable"):
            self._child(self.panels, result)
        for role in ("draft", "hedge"):
            for outcome in ("answered", "failed", "cancelled"):
                self._child(self.concurrent_calls, role, outcome)
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

    def _counter(self, name: str, help_: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, help_, labels, registry=None)

    def _child(self, counter: Counter | Histogram, *values: str) -> Any:
        # prometheus_client's labels() checks and locks on every call; the children are
        # few (tiers, backends, checks, status codes), so each is looked up once
        key = (counter, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*values)
        return child

    def track(self, counter: Counter, read: Callable[[], float]) -> None:
        """Feed ``counter`` from a running total kept elsewhere (read after each turn).

        Args:
            counter: An unlabelled counter of these metrics.
            read: Returns the running total (never decreasing).

        """
        self._tracked.append((counter, read, [0.0]))

    def track_dropped(self, sinks: Iterable[object]) -> None:
        """Count the traces dropped by every sink that counts them (:class:`CountsDropped`)."""
        counting = [sink for sink in sinks if isinstance(sink, CountsDropped)]
        if counting:
            self.track(self.traces_dropped, lambda: float(sum(s.dropped for s in counting)))

    def sync(self) -> None:
        """Bring the tracked counters up to their running totals."""
        for counter, read, seen in self._tracked:
            now = read()
            if now > seen[0]:
                counter.inc(now - seen[0])
                seen[0] = now

    def emit(self, trace: Trace) -> None:
        """Count one finished turn (the router calls this as a trace sink).

        A shadow run (``metadata.shadow``) is not a turn: only its calls, cost and tokens
        are counted.
        """
        child = self._child
        tier = trace.tier or "none"
        shadow = trace.metadata.get("shadow") is True
        if shadow and self.monitor is not None and "monitor" in trace.metadata:
            self.monitor.count(trace.metadata["monitor"])
        if not shadow:
            child(self.turns, tier, "true" if trace.escalated else "false").inc()
        for reason in trace.escalations:
            child(self.escalations, reason).inc()
        panel = trace.panel
        if panel is not None:
            comparable = panel.get("comparable", True)
            result = (
                "agreed" if panel.get("agreed") else "disagreed" if comparable else "not_comparable"
            )
            child(self.panels, result).inc()
        for attempt in trace.attempts:
            if attempt.role != "call":
                outcome = (
                    "cancelled" if attempt.cancelled else "failed" if attempt.error else "answered"
                )
                child(self.concurrent_calls, attempt.role, outcome).inc()
            verdict = attempt.verdict
            if verdict is not None:
                for failure in verdict.failures:
                    child(self.gate_failures, failure.check).inc()
            backend = attempt.backend
            if attempt.error is not None:
                child(self.backend_errors, backend, str(attempt.error.get("type", "error"))).inc()
            if attempt.cost:
                child(self.cost, backend).inc(attempt.cost)
            usage = attempt.usage
            if usage.input_tokens:
                child(self.tokens, backend, "input").inc(usage.input_tokens)
            if usage.output_tokens:
                child(self.tokens, backend, "output").inc(usage.output_tokens)
        if not shadow:
            child(self.latency, tier).observe(trace.latency_s)
            if self.frontier_cost is not None:
                self.cost_all_frontier.inc(self.frontier_cost(trace))
        if self._tracked:
            self.sync()

    def breakers(self, states: Mapping[str, str]) -> None:
        """Set each backend's breaker state (``{backend: "closed" | "open" | "half_open"}``)."""
        for backend, current in states.items():
            for state in _BREAKER_STATES:
                self.breaker_state.labels(backend, state).set(1.0 if state == current else 0.0)

    def response(self, path: str, status: int) -> None:
        """Count one HTTP response."""
        self._child(self.responses, path, str(status)).inc()

    def close(self) -> None:
        """Finish up at shutdown (the multiprocess files stay for the other workers)."""

    def _source(self) -> Collector:
        if self.multiprocess_dir is None:
            registry = CollectorRegistry(auto_describe=False)
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
