"""OpenTelemetry traces and metrics in the GenAI semantic conventions (the ``otel`` extra).

:class:`OTelSink` is a trace sink: every routed turn becomes one span, with one child span
per backend call (attempt). Tracing stacks that read OpenTelemetry (Langfuse, Phoenix,
Datadog, Grafana Tempo, Jaeger) show them as LLM calls:

- the turn span ``route <tier>`` carries ``gen_ai.operation.name``, ``gen_ai.system``,
  ``gen_ai.request.model`` and ``gen_ai.response.model``, and the router's own reasoning under
  ``tiered_router.*``: the decision (tier, score, threshold, rule, reasons), the serving tier
  and backend, the escalations and their reasons, the final gate verdict and the cost;
- each attempt span ``chat <model>`` (kind CLIENT) carries ``gen_ai.system``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` and
  ``gen_ai.usage.output_tokens``, ``error.type`` when the call failed, and the gate's verdict
  on its draft (``tiered_router.gate.passed``, ``tiered_router.gate.failed_checks``).

Token usage sits on the attempt spans only, so backends that add up usage per LLM span do
not count a turn twice; the turn span has the totals as ``tiered_router.usage.*``.

The turn span's parent is the caller's current span (in-process), or, in the proxy, the
span named by the request's W3C ``traceparent`` header (:class:`TraceContextMiddleware`).

The same sink records metrics through the OpenTelemetry meter:
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` (GenAI conventions),
and ``tiered_router.turns``, ``tiered_router.escalations``, ``tiered_router.gate.failures``,
``tiered_router.cost`` and ``tiered_router.turn.duration``.

Traces reach the sink when the turn has finished, so spans are written with the turn's
measured start and end; attempts are laid end to end from the turn's start (retry waits
fall after them).

Example:
    ```python
    from tiered_router.otel import OTelSink, configure_otlp

    configure_otlp(service_name="my-agent")  # OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT
    router = Router(policy, sinks=[OTelSink(policy=router.policy)])
    ```

Nothing secret is recorded: no API keys, no prompts, no completions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    from tiered_router.exceptions import missing_extra

    raise ImportError(missing_extra("otel", "OpenTelemetry support needs its SDK")) from exc

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from tiered_router.policy._schema import Policy
    from tiered_router.trace import Attempt, Trace

__all__ = ["OTelSink", "TraceContextMiddleware", "configure_otlp", "gen_ai_system"]

_SCOPE = "tiered_router"
_OPERATION = "chat"

# preset name -> gen_ai.system / gen_ai.provider.name (well-known values where one exists)
_SYSTEMS = {
    "openai": "openai",
    "mercury-2": "inception",
    "inception": "inception",
    "vllm": "vllm",
    "sglang": "sglang",
    "ollama": "ollama",
    "dlmserve": "dlmserve",
    "local-diffusion": "local-diffusion",
}


def gen_ai_system(policy: Policy, backend: str) -> str:
    """Return the ``gen_ai.system`` value of a policy's backend.

    The named or inferred preset decides (``openai``, ``inception`` for Mercury 2, ``vllm``,
    ``sglang`` ...); an endpoint no preset knows is ``_OTHER``, as the conventions ask.
    """
    config = policy.backends.get(backend)
    if config is None:
        return "_OTHER"
    from tiered_router.backends.presets import preset_for

    try:
        preset = preset_for(config, backend=backend)
    except Exception:  # an unknown preset was reported at load time; never fail a sink
        return "_OTHER"
    if preset is None:
        return "_OTHER"
    return _SYSTEMS.get(preset.name, preset.name)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class OTelSink:
    """Writes each routed turn as OpenTelemetry spans and metrics.

    Example:
        ```python
        sink = OTelSink(policy=policy)
        router = Router(policy, sinks=[sink])
        ```

    Args:
        policy: The router's policy, to name each backend's ``gen_ai.system``; without it
            every backend is ``_OTHER``.
        tracer_provider: Where spans go (the global provider when ``None``).
        meter_provider: Where metrics go (the global provider when ``None``).

    """

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        tracer_provider: otel_trace.TracerProvider | None = None,
        meter_provider: otel_metrics.MeterProvider | None = None,
    ) -> None:
        self.policy = policy
        self._systems: dict[str, str] = {}
        self.tracer = otel_trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = otel_metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per call."
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of model calls."
        )
        self._turns = meter.create_counter(
            "tiered_router.turns", unit="{turn}", description="Routed turns by serving tier."
        )
        self._escalations = meter.create_counter(
            "tiered_router.escalations", unit="{escalation}", description="Escalations."
        )
        self._gate_failures = meter.create_counter(
            "tiered_router.gate.failures", unit="{failure}", description="Failed gate checks."
        )
        self._cost = meter.create_counter(
            "tiered_router.cost", unit="USD", description="Cost of backend calls."
        )
        self._turn_duration = meter.create_histogram(
            "tiered_router.turn.duration", unit="s", description="Wall time of routed turns."
        )

    def system(self, backend: str) -> str:
        """The ``gen_ai.system`` of ``backend`` (cached)."""
        found = self._systems.get(backend)
        if found is None:
            found = gen_ai_system(self.policy, backend) if self.policy is not None else "_OTHER"
            self._systems[backend] = found
        return found

    def emit(self, trace: Trace) -> None:
        """Write one finished turn as a span tree and count it."""
        end = time.time()
        start = end - trace.latency_s
        served = _served(trace)
        turn_span = self.tracer.start_span(
            f"route {trace.decision.tier}",
            kind=SpanKind.INTERNAL,
            attributes=self._turn_attributes(trace, served),
            start_time=_ns(start),
        )
        if trace.tier is None:
            turn_span.set_status(Status(StatusCode.ERROR, "no tier produced a completion"))
        elif trace.interrupted is not None:
            turn_span.set_status(Status(StatusCode.ERROR, f"interrupted: {trace.interrupted}"))
        parent = otel_trace.set_span_in_context(turn_span)
        at = start
        panel_end: float | None = None  # a panel's drafts ran at once: they share a start
        for attempt in trace.attempts:
            if attempt.role == "hedge":  # ran alongside the fast side, ending near the turn's end
                self._attempt_span(attempt, parent, max(start, end - attempt.latency_s))
                continue
            if attempt.role == "draft":
                self._attempt_span(attempt, parent, at)
                panel_end = max(panel_end or at, at + attempt.latency_s)
                continue
            if panel_end is not None:
                at, panel_end = panel_end, None
            self._attempt_span(attempt, parent, at)
            at += attempt.latency_s
        turn_span.end(end_time=_ns(end))
        self._count(trace)

    def _turn_attributes(self, trace: Trace, served: Attempt | None) -> dict[str, Any]:
        d = trace.decision
        first = trace.attempts[0] if trace.attempts else None
        usage = trace.usage
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": _OPERATION,
            "gen_ai.system": self.system(trace.backend or d.backend),
            "gen_ai.provider.name": self.system(trace.backend or d.backend),
            "tiered_router.turn_id": trace.turn_id,
            "tiered_router.decision.tier": d.tier,
            "tiered_router.decision.backend": d.backend,
            "tiered_router.decision.score": float(d.score),
            "tiered_router.decision.threshold": float(d.threshold),
            "tiered_router.decision.reasons": list(d.reasons),
            "tiered_router.escalated": trace.escalated,
            "tiered_router.escalations": list(trace.escalations),
            "tiered_router.attempts": len(trace.attempts),
            "tiered_router.cost_usd": float(trace.cost),
            "tiered_router.usage.input_tokens": usage.input_tokens,
            "tiered_router.usage.output_tokens": usage.output_tokens,
        }
        if first is not None:
            attrs["gen_ai.request.model"] = first.model
        if served is not None:
            attrs["gen_ai.response.model"] = served.model
        if d.rule is not None:
            attrs["tiered_router.decision.rule"] = d.rule
        if trace.escalations:
            attrs["tiered_router.escalation.reason"] = trace.escalations[0]
        if trace.tier is not None:
            attrs["tiered_router.tier"] = trace.tier
        if trace.backend is not None:
            attrs["tiered_router.backend"] = trace.backend
        if trace.verdict is not None:
            attrs["tiered_router.gate.passed"] = trace.verdict.passed
            attrs["tiered_router.gate.failed_checks"] = list(trace.verdict.failed_checks)
        if trace.interrupted is not None:
            attrs["tiered_router.interrupted"] = trace.interrupted
        task_id = trace.metadata.get("task_id")
        if task_id is not None:
            attrs["tiered_router.task_id"] = str(task_id)
        monitor = trace.metadata.get("monitor")
        if isinstance(monitor, dict):  # a quality monitor's shadow call (rule monitor.shadow)
            for key in ("kind", "outcome", "state", "change"):
                if monitor.get(key) is not None:
                    attrs[f"tiered_router.monitor.{key}"] = str(monitor[key])
            if monitor.get("lower_bound") is not None:
                attrs["tiered_router.monitor.lower_bound"] = float(monitor["lower_bound"])
        return attrs

    def _attempt_span(self, attempt: Attempt, parent: otel_context.Context, at: float) -> None:
        system = self.system(attempt.backend)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": _OPERATION,
            "gen_ai.system": system,
            "gen_ai.provider.name": system,
            "gen_ai.request.model": attempt.model,
            "tiered_router.tier": attempt.tier,
            "tiered_router.backend": attempt.backend,
            "tiered_router.try_index": attempt.try_index,
            "tiered_router.cost_usd": float(attempt.cost),
        }
        if attempt.ok:
            attrs["gen_ai.response.model"] = attempt.model
            attrs["gen_ai.usage.input_tokens"] = attempt.usage.input_tokens
            attrs["gen_ai.usage.output_tokens"] = attempt.usage.output_tokens
        if attempt.conversions:
            attrs["tiered_router.conversions"] = list(attempt.conversions)
        if attempt.role != "call":  # a panel's draft or a hedge
            attrs["tiered_router.attempt.role"] = attempt.role
        if attempt.cancelled:
            attrs["tiered_router.attempt.cancelled"] = True
        if attempt.answer_key is not None:
            attrs["tiered_router.answer_key.kind"] = attempt.answer_key.get("kind", "")
        error = attempt.error
        if error is not None:
            attrs["error.type"] = str(error.get("type", "error"))
        verdict = attempt.verdict
        if verdict is not None:
            attrs["tiered_router.gate.passed"] = verdict.passed
            attrs["tiered_router.gate.failed_checks"] = list(verdict.failed_checks)
        span = self.tracer.start_span(
            f"{_OPERATION} {attempt.model}",
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=attrs,
            start_time=_ns(at),
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, _first_line(error.get("message"))))
        span.end(end_time=_ns(at + attempt.latency_s))

    def _count(self, trace: Trace) -> None:
        tier = trace.tier or "none"
        self._turns.add(1, {"tiered_router.tier": tier, "tiered_router.escalated": trace.escalated})
        self._turn_duration.record(trace.latency_s, {"tiered_router.tier": tier})
        for reason in trace.escalations:
            self._escalations.add(1, {"tiered_router.escalation.reason": reason})
        for attempt in trace.attempts:
            base: dict[str, Any] = {
                "gen_ai.operation.name": _OPERATION,
                "gen_ai.system": self.system(attempt.backend),
                "gen_ai.request.model": attempt.model,
                "tiered_router.tier": attempt.tier,
            }
            timing = dict(base)
            if attempt.role != "call":
                timing["tiered_router.attempt.role"] = attempt.role
            if attempt.cancelled:
                timing["tiered_router.attempt.cancelled"] = True
            if attempt.error is not None:
                timing["error.type"] = str(attempt.error.get("type", "error"))
            self._duration.record(attempt.latency_s, timing)
            if attempt.ok:
                usage = attempt.usage
                self._tokens.record(usage.input_tokens, {**base, "gen_ai.token.type": "input"})
                self._tokens.record(usage.output_tokens, {**base, "gen_ai.token.type": "output"})
            if attempt.cost:
                self._cost.add(attempt.cost, {"tiered_router.backend": attempt.backend})
            if attempt.verdict is not None:
                for check in attempt.verdict.failed_checks:
                    self._gate_failures.add(1, {"tiered_router.gate.check": check})


def _served(trace: Trace) -> Attempt | None:
    for attempt in reversed(trace.attempts):
        if attempt.ok and attempt.backend == trace.backend:
            return attempt
    return None


def _first_line(message: object) -> str:
    text = str(message) if message is not None else ""
    return text.splitlines()[0] if text else ""


class TraceContextMiddleware:
    """ASGI middleware: a request's W3C ``traceparent`` becomes the parent of its turn spans.

    The propagator is OpenTelemetry's global one (W3C Trace Context and Baggage unless
    configured otherwise). :func:`tiered_router.server.create_app` adds it with ``otel=True``.

    Args:
        app: The ASGI app to wrap.

    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request inside the context its headers carry."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            key = name.decode("latin-1").lower()
            if key in ("traceparent", "tracestate", "baggage"):
                carrier[key] = value.decode("latin-1")
        if not carrier:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


def configure_otlp(
    *, service_name: str = "tiered-router", resource: Mapping[str, str] | None = None
) -> bool:
    """Install SDK tracer and meter providers that export OTLP/HTTP to a collector.

    The endpoint and headers come from the standard ``OTEL_EXPORTER_OTLP_*`` environment
    variables (``http://localhost:4318`` by default). Does nothing when an SDK tracer
    provider is already installed (the application's own setup wins).

    Args:
        service_name: ``service.name`` of the resource (``OTEL_SERVICE_NAME`` wins).
        resource: More resource attributes.

    Returns:
        Whether providers were installed.

    Raises:
        ImportError: When ``opentelemetry-sdk`` or the OTLP exporter is missing.

    """
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from tiered_router.exceptions import missing_extra

        raise ImportError(missing_extra("otel", "exporting OTLP needs its exporter")) from exc
    if isinstance(otel_trace.get_tracer_provider(), TracerProvider):
        return False
    attrs = dict(resource or {})
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attrs.setdefault("service.name", service_name)
    res = Resource.create(attrs)
    tracer_provider = TracerProvider(resource=res)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    otel_trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    otel_metrics.set_meter_provider(MeterProvider(resource=res, metric_readers=[reader]))
    return True
