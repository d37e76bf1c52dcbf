"""``tiered-router eval`` and ``tiered-router calibrate``: offline evaluation on recorded outcomes.

Both commands replay recorded model outcomes through a policy (no keys, no network). With
no policy and no ``--data``, ``eval`` runs the bundled default policy over the bundled
sample of RouteLLM outcomes. Heavy imports happen inside the commands.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tiered_router.cli._eval_report import (
    print_calibration,
    print_table,
)
from tiered_router.cli._verify_cmd import (
    ConfidenceOpt,
    HoldoutOpt,
    ScopeOpt,
    check_verify_options,
    refuse_without_panel,
)

if TYPE_CHECKING:
    from tiered_router.evaluation.dataset import Dataset
    from tiered_router.evaluation.results import EvalResult
    from tiered_router.policy._schema import Policy

__all__ = ["register"]

_DATA_HELP = (
    "Dataset file (.jsonl / .jsonl.gz) or data name: sample, mmlu, gsm8k, mt_bench, "
    "arc_challenge, mbpp, winogrande, routerbench, bfcl, alpacaeval; a name may pick the "
    "models as NAME:FAST->FRONTIER (e.g. bfcl:gpt-4o-mini-2024-07-18-FC->gpt-4o-2024-08-06-FC). "
    "Default: the policy's replay data, else the bundled sample."
)

FastModelOption = Annotated[
    str | None, typer.Option("--fast-model", help="Recorded model for the fast tier.")
]
FrontierModelOption = Annotated[
    str | None, typer.Option("--frontier-model", help="Recorded model for the frontier tier.")
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr; return the exit to raise (1 errors, 2 usage)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _load(
    policy: Path | None, data: str | None, fast_model: str | None, frontier_model: str | None
) -> tuple[Policy, Dataset]:
    """Load the policy (bundled default when ``None``) and the data, with the chosen models."""
    from tiered_router.evaluation.calibration import load_policy_offline
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.sources import bundled_policy_path, load_data, split_spec
    from tiered_router.exceptions import PolicyError

    source = policy if policy is not None else bundled_policy_path()
    try:
        loaded = load_policy_offline(source)
    except PolicyError as exc:
        raise _fail(str(exc)) from exc
    if data is None:
        fast = loaded.backends[loaded.tiers.fast]
        data = str(fast.options.get("data") or "sample") if fast.type == "replay" else "sample"
    try:
        dataset = load_data(data)
        if split_spec(data)[1:] == (None, None):  # no pair in --data: the tiers' models play
            named = {t: m for t, (m, _) in _policy_models(loaded).items() if m in dataset.models}
            fast_model = fast_model or named.get("fast")
            frontier_model = frontier_model or named.get("frontier")
        if fast_model or frontier_model:
            dataset = dataset.with_pair(
                fast_model or dataset.fast_model or "",
                frontier_model or dataset.frontier_model or "",
            )
    except DatasetError as exc:
        raise _fail(str(exc)) from exc
    return loaded, dataset


def _policy_models(policy: Policy) -> dict[str, tuple[str | None, Any]]:
    """The model and price each tier of the policy would use, presets and table applied."""
    from tiered_router.backends.presets import resolve_config

    out: dict[str, tuple[str | None, Any]] = {}
    for tier in ("fast", "frontier"):
        name = policy.backend_for(tier)
        config = policy.backends[name]
        if config.type == "openai":
            config = resolve_config(config, backend=name, prices=policy.prices)
        model = config.model
        if config.type == "replay":
            model = str(config.options.get("outcome_model") or config.model or "") or None
        out[tier] = (model, config.price if "price" in config.model_fields_set else None)
    return out


def _price_text(price: Any) -> str:
    if price is None:
        return "no price"
    return f"${price.input_per_mtok:g} in / ${price.output_per_mtok:g} out per 1M tokens"


_ROUTELLM_DATA = ("sample", "mmlu", "gsm8k")
_IN_SAMPLE = (
    "the policy uses the shipped learned-scorer weights, trained on RouteLLM MMLU and GSM8K "
    "rows this data is drawn from: the figures are in-sample (optimistic); docs/scoring.md "
    "has held-out figures"
)


def _in_sample(policy: Policy, dataset: Dataset) -> bool:
    """Whether a learned scorer with the shipped weights is replayed on its training data."""
    scoring = policy.scoring
    if scoring.type != "learned" or scoring.options.get("path"):
        return False
    parts = dataset.name.lower().replace("+", " ").split()
    return any(part.split(":")[0] in _ROUTELLM_DATA for part in parts)


def _pair_notes(
    policy: Policy, result: EvalResult, dataset: Dataset, prices: str, *, quiet: bool
) -> list[str]:
    """Say which model pair and prices the data replays; warn where the policy differs.

    Lines go to stderr unless ``quiet`` (``--json``: the warnings are in the JSON). Returns
    the warnings (empty when the data's pair is the policy's).
    """
    ours = _policy_models(policy)
    replayed = {"fast": result.fast_model, "frontier": result.frontier_model}
    lines = [
        f"replaying {result.dataset}: fast = {replayed['fast']}, frontier = {replayed['frontier']}"
    ]
    for tier in ("fast", "frontier"):
        model = replayed[tier]
        listed = dataset.prices.get(model or "")
        if prices == "policy":
            source = f"the policy's price ({_price_text(ours[tier][1])})"
        elif listed is not None:
            source = f"recorded costs, else the data's list price ({_price_text(listed)})"
        else:
            source = f"recorded costs, else the policy's price ({_price_text(ours[tier][1])})"
        lines.append(f"  {tier} costs: {source}")
    warnings = []
    for tier in ("fast", "frontier"):
        mine = ours[tier][0]
        if mine is not None and replayed[tier] is not None and mine != replayed[tier]:
            warnings.append(
                f"the data replays {replayed[tier]} on the {tier} tier, but the policy's "
                f"{tier} model is {mine}"
            )
    if quiet:
        return warnings
    for line in lines:
        typer.echo(line, err=True)
    if _in_sample(policy, dataset):
        typer.echo(f"warning: {_IN_SAMPLE}", err=True)
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    if warnings:
        typer.echo(
            "warning: quality, cost and any threshold found here describe the data's pair, not "
            "your models; pick recorded models with --fast-model/--frontier-model, or build "
            "data from your own traffic (tiered-router dataset from-traces)",
            err=True,
        )
    return warnings


@contextmanager
def _progress(total: int, *, enabled: bool, label: str) -> Iterator[Callable[[int], None] | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        f"[progress.description]{label}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        # advancing rich's bar costs far more than replaying a row: move it in ~1 % steps
        every = max(1, total // 100)
        pending = [0]

        def step(n: int) -> None:
            pending[0] += n
            if pending[0] >= every:
                bar.advance(task, pending[0])
                pending[0] = 0

        yield step
        bar.advance(task, pending[0])


def _run(
    policy: Policy,
    dataset: Dataset,
    *,
    quiet: bool,
    prices: str,
    latency: str,
    fast_model: str | None,
    frontier_model: str | None,
) -> EvalResult:
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.results import evaluate
    from tiered_router.exceptions import TieredRouterError

    show = not quiet and sys.stderr.isatty()
    try:
        with _progress(len(dataset), enabled=show, label=f"replaying {dataset.name}") as step:
            return evaluate(
                policy,
                dataset,
                fast_model=fast_model,
                frontier_model=frontier_model,
                prices="policy" if prices == "policy" else "data",
                recorded_latency=latency == "recorded",
                progress=step,
            )
    except (DatasetError, TieredRouterError, ValueError) as exc:
        # a policy the router cannot build (bad scorer options, unknown check...) is an
        # error message, never a traceback
        raise _fail(str(exc)) from exc


def eval_command(
    policy: Annotated[
        Path | None,
        typer.Argument(
            help="Policy YAML (default: the bundled evaluation policy).", show_default=False
        ),
    ] = None,
    data: Annotated[str | None, typer.Option("--data", "-d", help=_DATA_HELP)] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
    fast_model: FastModelOption = None,
    frontier_model: FrontierModelOption = None,
    prices: Annotated[
        str,
        typer.Option(help="Costs from the data's recorded/list prices ('data') or the policy's."),
    ] = "data",
    latency: Annotated[
        str,
        typer.Option(help="'recorded' latencies where the data has them, or always the 'model'."),
    ] = "recorded",
) -> None:
    """Replay recorded model outcomes through a policy and report quality, cost and latency."""
    if prices not in ("data", "policy"):
        raise _fail(f"--prices: 'data' or 'policy', not {prices!r}", code=2)
    if latency not in ("recorded", "model"):
        raise _fail(f"--latency: 'recorded' or 'model', not {latency!r}", code=2)
    loaded, dataset = _load(policy, data, fast_model, frontier_model)
    result = _run(
        loaded,
        dataset,
        quiet=as_json,
        prices=prices,
        latency=latency,
        fast_model=fast_model,
        frontier_model=frontier_model,
    )
    mismatch = _pair_notes(loaded, result, dataset, prices, quiet=as_json)
    from tiered_router.evaluation.verdict import judge, small_sample

    warning = small_sample(result.summary.n)
    if warning is not None and not as_json:
        typer.echo(f"warning: {warning}", err=True)
    if report is not None:
        from tiered_router.evaluation.report import render_html

        name = str(policy) if policy is not None else "the bundled default policy"
        report.write_text(
            render_html(result, policy=name, scorer=loaded.scoring.type), encoding="utf-8"
        )
    if as_json:
        out = result.to_dict()
        verdict = judge(result)
        out["verdict"] = (
            None if verdict is None else {"outcome": verdict.outcome, "text": verdict.text}
        )
        out["small_sample"] = warning
        out["policy"] = str(policy) if policy is not None else "bundled default"
        out["pair_differs_from_policy"] = mismatch
        out["in_sample"] = _in_sample(loaded, dataset)
        if report is not None:
            out["report"] = str(report)
        typer.echo(json.dumps(out, indent=2))
        return
    from rich.console import Console

    console = Console()
    print_table(console, result, str(policy) if policy else "default policy")
    if report is not None:
        console.print(f"report written to {report}")


def calibrate_command(
    policy: Annotated[Path, typer.Argument(help="Policy YAML to calibrate.")],
    data: Annotated[str | None, typer.Option("--data", "-d", help=_DATA_HELP)] = None,
    target_fast_share: Annotated[
        float | None,
        typer.Option("--target-fast-share", help="Least share of turns answered fast (0-1)."),
    ] = None,
    target_quality_retained: Annotated[
        float | None,
        typer.Option(
            "--target-quality-retained", help="Least share of all-frontier quality kept (0-1)."
        ),
    ] = None,
    max_cost: Annotated[
        str | None,
        typer.Option(
            "--max-cost", help="Most cost: US$ per turn (0.002) or % of all-frontier cost (40%)."
        ),
    ] = None,
    fast_model: FastModelOption = None,
    frontier_model: FrontierModelOption = None,
    write: Annotated[
        bool, typer.Option("--write", help="Update scoring.threshold in the policy file.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write even when the data's model pair is not the policy's, or when it has "
            "fewer than 200 turns with outcomes of both tiers.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    holdout: HoldoutOpt = None,
    confidence: ConfidenceOpt = 0.95,
    scope: ScopeOpt = "kind",
) -> None:
    """Pick the threshold that meets a target on recorded outcomes (and write it back).

    With a ``drafts:`` section, calibrate chooses the whole verification: per kind of turn
    (tools, JSON, final answers, prose) which of ``drafts.backends`` draft, ``k`` and
    ``min_agreement``, with the threshold, so that a one-sided lower confidence bound of the
    quality retained meets the target; ``--write`` sets every chosen key.
    """
    from tiered_router.evaluation.calibration import Target, calibrate_policy, write_threshold
    from tiered_router.evaluation.sweep import CalibrationError
    from tiered_router.exceptions import PolicyError

    given = [target_fast_share, target_quality_retained, max_cost]
    if sum(v is not None for v in given) != 1:
        raise _fail(
            "give exactly one target: --target-fast-share, --target-quality-retained or --max-cost",
            code=2,
        )
    try:
        if max_cost is not None:
            target = Target.max_cost(max_cost)
        else:
            target = Target(fast_share=target_fast_share, quality_retained=target_quality_retained)
    except ValueError as exc:
        raise _fail(str(exc), code=2) from exc
    check_verify_options(holdout=holdout, confidence=confidence, scope=scope)
    loaded, dataset = _load(policy, data, fast_model, frontier_model)
    result = _run(
        loaded,
        dataset,
        quiet=as_json,
        prices="data",
        latency="recorded",
        fast_model=None,
        frontier_model=None,
    )
    mismatch = _pair_notes(loaded, result, dataset, "data", quiet=as_json)
    if loaded.drafts is not None and result.panel is not None:
        # the data replays the panel: choose the whole verification, for the bound
        from tiered_router.cli._verify_cmd import calibrate_verification

        if write and mismatch and not force:
            raise _fail("not writing: calibrated on another model pair; pass --force")
        calibrate_verification(
            policy,
            loaded,
            dataset,
            target,
            holdout=holdout,
            confidence=confidence,
            scope=scope,
            write=write,
            force=force,
            as_json=as_json,
        )
        return
    refuse_without_panel(holdout=holdout, scope=scope)
    if write and mismatch and not force:
        raise _fail(
            "not writing the threshold: it was calibrated on another model pair than the "
            "policy's (see the warnings above); pass --force to write it anyway"
        )
    panel = None
    try:
        if loaded.drafts is not None and result.panel is not None:
            from tiered_router.evaluation.calibration import calibrate_panel

            panel = calibrate_panel(result, target, policy=loaded, dataset=dataset)
            point = panel.point
        else:
            point = calibrate_policy(result, target)
    except CalibrationError as exc:
        raise _fail(str(exc)) from exc
    from tiered_router.cli._eval_report import interval_text
    from tiered_router.evaluation.verdict import (
        MIN_CALIBRATION_ROWS,
        small_sample,
        threshold_interval,
    )

    s = result.summary
    interval = threshold_interval(result, target)
    if write and s.n < MIN_CALIBRATION_ROWS and not force:
        raise _fail(
            f"not writing the threshold {point.threshold:g}: it comes from {s.n} turn(s) with "
            f"outcomes of both tiers, fewer than {MIN_CALIBRATION_ROWS}; "
            f"{interval_text(interval, s.n)}. Record more traffic, or pass --force"
        )
    warning = small_sample(s.n)
    if warning is not None and not as_json:
        typer.echo(f"warning: {warning}", err=True)
    expected = {
        "threshold": point.threshold,
        "quality": point.quality,
        "quality_retained": point.quality / s.quality_frontier if s.quality_frontier else None,
        "cost": point.cost,
        "cost_saved": 1 - point.cost / s.cost_frontier if s.cost_frontier else None,
        "fast_share": point.fast_share,
        "frontier_call_share": point.strong_share,
        "escalation_rate": point.escalation_rate,
        "latency_mean_s": point.latency_s,
    }
    if panel is not None:  # the panel's size and agreement were swept with the threshold
        expected["drafts_k"] = panel.k
        expected["drafts_min_agreement"] = panel.min_agreement
        expected["panels_tried"] = panel.tried
    if write:
        try:
            if panel is not None:
                from tiered_router.evaluation.calibration import write_panel

                write_panel(
                    policy,
                    threshold=point.threshold,
                    k=panel.k,
                    min_agreement=panel.min_agreement,
                )
            else:
                write_threshold(policy, point.threshold)
        except PolicyError as exc:
            raise _fail(str(exc)) from exc
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "policy": str(policy),
                    "dataset": result.dataset,
                    "target": target.describe(),
                    "previous_threshold": s.threshold,
                    "expected": expected,
                    "threshold_interval": None
                    if interval is None
                    else {"low": interval.low, "high": interval.high, "unmet": interval.unmet},
                    "small_sample": warning,
                    "written": write,
                    "pair_differs_from_policy": mismatch,
                },
                indent=2,
            )
        )
        return
    print_calibration(result, target.describe(), expected, policy if write else None, interval)


def register(app: typer.Typer) -> None:
    """Add the ``eval`` and ``calibrate`` commands to ``app``."""
    app.command("eval")(eval_command)
    app.command("calibrate")(calibrate_command)
