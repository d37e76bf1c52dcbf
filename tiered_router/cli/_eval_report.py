"""What ``tiered-router eval`` and ``calibrate`` print: the summary, the sweep, the baselines.

Tables are drawn with rich; each function takes a finished
:class:`~tiered_router.evaluation.results.EvalResult` and prints, nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tiered_router.evaluation.results import EvalResult
    from tiered_router.evaluation.verdict import ThresholdInterval

__all__ = ["interval_text", "print_baselines", "print_calibration", "print_sweep", "print_table"]


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def print_table(console: Console, result: EvalResult, policy_label: str) -> None:
    from rich.table import Table

    s = result.summary
    table = Table(
        title=f"{policy_label} on {result.dataset} ({s.n} turns)",
        caption=f"fast = {result.fast_model}, frontier = {result.frontier_model}",
        show_header=True,
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("all-frontier", justify="right")
    rows = [
        ("threshold", f"{s.threshold:g}", ""),
        ("quality (mean label)", _num(s.quality, 4), _num(s.quality_frontier, 4)),
        ("quality retained", _pct(s.quality_retained), "100.0%"),
        ("cost (US$)", f"{s.cost:.4f}", f"{s.cost_frontier:.4f}"),
        ("cost saved", _pct(s.cost_saved), ""),
        ("latency mean (s, simulated)", _num(s.latency_mean_s), _num(s.latency_frontier_mean_s)),
        ("latency p95 (s, simulated)", _num(s.latency_p95_s), _num(s.latency_frontier_p95_s)),
        ("fast share (answered fast)", _pct(s.fast_share), "0.0%"),
        ("frontier calls", _pct(s.frontier_call_share), "100.0%"),
        ("escalation rate (of fast)", f"{_pct(s.escalation_rate)} ({s.escalations})", ""),
    ]
    if s.tasks:
        rows.append(
            (
                f"task latency mean (s, {s.tasks} tasks)",
                _num(s.task_latency_mean_s),
                _num(s.task_latency_frontier_mean_s),
            )
        )
        rows.append(("task latency p95 (s)", _num(s.task_latency_p95_s), ""))
    g = s.gate
    rows += [
        ("gate: P(wrong | pass)", _pct(g.p_wrong_given_pass), f"{g.drafts} drafts"),
        ("gate: P(fail | wrong) catch", _pct(g.p_fail_given_wrong), ""),
        ("gate: P(fail | right) false alarm", _pct(g.p_fail_given_right), ""),
        ("APGR (random 0.5)", _num(s.apgr), f"oracle {_num(s.apgr_oracle)} *"),
        ("CPT(50%)", _pct(s.cpt50), ""),
        ("CPT(80%)", _pct(s.cpt80), ""),
    ]
    if s.failures:
        rows.append(("turns without an answer", str(s.failures), ""))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if s.escalation_reasons:
        reasons = ", ".join(f"{k} {v}" for k, v in s.escalation_reasons.items())
        checks = ", ".join(f"{k} {v}" for k, v in s.failed_checks.items()) or "none"
        console.print(f"escalations: {reasons}; failed checks: {checks}")
    if s.rules:
        console.print("rules: " + ", ".join(f"{k} {v}" for k, v in s.rules.items()))
    if result.panel is not None:
        p = result.panel
        console.print(
            f"draft panel: k={p.k}, min_agreement {p.min_agreement:g}: agreed {p.agreed}, "
            f"disagreed {p.disagreed} (escalated), not comparable {p.not_comparable} (gate); "
            f"drafts cost ${p.draft_cost:.4f}",
            highlight=False,
        )
    print_sweep(console, result)
    print_baselines(console, result)
    from tiered_router.evaluation.verdict import ORACLE_MEANING, small_sample

    console.print(f"* {ORACLE_MEANING}", highlight=False, markup=False)
    for note in result.notes:
        console.print(f"[dim]note: {note}[/dim]", highlight=False)
    warning = small_sample(s.n)
    if warning is not None:
        console.print(f"[yellow]warning: {warning}[/yellow]", highlight=False)


def _sweep_rows(result: EvalResult, count: int = 8) -> list[tuple[bool, Any]]:
    """About ``count`` sweep points spread over the frontier share, plus the policy's own."""
    points = list(result.points)
    if not points:
        return []
    threshold = result.summary.threshold
    share = result.summary.frontier_call_share
    own = min(points, key=lambda p: (abs(p.strong_share - share), abs(p.threshold - threshold)))
    picked = {id(own): own}
    for k in range(count):
        near = min(points, key=lambda p: abs(p.strong_share - k / (count - 1)))
        picked.setdefault(id(near), near)
    ordered = sorted(picked.values(), key=lambda p: (p.strong_share, -p.threshold))
    return [(p is own, p) for p in ordered]


