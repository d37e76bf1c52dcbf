"""A self-contained HTML report of an evaluation: inline SVG charts, inline CSS, no scripts.

The report opens offline in any browser and loads nothing from the network. It shows the
headline metrics, the cost-quality curve across thresholds (the policy's threshold marked,
the random and oracle routers for reference), the PGR curve against the share of frontier
calls, the escalation breakdown and the gate's confusion against the labels.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tiered_router.evaluation.monitor_timeline import MonitorPoint
from tiered_router.evaluation.results import EvalResult, Summary
from tiered_router.evaluation.sweep import SweepPoint

__all__ = ["monitor_charts", "render_html", "render_monitor_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:980px;color:#1d232a;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem}
.sub{color:#5b6670;margin-top:0}table{border-collapse:collapse;margin:.5rem 0}
td,th{padding:.25rem .7rem;border-bottom:1px solid #e3e7ea;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f4f6f8}
.grid{display:flex;flex-wrap:wrap;gap:1.5rem}.note{color:#5b6670;font-size:.9em}
svg text{font:12px system-ui,sans-serif;fill:#34404a}svg .axis{stroke:#8a959e}
svg .gridline{stroke:#eceff1}.warn{color:#9a6700;font-weight:600}
"""

_COLORS = {
    "policy": "#1f6feb",
    "random": "#8a959e",
    "oracle": "#2da44e",
    "chosen": "#d1242f",
    "frontier": "#bf8700",
    "tools": "#1f6feb",
    "json": "#8250df",
    "final": "#2da44e",
    "prose": "#8a959e",
    "target": "#d1242f",
}

_MAX_LINE_POINTS = 400


@dataclass(frozen=True, slots=True)
class _Series:
    name: str
    label: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = [round(first, 10)]
    while ticks[-1] < hi - 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt_tick(v: float) -> str:
    return f"{v:g}" if abs(v) >= 0.01 or v == 0 else f"{v:.2g}"


