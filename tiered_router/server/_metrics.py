"""Prometheus metrics of the proxy, in the text exposition format (no client library).

:class:`Metrics` is fed by the router as a trace sink (one call per routed turn) and by the
HTTP layer (status codes, overhead, streams). Values live in plain dicts: the proxy serves
from one event loop per process, so every update runs on one thread. With several workers
:mod:`tiered_router.server._workers` adds up every worker's numbers on each scrape.

Nothing secret is ever a label: labels are tier, backend names, check names, error types,
escalation reasons and HTTP status codes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiered_router.trace import Trace

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 1.0)

_Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: _Labels) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Counter:
    def __init__(self, name: str, help_: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.labels = name, help_, tuple(labels)
        self.values: dict[_Labels, float] = {}

    def inc(self, *values: str, by: float = 1.0) -> None:
        self.values[values] = self.values.get(values, 0.0) + by

    def render(self, kind: str = "counter") -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {kind}"]
        for key, value in sorted(self.values.items()):
            out.append(f"{self.name}{_labels(self.labels, key)} {_number(value)}")
        return out


class _Histogram:
    def __init__(
        self, name: str, help_: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> None:
        self.name, self.help, self.labels = name, help_, tuple(labels)
        self.buckets = tuple(buckets)
        self.series: dict[_Labels, list[float]] = {}  # bucket counts..., sum, count

    def observe(self, value: float, *values: str) -> None:
        row = self.series.get(values)
        if row is None:
            row = self.series[values] = [0.0] * (len(self.buckets) + 2)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                row[i] += 1
        row[-2] += value
        row[-1] += 1

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, row in sorted(self.series.items()):
            names = (*self.labels, "le")
            for i, bound in enumerate((*self.buckets, math.inf)):
                count = row[i] if i < len(self.buckets) else row[-1]
                labels = _labels(names, (*key, _number(bound)))
                out.append(f"{self.name}_bucket{labels} {_number(count)}")
            out.append(f"{self.name}_sum{_labels(self.labels, key)} {_number(row[-2])}")
            out.append(f"{self.name}_count{_labels(self.labels, key)} {_number(row[-1])}")
        return out


class Metrics:
    """The proxy's metrics; also a :class:`~tiered_router.TraceSink` (``emit``).

    Example:
        ```python
        metrics = Metrics()
        router = Router(policy, sinks=[metrics])
        text = metrics.render()     # Prometheus text format
        ```

    """

    def __init__(self) -> None:
        p = "tiered_router_"
        self.turns = _Counter(
            p + "requests_total", "Routed turns by serving tier.", ("tier", "escalated")
        )
        self.escalations = _Counter(p + "escalations_total", "Escalations by reason.", ("reason",))
        self.gate_failures = _Counter(
            p + "gate_failures_total", "Drafts failing a gate check, by check.", ("check",)
        )
        self.backend_errors = _Counter(
            p + "backend_errors_total", "Failed backend calls.", ("backend", "error")
        )
        self.cost = _Counter(
            p + "cost_usd_total", "Cost of backend calls, US dollars.", ("backend",)
        )
        self.tokens = _Counter(p + "tokens_total", "Tokens billed.", ("backend", "direction"))
        self.latency = _Histogram(
            p + "turn_latency_seconds", "Wall time of routed turns.", _LATENCY_BUCKETS, ("tier",)
        )
        self.overhead = _Histogram(
            p + "overhead_seconds",
            "Time the proxy added on top of upstream calls (JSON answers).",
            _OVERHEAD_BUCKETS,
        )
        self.responses = _Counter(
            p + "http_responses_total", "HTTP responses by path and status.", ("path", "code")
        )
        self.interrupted = _Counter(
            p + "stream_interruptions_total", "Streams ended with an in-band error.", ()
        )
        self.state_fallbacks = _Counter(
            p + "state_fallbacks_total",
            "State-store operations answered from in-process state because the shared store "
            "failed.",
            (),
        )
        self.task_reads_saved = _Counter(
            p + "state_task_reads_saved_total",
            "Task turns that used this process's copy of the task's totals instead of reading "
            "the shared store (state.task_cache_s).",
            (),
        )
        self.concurrent_calls = _Counter(
            p + "concurrent_calls_total",
            "Calls a turn had in flight at once, by role (draft, hedge) and outcome "
            "(answered, failed, cancelled).",
            ("role", "outcome"),
        )
        self.panels = _Counter(
            p + "panels_total",
            "Draft panels by result (agreed, disagreed, not_comparable).",
            ("result",),
        )
        self.in_flight = 0
        self.collectors: list[Callable[[Metrics], None]] = []
        """Called before each render and snapshot, to copy in numbers kept elsewhere."""

    def collect(self) -> None:
        """Run the collectors (numbers kept elsewhere, such as the state store's fallbacks)."""
        for collector in self.collectors:
            collector(self)

    def emit(self, trace: Trace) -> None:
        """Count one finished turn (the router calls this as a trace sink).

        A shadow run (``metadata.shadow``) is not a turn: only its calls, cost and tokens
        are counted.
        """
        tier = trace.tier or "none"
        shadow = trace.metadata.get("shadow") is True
        if not shadow:
            self.turns.inc(tier, "true" if trace.escalated else "false")
        for reason in trace.escalations:
            self.escalations.inc(reason)
        panel = trace.panel
        if panel is not None:
            comparable = panel.get("comparable", True)
            self.panels.inc(
                "agreed" if panel.get("agreed") else "disagreed" if comparable else "not_comparable"
            )
        for attempt in trace.attempts:
            if attempt.role != "call":
                outcome = (
                    "cancelled" if attempt.cancelled else "failed" if attempt.error else "answered"
                )
                self.concurrent_calls.inc(attempt.role, outcome)
            verdict = attempt.verdict
            if verdict is not None:
                for failure in verdict.failures:
                    self.gate_failures.inc(failure.check)
            if attempt.error is not None:
                self.backend_errors.inc(attempt.backend, str(attempt.error.get("type", "error")))
            if attempt.cost:
                self.cost.inc(attempt.backend, by=attempt.cost)
            usage = attempt.usage
            if usage.input_tokens:
                self.tokens.inc(attempt.backend, "input", by=usage.input_tokens)
            if usage.output_tokens:
                self.tokens.inc(attempt.backend, "output", by=usage.output_tokens)
        if not shadow:
            self.latency.observe(trace.latency_s, tier)

    def response(self, path: str, status: int) -> None:
        """Count one HTTP response."""
        self.responses.inc(path, str(status))

    def close(self) -> None:
        """Finish up at shutdown (nothing to do in one process)."""

    def render(self) -> str:
        """Return every metric in the Prometheus text format."""
        self.collect()
        lines: list[str] = []
        for counter in (
            self.turns,
            self.escalations,
            self.gate_failures,
            self.backend_errors,
            self.cost,
            self.tokens,
            self.responses,
            self.interrupted,
            self.state_fallbacks,
            self.task_reads_saved,
            self.concurrent_calls,
            self.panels,
        ):
            lines.extend(counter.render())
        lines.extend(self.latency.render())
        lines.extend(self.overhead.render())
        lines.append("# HELP tiered_router_in_flight Requests being served.")
        lines.append("# TYPE tiered_router_in_flight gauge")
        lines.append(f"tiered_router_in_flight {self.in_flight}")
        return "\n".join(lines) + "\n"
