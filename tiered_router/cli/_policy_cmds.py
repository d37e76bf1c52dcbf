"""``validate``, ``explain``, ``run`` and ``serve``: the commands that take a policy.

Errors are one clear line (a policy error: one ``file:line: field: message`` line per
problem) on standard error and exit code 1, never a traceback. Heavy imports (the router,
the SDK, the server) happen inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from tiered_router.policy._schema import Policy
    from tiered_router.router import RoutedResult
    from tiered_router.routing import Decision
    from tiered_router.turn import Turn

__all__ = ["register"]

PolicyArg = Annotated[
    Path, typer.Argument(help="The policy YAML file.", show_default=False, dir_okay=False)
]
PromptOpt = Annotated[
    Optional[str],  # noqa: UP045 - typer reads the annotation at run time (Python 3.10)
    typer.Option("--prompt", "-p", help="The user message of the turn."),
]
MessagesOpt = Annotated[
    Optional[Path],  # noqa: UP045 - see above
    typer.Option(
        "--messages",
        "-m",
        help="JSON file: a list of messages, or a whole chat.completions request object.",
        dir_okay=False,
    ),
]
ToolsOpt = Annotated[
    Optional[Path],  # noqa: UP045 - see above
    typer.Option("--tools", help="JSON file with the tools (OpenAI's format).", dir_okay=False),
]
SystemOpt = Annotated[
    Optional[str],  # noqa: UP045 - see above
    typer.Option("--system", help="A system message put before the prompt."),
]
FinalOpt = Annotated[
    bool, typer.Option("--final", help="Mark the turn as the agent's final answer.")
]
StepOpt = Annotated[
    Optional[int],  # noqa: UP045 - see above
    typer.Option("--step", min=0, help="The agent's step index."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
StandInOpt = Annotated[
    bool,
    typer.Option(
        "--stand-in",
        help="Point every backend at a local scripted upstream (no keys, no network).",
    ),
]


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


@contextmanager
def _errors(policy_file: Path | None = None) -> Iterator[None]:
    """Turn expected failures into one line on stderr and exit code 1."""
    from tiered_router.exceptions import AllTiersFailed, PolicyError, TieredRouterError

    try:
        yield
    except PolicyError as exc:
        if exc.file == "<policy>" and policy_file is not None:
            exc = PolicyError(str(exc), file=str(policy_file), problems=exc.problems)
        _fail(str(exc))
    except AllTiersFailed as exc:  # each tier's own error on a line of its own
        lines = [
            f"error: AllTiersFailed: no tier produced a completion ({len(exc.attempts)} tries)"
        ]
        lines += [
            f"  {a.tier} ({a.backend}): "
            + _one_line(str(a.error.get("message"))).removeprefix(f"{a.backend}: ")
            for a in exc.attempts
            if a.error is not None
        ]
        _fail("\n".join(dict.fromkeys(lines)))
    except TieredRouterError as exc:
        _fail(f"error: {type(exc).__name__}: {_one_line(str(exc))}")
    except ImportError as exc:
        _fail(f"error: {_one_line(str(exc))}")
    except (OSError, ValueError) as exc:
        _fail(f"error: {_one_line(str(exc))}")


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "unknown error"


def _load(path: Path) -> Policy:
    from tiered_router.policy import load_policy

    return load_policy(path)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what} file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def _turn(
    prompt: str | None,
    messages: Path | None,
    tools: Path | None,
    system: str | None,
    final: bool,
    step: int | None,
) -> Turn:
    from tiered_router.turn import Turn

    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of --prompt TEXT and --messages FILE")
    request: dict[str, Any] = {}
    if messages is not None:
        loaded = _read_json(messages, "messages")
        if isinstance(loaded, dict):
            request = dict(loaded)
        elif isinstance(loaded, list):
            request = {"messages": loaded}
        else:
            raise ValueError(f"{messages}: expected a list of messages or a request object")
    else:
        request["messages"] = [{"role": "user", "content": prompt}]
    if system is not None:
        request["messages"] = [{"role": "system", "content": system}, *request["messages"]]
    if tools is not None:
        request["tools"] = _read_json(tools, "tools")
    extra = dict(request.get("extra_body") or {})
    signals = dict(extra.get("tiered_router") or {})
    if final:
        signals["final"] = True
    if step is not None:
        signals["step"] = step
    if signals:
        extra["tiered_router"] = signals
        request["extra_body"] = extra
    request.pop("stream", None)
    request.pop("model", None)
    return Turn.from_openai(**request)


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _decision_dict(decision: Decision) -> dict[str, Any]:
    return {
        "tier": decision.tier,
        "backend": decision.backend,
        "score": round(decision.score, 6),
        "threshold": decision.threshold,
        "rule": decision.rule,
        "reasons": list(decision.reasons),
        "features": dict(decision.features),
        "contributions": {k: round(v, 6) for k, v in decision.contributions.items()},
    }


KeysOpt = Annotated[
    bool,
    typer.Option("--check-keys", help="Also fail when a backend's API key is not set (exit 1)."),
]


def _missing_keys(loaded: Policy) -> list[str]:
    """Say which backends have no API key yet (they would fail at their first call)."""
    from tiered_router.backends.registry import build_backend
    from tiered_router.exceptions import PolicyError

    missing: list[str] = []
    for name, config in loaded.backends.items():
        try:
            build_backend(name, config)
        except PolicyError as exc:
            if not (exc.field or "").endswith(".api_key"):
                raise
            missing.append(f"{exc.field}: {exc.problems[0][2]}")
    return missing


def explain(
    policy: PolicyArg,
    prompt: PromptOpt = None,
    messages: MessagesOpt = None,
    tools: ToolsOpt = None,
    system: SystemOpt = None,
    final: FinalOpt = False,
    step: StepOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show where a turn would go and why (score, rule, reasons, features). No model call."""
    with _errors(policy):
        loaded = _load(policy)
        turn = _turn(prompt, messages, tools, system, final, step)
        from tiered_router.router import Router

        decision = Router(loaded).decide(turn)
    if json_out:
        typer.echo(json.dumps(_decision_dict(decision), indent=2))
        return
    from rich.table import Table

    out = _console()
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_row("tier", f"[bold]{decision.tier}[/bold] (backend {decision.backend})")
    head.add_row("score", f"{decision.score:.4f} (threshold {decision.threshold})")
    head.add_row("rule", decision.rule or "none (the threshold decided)")
    for i, reason in enumerate(decision.reasons):
        head.add_row("reasons" if i == 0 else "", reason)
    out.print(head)
    table = Table(title="features", title_justify="left")
    table.add_column("feature")
    table.add_column("value", justify="right")
    table.add_column("contribution", justify="right")
    names = sorted(
        set(decision.features) | set(decision.contributions),
        key=lambda n: (-abs(decision.contributions.get(n, 0.0)), n),
    )
    for name in names:
        value = decision.features.get(name)
        share = decision.contributions.get(name)
        table.add_row(
            name,
            "" if value is None else f"{value:.4g}",
            "" if share is None else f"{share:+.4f}",
        )
    out.print(table)