def _thin(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= _MAX_LINE_POINTS:
        return list(points)
    step = (len(points) - 1) / (_MAX_LINE_POINTS - 1)
    return [points[round(i * step)] for i in range(_MAX_LINE_POINTS)]


def _chart(
    chart_id: str,
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[_Series],
    marker: tuple[float, float, str] | None,
) -> str:
    legend = [(s.name, s.label) for s in series] + ([("chosen", marker[2])] if marker else [])
    w, left, right, top, bottom = 460, 56, 16, 30, 46
    h = 300 + bottom + 16 * ((len(legend) + 1) // 2)
    xs = [x for s in series for x, _ in s.points] + ([marker[0]] if marker else [])
    ys = [y for s in series for _, y in s.points] + ([marker[1]] if marker else [])
    x_ticks = _nice_ticks(min(0.0, *xs), max(xs))
    y_lo, y_hi = min(ys), max(ys)
    pad = (y_hi - y_lo) * 0.08 or 0.05
    y_ticks = _nice_ticks(y_lo - pad, y_hi + pad)
    x0, x1 = x_ticks[0], x_ticks[-1]
    y0, y1 = y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * (w - left - right)

    plot_bottom = 300  # y of the x axis; the legend sits below the axis label

    def py(y: float) -> float:
        return plot_bottom - (y - y0) / ((y1 - y0) or 1) * (plot_bottom - top)

    out = [
        f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="18" font-weight="600">{html.escape(title)}</text>',
    ]
    for t in x_ticks:
        out.append(
            f'<line class="gridline" x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" '
            f'y2="{plot_bottom}"/><text x="{px(t):.1f}" y="{plot_bottom + 16}" '
            f'text-anchor="middle">{_fmt_tick(t)}</text>'
        )
    for t in y_ticks:
        out.append(
            f'<line class="gridline" x1="{left}" x2="{w - right}" y1="{py(t):.1f}" '
            f'y2="{py(t):.1f}"/><text x="{left - 6}" y="{py(t) + 4:.1f}" '
            f'text-anchor="end">{_fmt_tick(t)}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" x2="{w - right}" y1="{plot_bottom}" '
        f'y2="{plot_bottom}"/>'
        f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{plot_bottom}"/>'
        f'<text x="{(left + w - right) / 2}" y="{plot_bottom + 34}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>"
        f'<text transform="translate(14 {(top + plot_bottom) / 2}) rotate(-90)" '
        f'text-anchor="middle">{html.escape(y_label)}</text>'
    )
    for s in series:
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in _thin(s.points))
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        out.append(
            f'<polyline data-series="{s.name}" fill="none" stroke="{_COLORS[s.name]}" '
            f'stroke-width="2"{dash} points="{pts}"><title>{html.escape(s.label)}</title>'
            "</polyline>"
        )
    if marker is not None:
        mx, my, label = marker
        out.append(
            f'<circle data-series="chosen" cx="{px(mx):.1f}" cy="{py(my):.1f}" r="6" '
            f'fill="{_COLORS["chosen"]}"><title>{html.escape(label)}</title></circle>'
        )
    for i, (name, label) in enumerate(legend):
        lx = left + (i % 2) * 200
        ly = plot_bottom + bottom + 14 + 16 * (i // 2)
        out.append(
            f'<rect x="{lx}" y="{ly - 8}" width="14" height="4" fill="{_COLORS[name]}"/>'
            f'<text x="{lx + 20}" y="{ly - 3}">{html.escape(label[:32])}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _bars(chart_id: str, items: Sequence[tuple[str, int]], total: int, empty: str) -> str:
    if not items:
        return f'<p id="{chart_id}" class="note">{html.escape(empty)}</p>'
    w, row = 700, 24
    h = 20 + row * len(items)
    top = max(v for _, v in items)
    out = [f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">']
    for i, (name, value) in enumerate(items):
        y = 10 + i * row
        bar = 300 * value / top
        share = f" ({value / total:.1%} of turns)" if total else ""
        out.append(
            f'<text x="150" y="{y + 14}" text-anchor="end">{html.escape(name)}</text>'
            f'<rect data-bar="{html.escape(name)}" x="158" y="{y + 3}" width="{bar:.1f}" '
            f'height="15" fill="{_COLORS["policy"]}"/>'
            f'<text x="{162 + bar:.1f}" y="{y + 14}">{value}{share}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _rows(pairs: Sequence[tuple[str, str]]) -> str:
    return "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in pairs)


def _metrics(s: Summary) -> list[tuple[str, str]]:
    pairs = [
        ("turns", f"{s.n}"),
        ("threshold", f"{s.threshold:g}"),
        ("quality (mean label)", f"{s.quality:.4f}"),
        ("quality retained vs all-frontier", _pct(s.quality_retained)),
        ("cost", f"${s.cost:.4f}  (all-frontier ${s.cost_frontier:.4f})"),
        ("cost saved vs all-frontier", _pct(s.cost_saved)),
        ("latency mean / p95", f"{s.latency_mean_s:.3f} s / {s.latency_p95_s:.3f} s"),
        (
            "all-frontier latency mean / p95",
            f"{s.latency_frontier_mean_s:.3f} s / {s.latency_frontier_p95_s:.3f} s",
        ),
        ("fast share (answered by fast tier)", _pct(s.fast_share)),
        ("frontier calls", _pct(s.frontier_call_share)),
        ("escalation rate (of turns sent fast)", f"{_pct(s.escalation_rate)} ({s.escalations})"),
        ("APGR (random 0.5, oracle)", f"{_num(s.apgr)} (oracle {_num(s.apgr_oracle)})"),
        ("CPT(50%) / CPT(80%)", f"{_pct(s.cpt50)} / {_pct(s.cpt80)}"),
    ]
    if s.tasks:
        pairs.append(
            (
                f"task latency, summed over steps ({s.tasks} tasks)",
                f"mean {_num(s.task_latency_mean_s)} s, p95 {_num(s.task_latency_p95_s)} s "
                f"(all-frontier {_num(s.task_latency_frontier_mean_s)} s)",
            )
        )
    if s.failures:
        pairs.append(("turns without an answer (router raised)", f"{s.failures}"))
    return pairs


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _sweep_table(points: Sequence[SweepPoint], s: Summary) -> str:
    step = max(1, len(points) // 20)
    picked = list(points[::step])
    if points[-1] not in picked:
        picked.append(points[-1])
    body = "".join(
        f"<tr><td>{p.threshold:g}</td><td>{p.quality:.4f}</td>"
        f"<td>{_pct(p.cost / s.cost_frontier if s.cost_frontier else None)}</td>"
        f"<td>{_pct(p.fast_share)}</td><td>{_pct(p.strong_share)}</td>"
        f"<td>{p.latency_s:.3f}</td></tr>"
        for p in picked
    )
    return (
        "<table><tr><th>threshold</th><th>quality</th><th>cost vs all-frontier</th>"
        "<th>fast share</th><th>frontier calls</th><th>latency s</th></tr>" + body + "</table>"
    )


def _claims(result: EvalResult, policy: str | None, scorer: str | None) -> str:
    """The verdict against the baselines, what was evaluated, a small-sample warning."""
    from tiered_router.evaluation.verdict import ORACLE_MEANING, judge, small_sample

    s = result.summary
    what = [f"policy <b>{html.escape(policy)}</b>" if policy else "the policy"]
    if scorer:
        what.append(f"scorer <b>{html.escape(scorer)}</b>, threshold {s.threshold:g}")
    parts = [f'<p class="sub">{"; ".join(what)}.</p>']
    warning = small_sample(s.n)
    if warning is not None:
        parts.append(f'<p class="warn" id="small-sample">warning: {html.escape(warning)}</p>')
    verdict = judge(result)
    if verdict is not None:
        shares = "; ".join(
            f"{html.escape(b.name)} {b.quality:.4f} (${b.cost:.4f})" for b in result.baselines
        )
        parts.append(
            f'<h2>Against random and prompt length</h2><p id="verdict">'
            f"{html.escape(verdict.text.removeprefix('verdict: '))}</p>"
            f'<p class="note">At the policy\'s frontier share ({_pct(s.frontier_call_share)}): '
            f"policy {s.quality:.4f} (${s.cost:.4f}); {shares}.</p>"
        )
    parts.append(f'<p class="note" id="oracle">Oracle: {html.escape(ORACLE_MEANING)}.</p>')
    return "".join(parts)


def render_html(
    result: EvalResult,
    *,
    title: str | None = None,
    policy: str | None = None,
    scorer: str | None = None,
    monitor: Sequence[MonitorPoint] | None = None,
) -> str:
    """Return the report of ``result`` as one self-contained HTML page.

    Args:
        result: The evaluation.
        title: The page's title (default: names the data).
        policy: The policy's name or file, shown at the top.
        scorer: The policy's scorer type, shown at the top.
        monitor: The live quality monitor's shadow calls
            (:func:`~tiered_router.evaluation.monitor_timeline.monitor_timeline`): adds its
            charts over time.

    """
    s = result.summary
    base = s.cost_frontier or 1.0
    by_cost = sorted(result.points, key=lambda p: (p.cost, p.quality))
    cost_series = [
        _Series(
            "policy",
            "policy, across thresholds",
            [(100 * p.cost / base, p.quality) for p in by_cost],
        ),
        _Series(
            "random",
            "random router",
            [(100 * p.cost / base, p.quality) for p in result.random],
            dashed=True,
        ),
        _Series(
            "oracle", "oracle router", [(100 * p.cost / base, p.quality) for p in result.oracle]
        ),
    ]
    chosen = f"threshold {s.threshold:g}"
    cost_chart = _chart(
        "cost-quality",
        "Quality vs cost across thresholds",
        "cost, % of all-frontier",
        "quality (mean label)",
        cost_series,
        (100 * s.cost / base, s.quality, chosen),
    )
    pgr_chart = ""
    if s.q_strong > s.q_weak:
        gap = s.q_strong - s.q_weak

        def g(q: float) -> float:
            return (q - s.q_weak) / gap

        by_share = sorted(result.points, key=lambda p: (p.strong_share, p.quality))
        pgr_chart = _chart(
            "pgr-curve",
            "Performance gap recovered",
            "frontier calls, % of turns",
            "PGR",
            [
                _Series(
                    "policy", "policy", [(100 * p.strong_share, g(p.quality)) for p in by_share]
                ),
                _Series("random", "random (APGR 0.5)", [(0, 0.0), (100, 1.0)], dashed=True),
                _Series(
                    "oracle",
                    "oracle",
                    [(100 * p.strong_share, g(p.quality)) for p in result.oracle],
                ),
            ],
            (100 * s.frontier_call_share, g(s.quality), chosen),
        )
    reasons = sorted(s.escalation_reasons.items(), key=lambda kv: -kv[1])
    checks = sorted(s.failed_checks.items(), key=lambda kv: -kv[1])
    gate = s.gate
    gate_rows = [
        ("fast drafts judged (answer recorded)", f"{gate.drafts}"),
        ("passed / failed", f"{gate.passed} / {gate.failed}"),
        ("P(wrong | pass)", _pct(gate.p_wrong_given_pass)),
        ("P(fail | wrong): catch rate", _pct(gate.p_fail_given_wrong)),
        ("P(fail | right): false alarms", _pct(gate.p_fail_given_right)),
    ]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    escalations = _bars("escalations", reasons, s.n, "No escalations.")
    failed = _bars("failed-checks", checks, s.n, "No draft failed a check.")
    heading = html.escape(title or f"tiered-router evaluation: {result.dataset}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{heading}</title><style>{_CSS}</style></head><body>"
        f'<h1>{heading}</h1><p class="sub">{s.n} turns of <b>{html.escape(result.dataset)}</b>'
        f"; fast tier replays <b>{html.escape(result.fast_model)}</b>, frontier tier replays "
        f"<b>{html.escape(result.frontier_model)}</b>.</p>"
        f"{_claims(result, policy, scorer)}"
        f"<h2>At the policy's threshold</h2><table>{_rows(_metrics(s))}</table>"
        f'<h2>Across thresholds</h2><div class="grid">{cost_chart}{pgr_chart}</div>'
        '<p class="note">Each point of the policy curve is one threshold (a score at or '
        "below it goes to the fast tier); the red dot is the policy's threshold. The random "
        "router mixes the two tiers at random; the oracle knows every answer's label.</p>"
        f"<h2>Escalations</h2>{escalations}"
        f"<h3>Gate checks that failed fast drafts</h3>{failed}"
        f"<h2>Gate against the labels</h2><table>{_rows(gate_rows)}</table>"
        f"<h2>Sweep</h2>{_sweep_table(result.points, s)}"
        + (f"<h2>Live quality monitor</h2>{monitor_charts(monitor)}" if monitor else "")
        + f'<h2>Notes</h2><ul class="note">{notes}</ul></body></html>\n'
    )


def monitor_charts(points: Sequence[MonitorPoint]) -> str:
    """The quality monitor's charts over time (x: its shadow calls, in trace order).

    Per kind, the lower bound against the target, and the matched share.
    """
    bounds: dict[str, list[tuple[float, float]]] = {}
    shares: dict[str, list[tuple[float, float]]] = {}
    target: float | None = None
    for i, p in enumerate(points, start=1):
        if p.compared and p.matched is not None and p.lower_bound is not None:
            bounds.setdefault(p.kind, []).append((i, p.lower_bound))
            shares.setdefault(p.kind, []).append((i, p.matched / p.compared))
            target = p.target if p.target is not None else target
    if not bounds:
        return '<p id="monitor" class="note">No comparison recorded yet.</p>'
    kinds = [k for k in ("tools", "json", "final", "prose") if k in bounds]
    last = float(len(points))
    bound_series = [_Series(k, f"{k}: lower bound", bounds[k]) for k in kinds]
    if target is not None:
        bound_series.append(
            _Series("target", f"target {target:g}", [(0.0, target), (last, target)], dashed=True)
        )
    share_series = [_Series(k, f"{k}: matched share", shares[k]) for k in kinds]
    return (
        '<div class="grid">'
        + _chart(
            "monitor-bound", "Lower bound vs target", "shadow calls", "bound", bound_series, None
        )
        + _chart("monitor-share", "Matched share", "shadow calls", "share", share_series, None)
        + "</div>"
    )


def render_monitor_html(points: Sequence[MonitorPoint], *, source: str = "") -> str:
    """A self-contained page of the quality monitor's figures over time (``--report``)."""
    changes = [f"{p.where}: {p.kind} {p.change}" for p in points if p.change]
    listed = "".join(f"<li>{html.escape(c)}</li>" for c in changes) or "<li>none</li>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>tiered-router quality monitor</title><style>{_CSS}</style></head><body>"
        f'<h1>Quality monitor</h1><p class="sub">{len(points)} shadow calls from '
        f"<b>{html.escape(source)}</b>.</p>"
        f"<h2>Over time</h2>{monitor_charts(points)}"
        '<p class="note">Each comparison sends an accepted fast answer\'s turn to the frontier '
        "and compares the two answers' keys; the bound is the Wilson score lower bound of the "
        "matched share over the window (docs/monitor.md).</p>"
        f'<h2>Changes of state</h2><ul class="note">{listed}</ul></body></html>\n'
    )
