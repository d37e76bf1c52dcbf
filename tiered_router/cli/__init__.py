"""The ``tiered-router`` command line: validate, explain, run, serve, eval, calibrate.

Each group of commands lives in its own module and adds itself to the app in
:func:`build_app`; heavy imports happen inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

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
    from tiered_router.cli import _eval_cmds, _policy_cmds

    _policy_cmds.register(app)
    _eval_cmds.register(app)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI (the ``tiered-router`` console script)."""
    app = build_app()
    app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="tiered-router")