def _result_dict(result: RoutedResult) -> dict[str, Any]:
    completion = result.completion
    return {
        "text": completion.text,
        "tool_calls": [c.to_openai() for c in completion.tool_calls],
        "finish_reason": completion.finish_reason,
        "tier": result.tier,
        "escalated": result.escalated,
        "trace": result.trace.to_dict(),
    }


def run(
    policy: PolicyArg,
    prompt: PromptOpt = None,
    messages: MessagesOpt = None,
    tools: ToolsOpt = None,
    system: SystemOpt = None,
    final: FinalOpt = False,
    step: StepOpt = None,
    model: Annotated[
        str, typer.Option("--model", help="auto, a tier (fast, frontier) or a backend name.")
    ] = "auto",
    json_out: JsonOpt = False,
    stand_in: StandInOpt = False,
) -> None:
    """Route one turn for real and print the answer and its trace.

    Only the keys of the tiers the turn calls are needed; when every tier fails, each
    tier's own error is printed. ``--stand-in`` routes it to a local scripted upstream.
    """
    from tiered_router.openai._wire import resolve_model

    with _errors(policy):
        loaded = _load(policy)
        turn = _turn(prompt, messages, tools, system, final, step)
        from tiered_router.router import Router

        tier = resolve_model(loaded, model)
        if stand_in:
            from tiered_router.cli._stand_in import stand_in_policy

            with stand_in_policy(loaded) as (path, _), Router(_load(path)) as router:
                result = router.complete(turn, tier=tier)
        else:
            with Router(loaded) as router:
                result = router.complete(turn, tier=tier)
    if json_out:
        typer.echo(json.dumps(_result_dict(result), indent=2, default=str))
        return
    from rich.table import Table

    out = _console()
    completion = result.completion
    if completion.text:
        out.print(completion.text, markup=False)
    for call in completion.tool_calls:
        out.print(f"[bold]tool call[/bold] {call.name}({call.arguments})", markup=True)
    trace = result.trace
    table = Table(title="trace", title_justify="left")
    for column in ("tier", "backend", "model", "try", "latency ms", "tokens", "cost $", "result"):
        table.add_column(column)
    notes: list[str] = []
    for a in trace.attempts:
        if a.error is not None:
            outcome = f"[red]{a.error.get('type')}[/red]"
        elif a.verdict is None:
            outcome = "ok"
        elif a.verdict.passed:
            outcome = "[green]gate passed[/green]"
        else:
            outcome = "[yellow]gate failed[/yellow]"
            notes.extend(
                f"{a.backend} draft failed {f.check}: {f.reason}" for f in a.verdict.failures
            )
        table.add_row(
            a.tier,
            a.backend,
            a.model,
            str(a.try_index),
            f"{a.latency_s * 1000:.1f}",
            f"{a.usage.input_tokens}/{a.usage.output_tokens}",
            f"{a.cost:.6f}",
            outcome,
        )
    out.print(table)
    for note in notes:
        out.print(note, markup=False)
    escalations = ", ".join(trace.escalations) or "none"
    out.print(
        f"tier [bold]{result.tier}[/bold] (decided {trace.decision.tier}, score "
        f"{trace.decision.score:.3f}, rule {trace.decision.rule or '-'}), escalations: "
        f"{escalations}, {trace.latency_s * 1000:.1f} ms, ${trace.cost:.6f}"
    )


