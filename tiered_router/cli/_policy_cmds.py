"""The policy commands (validate, explain, run, serve): placeholder until they are written."""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add the policy commands to ``app`` (none yet)."""