def print_sweep(console: Console, result: EvalResult) -> None:
    from rich.table import Table

    s = result.summary
    table = Table(title="threshold sweep (the policy's row marked)", show_header=True)
    for name in ("", "threshold", "frontier calls", "quality retained", "cost saved", "PGR"):
        table.add_column(name, justify="right")
    gap = s.q_strong - s.q_weak
    for own, p in _sweep_rows(result):
        retained = p.quality / s.quality_frontier if s.quality_frontier else None
        saved = 1 - p.cost / s.cost_frontier if s.cost_frontier else None
        if saved is not None and abs(saved) < 5e-4:
            saved = 0.0  # no "-0.0%" from rounding
        pgr = (p.quality - s.q_weak) / gap if gap > 0 else None
        table.add_row(
            "policy ->" if own else "",
            f"{p.threshold:g}",
            _pct(p.strong_share),
            _pct(retained),
            _pct(saved),
            _num(pgr),
        )
    console.print(table)


def print_baselines(console: Console, result: EvalResult) -> None:
    s = result.summary
    if not result.baselines:
        return
    parts = [f"policy quality {s.quality:.4f}, cost ${s.cost:.4f}"]
    same_cost = [b for b in result.baselines if b.name.endswith("(same cost)")]
    same_share = [b for b in result.baselines if b not in same_cost]
    for b in same_share:
        parts.append(f"{b.name} {b.quality:.4f}, ${b.cost:.4f}")
    console.print(
        f"at the policy's frontier share ({_pct(s.frontier_call_share)}): " + "; ".join(parts),
        highlight=False,
    )
    if same_cost:
        console.print(
            f"at the policy's cost (${s.cost:.4f}): "
            + "; ".join(
                f"{b.name} {b.quality:.4f} ({_pct(b.frontier_share)} frontier)" for b in same_cost
            ),
            highlight=False,
        )
    from tiered_router.evaluation.verdict import judge

    verdict = judge(result)
    if verdict is not None:
        console.print(verdict.text, highlight=False, markup=False)


def interval_text(interval: ThresholdInterval | None, n: int) -> str:
    """The calibrated threshold's bootstrap interval in one line."""
    if interval is None:
        return f"threshold interval: no resample of the {n} turns meets the target"
    unmet = f", {interval.unmet} of which met no threshold" if interval.unmet else ""
    return (
        f"threshold 95 % bootstrap interval: {interval.low:g} to {interval.high:g} over "
        f"{interval.resamples} resamples of the {n} turns{unmet}"
    )


def print_calibration(
    result: EvalResult,
    target: str,
    expected: dict[str, Any],
    written: Path | None,
    interval: ThresholdInterval | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    s = result.summary
    table = Table(title=f"calibrated for {target} on {result.dataset} ({s.n} turns)")
    table.add_column("metric")
    table.add_column("calibrated", justify="right")
    table.add_column("current", justify="right")
    table.add_row("threshold", f"{expected['threshold']:g}", f"{s.threshold:g}")
    table.add_row("quality", _num(expected["quality"], 4), _num(s.quality, 4))
    table.add_row("quality retained", _pct(expected["quality_retained"]), _pct(s.quality_retained))
    table.add_row("cost (US$)", f"{expected['cost']:.4f}", f"{s.cost:.4f}")
    table.add_row("cost saved", _pct(expected["cost_saved"]), _pct(s.cost_saved))
    table.add_row("fast share", _pct(expected["fast_share"]), _pct(s.fast_share))
    table.add_row(
        "frontier calls", _pct(expected["frontier_call_share"]), _pct(s.frontier_call_share)
    )
    table.add_row("latency mean (s)", _num(expected["latency_mean_s"]), _num(s.latency_mean_s))
    if "drafts_k" in expected and result.panel is not None:
        table.add_row("drafts k", str(expected["drafts_k"]), str(result.panel.k))
        table.add_row(
            "drafts min_agreement",
            f"{expected['drafts_min_agreement']:g}",
            f"{result.panel.min_agreement:g}",
        )
    console = Console()
    console.print(table)
    console.print(interval_text(interval, s.n), highlight=False)
    if written is not None:
        console.print(f"wrote scoring.threshold: {expected['threshold']:g} to {written}")
        if "drafts_k" in expected:
            console.print(
                f"wrote drafts.k: {expected['drafts_k']}, drafts.min_agreement: "
                f"{expected['drafts_min_agreement']:g} to {written}"
            )
