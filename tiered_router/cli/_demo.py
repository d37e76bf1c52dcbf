"""``tiered-router demo``: a short agent loop on a local scripted upstream, no keys, no network.

The demo starts :class:`~tiered_router.testing.ScriptedServer` (an OpenAI-compatible server
on 127.0.0.1), points a Mercury 2 + GPT-5.2 policy at it, and runs a three-turn weather agent:

1. an easy turn that the fast tier answers and the gate passes;
2. a tool-calling turn whose fast draft passes ``"two"`` for an integer argument: the gate
   fails it and the router escalates to the frontier tier;
3. the final answer, sent to the frontier tier by the ``final-answer`` rule.

Each turn prints its decision (tier, score, rule), every attempt with its gate verdict and
cost, and the escalation; the escalated turn's whole trace is printed as JSON at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tiered_router.router import RoutedResult, Router

__all__ = ["DEMO_POLICY", "register", "run_demo"]

FAST_MODEL = "mercury-2"
FRONTIER_MODEL = "gpt-5.2"

DEMO_POLICY: dict[str, Any] = {
    "version": 1,
    "backends": {
        "mercury": {"preset": "mercury-2", "max_retries": 0},
        "frontier": {"preset": "openai", "model": FRONTIER_MODEL, "max_retries": 0},
    },
    "tiers": {"fast": "mercury", "frontier": "frontier"},
    "scoring": {"type": "heuristic", "threshold": 0.6},
    "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
}
"""The demo's policy: real model names and list prices; the server stands in for both."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def _script(server: Any) -> None:
    from tiered_router.testing import Reply

    server.script([Reply.text("Hello! Ask me about the weather anywhere.")], model=FAST_MODEL)
    # the fast model's tool call passes "two" for an integer: the gate must catch it
    server.script(
        [Reply.tool_calls([("get_weather", {"city": "Lyon", "days": "two"})])], model=FAST_MODEL
    )
    server.script(
        [Reply.tool_calls([("get_weather", {"city": "Lyon", "days": 2})])], model=FRONTIER_MODEL
    )
    server.script(
        [Reply.text("Lyon: sunny, highs around 24 °C for the next 2 days.")],
        model=FRONTIER_MODEL,
    )


def _show(echo: Callable[[str], None], number: int, result: RoutedResult) -> None:
    trace = result.trace
    d = trace.decision
    rule = d.rule or f"threshold {d.threshold:g}"
    echo(f"turn {number}: decided {d.tier} (score {d.score:.2f}, {rule})")
    for a in trace.attempts:
        if a.error is not None:
            outcome = f"error {a.error.get('type')}"
        elif a.verdict is None:
            outcome = "not gated"
        elif a.verdict.passed:
            outcome = "gate passed"
        else:
            outcome = "gate FAILED: " + "; ".join(a.verdict.reasons)
        echo(
            f"  {a.tier:<8} {a.backend}/{a.model}  {a.latency_s * 1000:.1f} ms  "
            f"${a.cost:.6f}  {outcome}"
        )
    if trace.escalations:
        echo(f"  escalated: {', '.join(trace.escalations)} -> answered by {result.tier}")
    completion = result.completion
    if completion.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in completion.tool_calls)
        echo(f"  answer: tool call {calls}")
    else:
        echo(f"  answer: {completion.text}")


def _agent(router: Router, echo: Callable[[str], None]) -> list[RoutedResult]:
    from tiered_router.turn import Turn

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a concise travel assistant. Use tools."},
        {"role": "user", "content": "Hi!"},
    ]
    results = []
    with router.task("demo") as task:
        result = router.complete(Turn(messages, tools=TOOLS))
        _show(echo, 1, result)
        results.append(result)
        messages += [
            result.completion.to_message(),
            {"role": "user", "content": "What's the weather in Lyon for the next 2 days?"},
        ]
        for number in (2, 3):
            final = messages[-1]["role"] == "tool"
            result = router.complete(Turn(messages, tools=TOOLS, final=final))
            _show(echo, number, result)
            results.append(result)
            messages.append(result.completion.to_message())
            for call in result.completion.tool_calls:
                output = {"city": "Lyon", "days": 2, "forecast": "sunny", "high_c": 24}
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(output)}
                )
        summary = task.summary()
    echo(
        f"task: {summary.steps} turns, {summary.escalations} escalation(s), "
        f"cost ${summary.cost:.6f}"
    )
    return results


