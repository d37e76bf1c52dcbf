"""The ``tiered-router`` command line: validate, explain, run, serve, eval, calibrate, demo.

Each group of commands lives in its own module and adds itself to the app in
:func:`build_app`; heavy imports happen inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

__all__ = ["build_app", "main"]


def build_app() -> typer.Typer:
    """Return the Typer app with every command registered."""
    app = typer.Typer(
        name="tiered-router",
        help="Route an agent's model calls between a fast diffusion tier and a frontier tier.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    from tiered_router.cli import _dataset_cmds, _demo, _eval_cmds, _policy_cmds

    app.callback()(_root)
    _policy_cmds.register(app)
    _eval_cmds.register(app)
    _dataset_cmds.register(app)
    _demo.register(app)
    return app


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tiered-router {version('tiered-router')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("tiered-router (not installed: run from a source checkout)")
        raise typer.Exit()


def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Route an agent's model calls between a fast diffusion tier and a frontier tier."""


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI (the ``tiered-router`` console script)."""
    app = build_app()
    app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="tiered-router")
