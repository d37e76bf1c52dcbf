"""``tiered-router dataset from-traces``: your recorded traffic as an evaluation dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def from_traces(
    traces: Annotated[
        list[Path], typer.Argument(help="JSONL trace files written with recording on.")
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="The dataset file to write (.jsonl or .jsonl.gz)."),
    ] = Path("dataset.jsonl"),
    labels: Annotated[
        Path | None,
        typer.Option(
            "--labels",
            help='JSONL labels replacing the gate verdicts: {"turn_id", "quality"[, "model"]}.',
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Dataset name (default: the file's).")
    ] = None,
) -> None:
    """Write an evaluation dataset (for eval and calibrate) from recorded traces."""
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.traces import dataset_from_traces, write_dataset

    try:
        dataset, stats = dataset_from_traces(traces, labels=labels, name=name)
    except DatasetError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    write_dataset(dataset, output)
    typer.echo(
        f"wrote {stats.rows} rows to {output} (fast = {dataset.fast_model}, frontier = "
        f"{dataset.frontier_model}; {stats.both} with outcomes of both tiers)"
    )
    skipped = []
    if stats.unrecorded:
        skipped.append(f"{stats.unrecorded} traces without a record")
    if stats.merged:
        typer.echo(f"merged {stats.merged} traces of turns already seen (other-tier runs)")
    if skipped:
        typer.echo("skipped: " + ", ".join(skipped))
    for note in dataset.notes:
        typer.echo(f"note: {note}")


def register(app: typer.Typer) -> None:
    """Add the ``dataset`` command group to ``app``."""
    group = typer.Typer(help="Build evaluation datasets.", no_args_is_help=True)
    group.command("from-traces")(from_traces)
    app.add_typer(group, name="dataset")
