"""The ``tiered-router`` command line: validate, explain, serve, eval, calibrate, fit-scorer, demo.

Each group of commands lives in its own module and adds itself to the app in
:func:`build_app`; heavy imports happen inside the commands, so ``--help`` stays fast. The
command line is the ``cli`` extra (typer, rich, ruamel.yaml): from a checkout ``pip install
".[cli]"``; the library itself never imports them.

Wing (docs/architecture.md): the top of the graph; may import any wing (lazily, inside the
commands). Nothing imports it. A new command group: a module here that adds itself in
:func:`build_app`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["build_app", "main"]

_CLI_PACKAGES = frozenset({"typer", "rich", "click", "ruamel"})


def build_app() -> typer.Typer:
    """Return the Typer app with every command registered.

    Raises:
        ImportError: When the ``cli`` extra is not installed; the message says how to.
    """
    try:
        import typer
    except ModuleNotFoundError as exc:
        raise _missing_extra(exc) from exc
    app = typer.Typer(
        name="tiered-router",
        help="Route an agent's model calls between a fast diffusion tier and a frontier tier.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    from tiered_router.cli import (
        _dataset_cmds,
        _demo,
        _eval_cmds,
        _fit_cmds,
        _monitor_cmd,
        _policy_cmds,
        _validate_cmd,
    )

    app.callback()(_root_callback())
    _validate_cmd.register(app)
    _policy_cmds.register(app)
    _eval_cmds.register(app)
    _fit_cmds.register(app)
    _dataset_cmds.register(app)
    _demo.register(app)
    _monitor_cmd.register(app)
    return app


def _missing_extra(exc: ModuleNotFoundError) -> ImportError:
    from tiered_router.exceptions import missing_extra

    return ImportError(missing_extra("cli", f"the tiered-router command line needs {exc.name!r}"))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import typer

        try:
            typer.echo(f"tiered-router {version('tiered-router')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("tiered-router (not installed: run from a source checkout)")
        raise typer.Exit()


def _root_callback() -> Callable[..., None]:
    import typer

    def root(
        show_version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        """Route an agent's model calls between a fast diffusion tier and a frontier tier."""

    return root


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI (the ``tiered-router`` console script)."""
    try:
        app = build_app()
    except ImportError as exc:
        cause = exc.__cause__
        if not isinstance(cause, ModuleNotFoundError) or cause.name not in _CLI_PACKAGES:
            raise
        sys.stderr.write(f"tiered-router: {exc}\n")
        raise SystemExit(1) from None
    app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="tiered-router")
