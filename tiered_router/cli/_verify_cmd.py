"""``tiered-router calibrate`` on a policy with ``drafts:``: choose the whole verification.

The work is :func:`tiered_router.evaluation.verification.choose_verification`; this module
prints it (per kind, the calibration and hold-out figures beside the baselines) and writes
every chosen key back with :func:`tiered_router.evaluation.calibration.write_verification`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from tiered_router.evaluation.calibration import Target
    from tiered_router.evaluation.dataset import Dataset
    from tiered_router.evaluation.verification import Choice, Figures
    from tiered_router.policy._schema import Policy

__all__ = [
    "ConfidenceOpt",
    "HoldoutOpt",
    "ScopeOpt",
    "calibrate_verification",
    "check_verify_options",
    "refuse_without_panel",
]

HoldoutOpt = Annotated[
    float | None,
    typer.Option(
        "--holdout",
        help="Keep this share of the rows out of the choice and print the chosen policy's "
        "figures on them (with a drafts: section).",
    ),
]
ConfidenceOpt = Annotated[
    float,
    typer.Option(
        "--confidence",
        help="Confidence of the one-sided bound the target must hold for (drafts: section).",
    ),
]

ScopeOpt = Annotated[
    str,
    typer.Option(
        "--scope",
        help="Where the target's bound must hold (drafts: section): 'kind' (every kind of "
        "turn on its own) or 'traffic' (all turns together, kinds traded against each other).",
    ),
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def check_verify_options(*, holdout: float | None, confidence: float, scope: str) -> None:
    """Refuse (exit 2) a ``--holdout``, ``--confidence`` or ``--scope`` out of its range."""
    if holdout is not None and not 0 < holdout < 1:
        raise _fail(f"--holdout: a share in (0, 1), got {holdout}", code=2)
    if not 0.5 <= confidence < 1:
        raise _fail(f"--confidence: in [0.5, 1), got {confidence}", code=2)
    if scope not in ("kind", "traffic"):
        raise _fail(f"--scope: 'kind' or 'traffic', got {scope!r}", code=2)


def refuse_without_panel(*, holdout: float | None, scope: str) -> None:
    """Refuse (exit 2) the options that only a replayed panel gives a meaning to."""
    for given, name in ((scope != "kind", "--scope"), (holdout is not None, "--holdout")):
        if given:
            raise _fail(
                f"{name}: needs a policy with a drafts: section and data that replays it "
                "(several drafts per turn)",
                code=2,
            )


def _line(name: str, fig: Figures) -> str:
    return (
        f"  {name:<22} {fig.n:>6} rows  quality retained {fig.retained:6.1%} "
        f"(lower bound {fig.retained_low:6.1%})  cost {fig.cost_share:6.1%} of all-frontier "
        f"(upper bound {fig.cost_share_high:6.1%})  answered fast {fig.fast_share:6.1%}"
    )


def _print(choice: Choice, target: Target, written: Path | None) -> None:
    typer.echo(
        f"target: {target.describe()}, for the one-sided {choice.confidence:.0%} lower bound "
        "(Fieller's bound on the quality ratio, "
        + ("per kind of turn" if choice.scope == "kind" else "over all turns together")
        + "; at most the exact Clopper-Pearson bound below 200 rows)"
    )
    typer.echo(f"threshold: {choice.threshold:g}  ({choice.tried} verifications replayed)")
    for kc in choice.kinds:
        typer.echo(f"{kc.kind:<7} {kc.verification.describe()}")
        typer.echo(_line("calibration rows", kc.figures))
    typer.echo("all kinds:")
    typer.echo(_line("calibration rows", choice.calibration))
    if choice.holdout is not None:
        typer.echo(_line("hold-out rows", choice.holdout))
    where = "hold-out" if choice.holdout is not None else "calibration"
    typer.echo(f"baselines on the {where} rows (quality retained, cost of all-frontier):")
    for name, (retained, cost) in choice.baselines.items():
        typer.echo(f"  {name:<26} {retained:6.1%}  {cost:6.1%}")
    if written is not None:
        typer.echo(f"wrote scoring.threshold and drafts (per kind) to {written}")


def _small(choice: Choice) -> list[str]:
    """Warnings for a choice made on few rows (overall, and per kind: the exact bound)."""
    from tiered_router.evaluation._bounds import MIN_BOUND_ROWS
    from tiered_router.evaluation.verdict import MIN_CALIBRATION_ROWS

    out = []
    n = choice.calibration.n
    if n < MIN_CALIBRATION_ROWS:
        out.append(
            f"only {n} calibration row(s): fewer than {MIN_CALIBRATION_ROWS}, the choice and "
            "its figures are noise (calibrate --write refuses without --force); record more "
            "traffic, or keep a smaller --holdout"
        )
    few = [f"{kc.kind} ({kc.figures.n})" for kc in choice.kinds if kc.figures.n < MIN_BOUND_ROWS]
    if few and choice.scope == "kind":  # with --scope traffic one bound covers every row
        out.append(
            f"fewer than {MIN_BOUND_ROWS} calibration rows for {', '.join(few)}: their quality "
            "bound is the exact (Clopper-Pearson) one where it is lower than Fieller's, so "
            "few rows show little"
        )
    return out


def calibrate_verification(
    path: Path,
    policy: Policy,
    dataset: Dataset,
    target: Target,
    *,
    holdout: float | None,
    confidence: float,
    scope: str = "kind",
    write: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Choose, print and (with ``write``) write the verification (see the module docs)."""
    from tiered_router.evaluation._verify_write import write_verification
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.sweep import CalibrationError
    from tiered_router.evaluation.verdict import MIN_CALIBRATION_ROWS
    from tiered_router.evaluation.verification import choose_verification
    from tiered_router.exceptions import PolicyError, TieredRouterError

    try:
        choice = choose_verification(
            policy, dataset, target, confidence=confidence, holdout=holdout, scope=scope
        )
    except (CalibrationError, DatasetError, TieredRouterError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    warnings = _small(choice)
    if not as_json:
        for warning in warnings:
            typer.echo(f"warning: {warning}", err=True)
    if write and choice.calibration.n < MIN_CALIBRATION_ROWS and not force:
        raise _fail(
            f"not writing: the choice comes from {choice.calibration.n} calibration rows, "
            f"fewer than {MIN_CALIBRATION_ROWS}; record more traffic, or pass --force"
        )
    if write and choice.threshold < 0:
        raise _fail(
            "not writing: on these rows only sending every turn to the frontier meets the "
            "target for the bound (no threshold of 0 to 1 does); record more rows, or lower "
            "the target"
        )
    if write:
        try:
            write_verification(path, choice)
        except PolicyError as exc:
            raise _fail(str(exc)) from exc
    if as_json:
        out = choice.to_dict()
        out.update(policy=str(path), dataset=dataset.name, target=target.describe(), written=write)
        out["warnings"] = warnings
        typer.echo(json.dumps(out, indent=2))
        return
    _print(choice, target, path if write else None)
