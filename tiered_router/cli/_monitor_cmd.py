"""``tiered-router monitor TRACES.jsonl``: the quality monitor's figures over time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def monitor(
    traces: Annotated[list[Path], typer.Argument(help="JSONL trace files (JSONLSink).")],
    every: Annotated[
        int, typer.Option("--every", min=1, help="Shadow calls per kind in each printed row.")
    ] = 50,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Also write an HTML page with the chart over time."),
    ] = None,
) -> None:
    """Print the monitor's matched share, lower bound and state per turn kind over time."""
    from rich.console import Console
    from rich.table import Table

    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.monitor_timeline import monitor_timeline, timeline_rows

    try:
        points = monitor_timeline(traces)
    except DatasetError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not points:
        typer.echo(
            "no monitor shadow calls in these traces (a policy with monitor: writes them, "
            "rule monitor.shadow, metadata.monitor)"
        )
        raise typer.Exit(1)
    table = Table(title=f"quality monitor: {len(points)} shadow calls, rows every {every}")
    for column in ("kind", "calls", "this stretch", "compared", "matched", "bound", "target"):
        table.add_column(column, justify="left" if column in ("kind", "this stretch") else "right")
    table.add_column("state")
    for row in timeline_rows(points, every=every):
        stretch = ", ".join(f"{k} {v}" for k, v in sorted(row.outcomes.items()))
        state = row.state + "".join(f"\n{c}" for c in row.changes)
        table.add_row(
            row.kind,
            str(row.calls),
            stretch,
            str(row.compared),
            f"{row.matched_share:.3f}",
            f"{row.lower_bound:.3f}",
            "" if row.target is None else f"{row.target:g}",
            state,
        )
    Console(width=120).print(table)
    if report is not None:
        from tiered_router.evaluation.report import render_monitor_html

        report.write_text(render_monitor_html(points, source=", ".join(map(str, traces))))
        typer.echo(f"wrote {report}")


def register(app: typer.Typer) -> None:
    """Add the ``monitor`` command to ``app``."""
    app.command("monitor")(monitor)
