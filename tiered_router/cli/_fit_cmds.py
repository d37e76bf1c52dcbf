"""``tiered-router fit-scorer``: fit the learned scorer on your recorded traffic, checked first.

Cross-validates the learned scorer on a dataset of both tiers' recorded outcomes, compares
it with prompt length, random and the policy's current scorer on the same rows, and (with
``--output``) writes the weights fitted on every row. The work is
:func:`tiered_router.evaluation.scorer_fit.fit_scorer`.

On a policy with a ``drafts:`` panel whose drafts the data records (several models, or
``samples``) it fits the panel's **deferral model** instead
(:func:`tiered_router.evaluation.deferral.fit_deferral_model`): prompt features plus what
the drafts say beyond their majority, cross-validated against the panel alone, prompt
length and random at the same cost; ``--output`` writes the model ``drafts.deferral.path``
names.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tiered_router.cli._eval_cmds import (
    _DATA_HELP,
    FastModelOption,
    FrontierModelOption,
    _fail,
    _load,
)

if TYPE_CHECKING:
    from tiered_router.evaluation.dataset import Dataset
    from tiered_router.evaluation.scorer_fit import ScorerFitReport
    from tiered_router.policy._schema import Policy
    from tiered_router.scoring import Scorer

__all__ = ["register"]


_SEEN = (
    "the current scorer's shipped weights were trained on rows of this data: its figures "
    "here are in-sample (optimistic)"
)


def _current_saw(policy: Policy, data: str | None) -> bool:
    """Whether the policy's scorer uses shipped weights trained on the named data's rows."""
    from tiered_router.evaluation.sources import SOURCE_NAMES

    scoring = policy.scoring
    if data is None or Path(data).exists() or scoring.options.get("path"):
        return False
    names = {part.split(":")[0].strip().lower() for part in data.split("+")}
    if not names <= set(SOURCE_NAMES):
        return False
    if scoring.type == "transfer":  # trained on every source but the bundled sample's rows
        return bool(names - {"sample"})
    if scoring.type == "learned":  # trained on RouteLLM's MMLU and GSM8K rows
        return bool(names & {"sample", "mmlu", "gsm8k"})
    return False


def _num(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.3f}"


def _print_report(report: ScorerFitReport, output: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"scorers on {report.dataset} ({report.rows} turns, {report.folds}-fold "
        "cross-validation)",
        caption=f"fast = {report.fast_model} (mean label {report.q_fast:.3f}), "
        f"frontier = {report.frontier_model} ({report.q_frontier:.3f})",
    )
    table.add_column("router")
    table.add_column("APGR", justify="right")
    table.add_column("95 % interval", justify="right")
    table.add_column("fitted minus it [95 %]", justify="right")
    for name, value in report.apgr.items():
        low_high = report.intervals.get(name)
        interval = f"{_num(low_high[0])} to {_num(low_high[1])}" if low_high else ""
        diff = report.differences.get(name)
        delta = f"{diff[0]:+.3f} [{_num(diff[1])}, {_num(diff[2])}]" if diff else ""
        label = "fitted (learned, out of fold)" if name == "fitted" else name
        table.add_row(label, _num(value), interval, delta)
    console.print(table)
    for note in report.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"verdict: {report.verdict}")
    if output is not None:
        typer.echo(f"wrote the scorer fitted on all {report.rows} rows to {output}; use it with")
        typer.echo(f"  scoring: {{type: learned, options: {{path: {output}}}}}")
        typer.echo(
            "and pick its threshold with tiered-router calibrate (its scores are on another "
            "scale than your current scorer's)"
        )


def fit_scorer_command(
    policy: Annotated[
        Path | None,
        typer.Argument(help="Policy whose scorer to compare with (default: the bundled one)."),
    ] = None,
    data: Annotated[str | None, typer.Option("--data", "-d", help=_DATA_HELP)] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the weights fitted on every row here (JSON)."),
    ] = None,
    fast_model: FastModelOption = None,
    frontier_model: FrontierModelOption = None,
    folds: Annotated[int, typer.Option("--folds", min=2, help="Cross-validation folds.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the folds and bootstrap.")] = 0,
    bootstrap: Annotated[
        int, typer.Option("--bootstrap", min=0, help="Bootstrap resamples for the intervals.")
    ] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    holdout: Annotated[
        float | None,
        typer.Option(
            "--holdout",
            help="Fit on the rows 'calibrate --holdout SHARE' calibrates on (the same hash of "
            "the row id), so that calibrate's held-out figures are on rows the fit never saw.",
        ),
    ] = None,
    panel_labels: Annotated[
        bool,
        typer.Option(
            "--panel-labels",
            help="On a policy with a drafts: panel: fit the policy's scorer (decided before "
            "any draft) on whether the panel answers each turn right itself, instead of the "
            "panel's deferral model.",
        ),
    ] = False,
) -> None:
    """Fit the learned scorer on recorded outcomes of both tiers; compare it before you switch.

    On a policy with a drafts: panel whose drafts the data records, fit the panel's deferral
    model (prompt and draft signals) instead; with --panel-labels, fit the scorer that
    decides before any draft on the panel's own outcomes.
    """
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.scorer_fit import fit_scorer

    if output is not None and not output.parent.is_dir():
        raise _fail(f"--output: cannot write {output}: no folder {output.parent}")
    if holdout is not None and not 0 < holdout < 1:
        raise _fail(f"--holdout: a share in (0, 1), got {holdout}", code=2)
    loaded, dataset = _load(policy, data, fast_model, frontier_model)
    if holdout is not None:
        from tiered_router.evaluation.verification import holdout_split

        calibration, _ = holdout_split(dataset, holdout)
        dataset = replace(dataset, rows=tuple(r for r in dataset.rows if r.id in calibration))
        if not as_json:
            typer.echo(
                f"fitting on {len(dataset.rows)} rows; the {holdout:.0%} that calibrate "
                f"--holdout {holdout:g} keeps out are left out here too",
                err=True,
            )
    if panel_labels:
        _fit_for_panel(loaded, dataset, output, fast_model, frontier_model, folds, seed,
                       bootstrap=bootstrap, as_json=as_json)  # fmt: skip
        return
    if _replays_panel(loaded, dataset, fast_model):
        _fit_deferral(loaded, dataset, output, folds=folds, seed=seed, as_json=as_json)
        return
    try:
        report = fit_scorer(
            dataset,
            compare=_current(loaded),
            folds=folds,
            seed=seed,
            bootstrap=bootstrap,
        )
    except (DatasetError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if _current_saw(loaded, data if data is not None else dataset.name):
        report = replace(report, notes=(*report.notes, _SEEN))
    if _saved_as_json(report, output, as_json=as_json):
        return
    _print_report(report, output)


def _current(policy: Policy) -> dict[str, Scorer]:
    """The policy's own scorer, to compare a fitted one with (``current (type)``)."""
    from tiered_router.scoring import build_scorer

    try:
        return {f"current ({policy.scoring.type})": build_scorer(policy.scoring)}
    except ValueError as exc:
        raise _fail(f"policy scoring: {exc}") from exc