def serve(
    policy: PolicyArg,
    host: Annotated[
        Optional[str],  # noqa: UP045 - see above
        typer.Option(help="Address to bind (default: server.host, else 127.0.0.1)."),
    ] = None,
    port: Annotated[
        Optional[int],  # noqa: UP045 - see above
        typer.Option(min=0, max=65535, help="Port (default: server.port, else 8100)."),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    max_body_bytes: Annotated[
        Optional[int],  # noqa: UP045 - see above
        typer.Option(min=1, help="Largest request body (default: server.max_body_bytes)."),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="critical, error, warning, info, debug or trace.")
    ] = "info",
    trace_file: Annotated[
        Optional[Path],  # noqa: UP045 - see above
        typer.Option("--trace-file", help="Append every trace to this JSONL file."),
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            "--record", help="Record messages and outputs in the traces (for dataset from-traces)."
        ),
    ] = False,
    otel: Annotated[
        bool,
        typer.Option(
            help="OpenTelemetry spans and metrics over OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT "
            "(needs the otel extra)."
        ),
    ] = False,
    stand_in: StandInOpt = False,
) -> None:
    """Serve the OpenAI-compatible proxy (needs the server extra).

    Two lines per routed chat request are logged at info: the router's line for the turn,
    then the proxy's (status, tier, score, rule, escalated, latency and cost).
    ``--stand-in`` serves the policy with every backend pointed at a local scripted
    upstream: try the proxy with no keys.
    """
    with _errors(policy), contextlib.ExitStack() as scope:
        target: Path = policy
        if stand_in:
            from tiered_router.cli._stand_in import require_server, stand_in_policy

            require_server()
            target, upstream = scope.enter_context(stand_in_policy(policy))
            typer.echo(
                f"stand-in upstream on {upstream.base_url}: every backend of {policy} "
                "points at it (scripted answers; no keys, no network)",
                err=True,
            )
        from tiered_router.server import serve as serve_proxy

        serve_proxy(
            target,
            host=host,
            port=port,
            workers=workers,
            max_body_bytes=max_body_bytes,
            log_level=log_level,
            trace_file=trace_file,
            record=record,
            otel=otel,
        )


def register(app: typer.Typer) -> None:
    """Add ``explain``, ``run`` and ``serve`` to the app (``validate``: its own module)."""
    app.command("explain")(explain)
    app.command("run")(run)
    app.command("serve")(serve)