def run_demo(
    echo: Callable[[str], None] = print, *, trace_file: Path | None = None
) -> list[RoutedResult]:
    """Run the demo, printing through ``echo``; return each turn's result.

    Args:
        echo: Where lines go.
        trace_file: Also append every trace to this JSONL file.

    """
    from tiered_router.router import Router
    from tiered_router.testing import ScriptedServer
    from tiered_router.trace import JSONLSink, TraceSink

    with ScriptedServer() as server:
        _script(server)
        echo(f"scripted upstream on {server.base_url} (no keys, no network)")
        echo(f"policy: fast = {FAST_MODEL}, frontier = {FRONTIER_MODEL}, threshold 0.6")
        sinks: list[TraceSink] = []
        sink = JSONLSink(trace_file) if trace_file is not None else None
        if sink is not None:
            sinks.append(sink)
        try:
            # the demo's messages are synthetic: record them, so the traces can become a dataset
            record = trace_file is not None
            with Router(server.stand_in(DEMO_POLICY), sinks=sinks, record=record) as router:
                results = _agent(router, echo)
        finally:
            if sink is not None:
                sink.close()
    escalated = next((r for r in results if r.escalated), None)
    if escalated is not None:
        trace = escalated.trace.to_dict()
        trace["decision"].pop("features", None)
        trace["decision"].pop("contributions", None)
        for part in (*trace["attempts"], trace):  # the checks that ran are the same each time
            if part.get("verdict"):
                part["verdict"].pop("checks", None)
        echo("trace of the escalated turn:")
        echo(json.dumps(trace, indent=2))
    if trace_file is not None:
        echo(f"traces written to {trace_file}")
    return results


def serve_demo(*, host: str | None, port: int | None, trace_file: Path | None) -> None:
    """Serve the proxy with the demo's policy, every backend on a local scripted upstream."""
    from tiered_router.cli._policy_cmds import _errors, serve
    from tiered_router.cli._stand_in import require_server, stand_in_policy

    with _errors():
        require_server()
    with _errors(), stand_in_policy(DEMO_POLICY) as (path, upstream):
        from tiered_router.policy._ops import DEFAULT_PORT

        url = f"http://{host or '127.0.0.1'}:{port or DEFAULT_PORT}/v1"
        typer.echo(
            f"scripted upstream on {upstream.base_url} (no keys, no network); the proxy "
            f"serves the demo policy (fast = {FAST_MODEL}, frontier = {FRONTIER_MODEL}) on "
            f"{url}\ntry: curl {url}/chat/completions -H 'content-type: application/json' "
            """-d '{"model": "auto", "messages": [{"role": "user", "content": "Hi!"}]}'""",
            err=True,
        )
        serve(path, host=host, port=port, trace_file=trace_file)


def demo(
    trace_file: Annotated[
        Path | None,
        typer.Option("--trace-file", help="Also append every trace to this JSONL file."),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Instead, serve the proxy with the demo policy on a scripted upstream "
            "(needs the server extra).",
        ),
    ] = False,
    host: Annotated[
        str | None, typer.Option(help="With --serve: the address (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="With --serve: the port (default 8100).")] = None,
) -> None:
    """Try it with no keys: a short agent loop against a local scripted upstream."""
    if serve:
        serve_demo(host=host, port=port, trace_file=trace_file)
        return
    run_demo(typer.echo, trace_file=trace_file)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the app."""
    app.command("demo")(demo)