def _fit_for_panel(
    policy: Policy,
    dataset: Dataset,
    output: Path | None,
    fast_model: str | None,
    frontier_model: str | None,
    folds: int,
    seed: int,
    *,
    bootstrap: int,
    as_json: bool,
) -> None:
    """``fit-scorer --panel-labels``: the scorer in front of the panel, on its outcomes."""
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.panel_scorer import fit_panel_scorer

    try:
        report = fit_panel_scorer(
            policy,
            dataset,
            compare=_current(policy),
            fast_model=fast_model,
            frontier_model=frontier_model,
            folds=folds,
            seed=seed,
            bootstrap=bootstrap,
        )
    except (DatasetError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if _saved_as_json(report, output, as_json=as_json):
        return
    _print_report(report, output)


def _saved_as_json(report: Any, output: Path | None, *, as_json: bool) -> bool:
    """Write ``report.model`` to ``output`` (if given); with ``--json``, print the report.

    ``report`` is a scorer fit's or a deferral fit's report: both carry ``model`` (with
    ``save``) and ``to_dict()``.

    Returns:
        Whether the report was printed as JSON (then nothing more is printed).
    """
    if output is not None:
        try:
            report.model.save(output)
        except OSError as exc:
            raise _fail(f"--output: cannot write {output}: {exc.strerror or exc}") from exc
    if as_json:
        out = report.to_dict()
        out["output"] = None if output is None else str(output)
        typer.echo(json.dumps(out, indent=2))
    return as_json


def _replays_panel(policy: Policy, dataset: Dataset, fast_model: str | None) -> bool:
    """Whether the policy has a panel the data records several drafts of (a deferral fit)."""
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.panel import panel_models, recorded_drafts

    fast = fast_model or dataset.fast_model
    if policy.drafts is None or fast is None:
        return False
    try:
        spec = panel_models(policy, dataset, fast)
    except DatasetError:
        return False
    return spec is not None and recorded_drafts(dataset, spec) >= 2


def _fit_deferral(
    policy: Policy,
    dataset: Dataset,
    output: Path | None,
    *,
    folds: int,
    seed: int,
    as_json: bool,
) -> None:
    """``fit-scorer`` on a policy with a panel: fit, compare and write its deferral model."""
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.deferral import fit_deferral_model
    from tiered_router.exceptions import TieredRouterError

    try:
        report = fit_deferral_model(policy, dataset, folds=folds, seed=seed)
    except (DatasetError, TieredRouterError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if _saved_as_json(report, output, as_json=as_json):
        return
    panel = report.panel
    typer.echo(
        f"deferral model for the panel of {panel['k']} ({', '.join(panel['models'])}) on "
        f"{report.dataset}: {report.rows} turns, {report.asked} with an answer the panel "
        f"accepts, {report.folds}-fold cross-validation"
    )
    typer.echo(
        f"the panel alone (min_agreement {panel['min_agreement']:g}): quality retained "
        f"{report.panel_only[0]:.1%} at {report.panel_only[1]:.1%} of the all-frontier cost"
    )
    typer.echo("quality retained at the same cost (share of all-frontier):")
    typer.echo("  " + "".join(f"{c:>9.1%}" for c in report.costs) + "  cost")
    for name, values in report.retained.items():
        label = "deferral model (out of fold)" if name == "deferral model" else name
        typer.echo("  " + "".join(f"{v:>9.1%}" for v in values) + f"  {label}")
    for note in report.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"verdict: {report.verdict}")
    if output is not None:
        typer.echo(
            f"wrote the deferral model fitted on all {report.asked} rows to {output}; use it"
        )
        typer.echo(f"  drafts: {{..., deferral: {{path: {output}}}}}")
        typer.echo("and pick its threshold with tiered-router calibrate (--write sets it)")


def register(app: typer.Typer) -> None:
    """Add the ``fit-scorer`` command to ``app``."""
    app.command("fit-scorer")(fit_scorer_command)
