"""OpenTelemetry: one span per turn, one child per attempt, GenAI attributes, OTel metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace as otel_trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from routerkit import JSON_TURN, easy_turn, make_policy, router_for  # noqa: E402

from tiered_router import load_policy  # noqa: E402
from tiered_router.otel import OTelSink, gen_ai_system  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402


class Otel:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def sink(self, policy: Any = None) -> OTelSink:
        return OTelSink(
            policy=policy,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        data = self.reader.get_metrics_data()
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        assert data is not None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # histogram
                        found.setdefault(metric.name, []).append((dict(point.attributes), value))
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


def test_escalated_turn_has_both_attempts_with_their_verdicts(
    server: ScriptedServer, otel: Otel
) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"answer": 4})], model="frontier-model")
    router = router_for(server, sinks=[otel.sink(load_policy(make_policy(server)))])
    caller = otel.tracer_provider.get_tracer("agent")
    with caller.start_as_current_span("agent step") as outer:
        result = router.complete(easy_turn(**JSON_TURN))
    assert result.escalated and result.tier == "frontier"

    spans = {s.name: s for s in otel.spans()}
    turn = spans["route fast"]
    fast, frontier = spans["chat fast-model"], spans["chat frontier-model"]
    # the turn span hangs under the caller's current span; attempts under the turn
    assert turn.parent is not None and turn.parent.span_id == outer.get_span_context().span_id
    assert turn.context.trace_id == outer.get_span_context().trace_id
    for child in (fast, frontier):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.kind == otel_trace.SpanKind.CLIENT
    assert fast.start_time <= frontier.start_time
    assert turn.start_time <= fast.start_time and frontier.end_time <= turn.end_time

    t = dict(turn.attributes or {})
    assert t["gen_ai.operation.name"] == "chat"
    assert t["gen_ai.request.model"] == "fast-model"
    assert t["gen_ai.response.model"] == "frontier-model"
    assert t["gen_ai.system"] == "_OTHER"  # a local endpoint no preset knows
    assert t["tiered_router.decision.tier"] == "fast"
    assert t["tiered_router.tier"] == "frontier"
    assert t["tiered_router.escalated"] is True
    assert t["tiered_router.escalation.reason"] == "gate_failed"
    assert t["tiered_router.gate.passed"] is True
    assert t["tiered_router.decision.score"] == pytest.approx(result.trace.decision.score)
    assert t["tiered_router.cost_usd"] == pytest.approx(result.trace.cost)
    assert t["tiered_router.turn_id"] == result.trace.turn_id

    f = dict(fast.attributes or {})
    assert f["tiered_router.gate.passed"] is False
    assert list(f["tiered_router.gate.failed_checks"]) == list(
        result.trace.attempts[0].verdict.failed_checks  # type: ignore[union-attr]
    )
    assert f["tiered_router.gate.failed_checks"]
    assert f["gen_ai.request.model"] == "fast-model"
    assert f["gen_ai.usage.input_tokens"] == result.trace.attempts[0].usage.input_tokens
    g = dict(frontier.attributes or {})
    assert g["tiered_router.gate.passed"] is True
    assert g["gen_ai.response.model"] == "frontier-model"
    assert g["gen_ai.usage.output_tokens"] == result.trace.attempts[1].usage.output_tokens
    assert g["gen_ai.usage.output_tokens"] > 0
    # nothing secret in any attribute
    assert "SECRET" not in json.dumps([dict(s.attributes or {}) for s in otel.spans()])


def test_failed_call_is_an_error_span_and_metrics_count_the_turn(
    server: ScriptedServer, otel: Otel
) -> None:
    server.script([Reply.status(500)], model="fast-model")
    server.script([Reply.text("fine")], model="frontier-model")
    router = router_for(server, retries=(0, 0), sinks=[otel.sink()])
    result = router.complete(easy_turn())
    assert result.tier == "frontier"
    fast = next(s for s in otel.spans() if s.name == "chat fast-model")
    assert fast.status.status_code == otel_trace.StatusCode.ERROR
    assert (fast.attributes or {})["error.type"]
    assert "gen_ai.usage.input_tokens" not in (fast.attributes or {})

    m = otel.metrics()
    turns = m["tiered_router.turns"]
    assert turns == [({"tiered_router.tier": "frontier", "tiered_router.escalated": True}, 1)]
    assert m["tiered_router.escalations"] == [
        ({"tiered_router.escalation.reason": "backend_error"}, 1)
    ]
    durations = m["gen_ai.client.operation.duration"]
    assert sorted(attrs["gen_ai.request.model"] for attrs, _ in durations) == [
        "fast-model",
        "frontier-model",
    ]
    assert any("error.type" in attrs for attrs, _ in durations)
    tokens = {a["gen_ai.token.type"]: v for a, v in m["gen_ai.client.token.usage"]}
    assert tokens["output"][0] == 1 and tokens["output"][1] > 0
    assert m["tiered_router.cost"][0][1] > 0


def test_gen_ai_system_from_presets(server: ScriptedServer) -> None:
    policy = load_policy(
        {
            **make_policy(server),
            "backends": {
                "fast": {"preset": "mercury-2", "api_key": "k"},
                "frontier": {"model": "gpt-x", "api_key": "k"},
                "local": {"base_url": server.base_url, "model": "m"},
            },
        }
    )
    assert gen_ai_system(policy, "fast") == "inception"
    assert gen_ai_system(policy, "frontier") == "openai"
    assert gen_ai_system(policy, "local") == "_OTHER"
    assert gen_ai_system(policy, "missing") == "_OTHER"


def test_proxy_spans_continue_the_request_traceparent(server: ScriptedServer, otel: Otel) -> None:
    pytest.importorskip("starlette")
    from test_server import running

    from tiered_router import _http
    from tiered_router.server import create_app

    policy = make_policy(server)
    server.script([Reply.text("hello")], model="fast-model")
    app = create_app(policy, env={}, otel=otel.sink(load_policy(policy)))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent_id = "00f067aa0ba902b7"
    body = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]}
    with running(app) as url, _http.build_client() as http:
        response = http.post(
            f"{url}/v1/chat/completions",
            content=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                "traceparent": f"00-{trace_id}-{parent_id}-01",
            },
        )
        plain = http.post(
            f"{url}/v1/chat/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 200 and plain.status_code == 200
    turns = [s for s in otel.spans() if s.name.startswith("route ")]
    assert len(turns) == 2
    linked, fresh = turns
    assert format(linked.context.trace_id, "032x") == trace_id
    assert linked.parent is not None and format(linked.parent.span_id, "016x") == parent_id
    assert linked.parent.is_remote
    assert fresh.parent is None and format(fresh.context.trace_id, "032x") != trace_id


def test_configure_otlp_installs_providers_once() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from tiered_router.otel import configure_otlp\n"
        "assert configure_otlp(service_name='svc') is True\n"
        "provider = trace.get_tracer_provider()\n"
        "assert isinstance(provider, TracerProvider)\n"
        "assert provider.resource.attributes['service.name'] == 'svc'\n"
        "assert configure_otlp() is False\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_interrupted_turn_and_dialect_conversions(otel: Otel) -> None:
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt, Trace
    from tiered_router.turn import Usage

    attempt = Attempt(
        tier="fast",
        backend="fast",
        model="fast-model",
        latency_s=0.2,
        usage=Usage(input_tokens=3, output_tokens=4),
        conversions=("system role folded into the first user message",),
    )
    trace = Trace(
        turn_id="t-1",
        decision=Decision(tier="fast", backend="fast", score=0.1, threshold=0.5),
        attempts=(attempt,),
        tier="fast",
        backend="fast",
        latency_s=0.3,
        interrupted="abandoned",
        metadata={"task_id": "ticket-9"},
    )
    otel.sink().emit(trace)
    turn = next(s for s in otel.spans() if s.name == "route fast")
    call = next(s for s in otel.spans() if s.name == "chat fast-model")
    assert turn.status.status_code == otel_trace.StatusCode.ERROR
    assert (turn.attributes or {})["tiered_router.interrupted"] == "abandoned"
    assert (turn.attributes or {})["tiered_router.task_id"] == "ticket-9"
    assert list((call.attributes or {})["tiered_router.conversions"]) == list(attempt.conversions)


def test_panel_drafts_are_concurrent_spans_with_their_role(
    server: ScriptedServer, otel: Otel
) -> None:
    server.script(
        [Reply.text("The answer is 4.")] * 2 + [Reply.text("The answer is 5.")], model="fast-model"
    )
    policy = make_policy(server, drafts={"k": 3, "when": ["all"], "n": False, "early": False})
    router = router_for(server, sinks=[otel.sink(load_policy(policy))], drafts=policy["drafts"])
    result = router.complete(easy_turn())
    assert result.tier == "fast"
    drafts = [s for s in otel.spans() if s.name == "chat fast-model"]
    assert len(drafts) == 3
    assert len({s.start_time for s in drafts}) == 1  # sent at once
    attrs = [dict(s.attributes or {}) for s in drafts]
    assert all(a["tiered_router.attempt.role"] == "draft" for a in attrs)
    assert {a["tiered_router.answer_key.kind"] for a in attrs} == {"final"}
