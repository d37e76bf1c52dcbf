"""What the gate catches on BFCL: wrong calls caught and right calls failed, per category and check.

    PYTHONPATH=. python benchmarks/bench_gate_quality.py [--part report|tune|all]
        [--hold-out gpt-4o] [--checks default|NAME,NAME...] [--json] [--show CHECK]

Every model with recorded answers in ``../shared/data/bfcl_v1_results`` is counted. A row is
*wrong* when BFCL's checker failed it and *right* otherwise; a check *catches* a wrong
answer it fails and raises a *false alarm* on a right answer it fails. The gate runs the way
the router runs it (``QualityGate.evaluate``): whole gate first, then each check alone.

Rows are split in two parts by a hash of their id (``tune``: the rows the checks were
developed on; ``report``: the rows the figures are quoted from), and ``--hold-out FAMILY``
lists a model family that was not looked at while tuning: its figures are printed apart.

Answers BFCL failed only because its decoder could not read them (calls in a Markdown
fence) but that the gate reads as calls are judged again, as calls, by
``tiered_router/evaluation/_bfcl_judge.py`` (a re-implementation of BFCL's AST checker,
Java and JavaScript type conversions included, that agrees with BFCL's labels on every
answer BFCL judged); the few it cannot read either are counted apart (``unjudged text
calls``).

Besides BFCL's own categories, three kinds of probes are built from the same rows:

- ``no_tool_fits``: the question of row A offered only the tools of another row B (the one
  half the sorted rows away, skipping any B that shares a tool name with A), and as the
  draft, the model's own recorded call for B. No offered tool fits A's request, so every
  such call is wrong; the right answer is prose or a question.
- ``fewer_calls``: every right answer that made two or more calls, cut to its first call:
  one call where the request asks for several, wrong by construction.
- ``text:FORMAT``: every recorded answer that made tool calls, rewritten as text in one of
  eleven formats (``pythonic`` ``[get_weather(city='Paris')]``, ``bare``
  ``get_weather(city="Paris")`` one per line, ``json_list`` ``[{"name": ..., "arguments":
  ...}]``, ``tool_call_tag`` ``<tool_call>{...}</tool_call>``, and four XML-style tag
  formats: ``llama_function`` ``<function=f>{...}</function>``, ``qwen_xml``
  ``<function=f><parameter=k>v</parameter></function>`` in ``<tool_call>`` tags, ``invoke``
  ``<invoke name="f"><parameter name="k">v</parameter></invoke>``, ``glm``
  ``f<arg_key>k</arg_key><arg_value>v</arg_value>``; and three wrappers: ``mistral``
  ``[TOOL_CALLS]f[ARGS]{...}``, ``functools`` ``functools[{...}]``, ``command_r``
  ``Action: ```json [{"tool_name": ...}]```), keeping the row's label: the gate should
  judge the text form as it judges the native calls. (A tag holds text: a value whose type
  the schema does not declare comes back as a string.)

Skips (exit 0, a message) when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered_router.evaluation import find_data_dir
from tiered_router.evaluation._bfcl_judge import agreement, load_questions, rejudge_text_calls
from tiered_router.evaluation.sources import load_bfcl
from tiered_router.gate import QualityGate, lift_text_tool_calls
from tiered_router.policy import GateConfig
from tiered_router.turn import Completion, ToolCall, Turn

FAMILIES = (
    ("gpt-4o-mini", re.compile(r"^gpt-4o-mini")),
    ("gpt-4o", re.compile(r"^gpt-4o-20")),
    ("gpt-4-turbo", re.compile(r"^gpt-4-turbo")),
    ("gpt-3.5-turbo", re.compile(r"^gpt-3\.5")),
)
FORMATS = (
    "pythonic",
    "bare",
    "json_list",
    "tool_call_tag",
    "llama_function",
    "qwen_xml",
    "invoke",
    "glm",
    "mistral",
    "functools",
    "command_r",
)


def family(model: str) -> str:
    """Return the model family a recorded model belongs to."""
    for name, pattern in FAMILIES:
        if pattern.search(model):
            return name
    return model


def part(row_id: str) -> str:
    """Return ``tune``, ``tune2`` or ``report`` for a row, by a hash of its id.

    ``tune`` (half the rows) is what the checks were developed on; ``tune2`` (a quarter)
    is what the second round of fixes looked at, after the first held-out run showed
    false alarms above 1 %; ``report`` (the last quarter) was looked at by neither.
    """
    bucket = zlib.crc32(row_id.encode()) % 4
    return "tune" if bucket % 2 == 0 else ("tune2" if bucket == 1 else "report")


@dataclass(frozen=True, slots=True)
class Case:
    """One draft to judge: the turn, the answer, its label and where it counts."""

    category: str
    model: str
    turn: Turn
    draft: Completion
    right: bool
    row_id: str


def _python_value(value: Any) -> str:
    return repr(value)


def _tag_value(value: Any) -> str:
    """A value as the text of an XML-style parameter tag (a string as written)."""
    return value if isinstance(value, str) else json.dumps(value)


def render(calls: Sequence[ToolCall], fmt: str) -> str:
    """Write ``calls`` as text in one of :data:`FORMATS`."""
    parsed = [(c.name, c.parsed_arguments()) for c in calls]
    if fmt == "pythonic":
        inner = ", ".join(
            f"{n}({', '.join(f'{k}={_python_value(v)}' for k, v in a.items())})" for n, a in parsed
        )
        return f"[{inner}]"
    if fmt == "bare":
        return "\n".join(
            f"{n}({', '.join(f'{k}={json.dumps(v)}' for k, v in a.items())})" for n, a in parsed
        )
    if fmt == "json_list":
        return json.dumps([{"name": n, "arguments": a} for n, a in parsed])
    if fmt == "llama_function":
        return "".join(f"<function={n}>{json.dumps(a)}</function>" for n, a in parsed)
    if fmt == "qwen_xml":
        return "\n".join(
            f"<tool_call>\n<function={n}>\n"
            + "".join(f"<parameter={k}>\n{_tag_value(v)}\n</parameter>\n" for k, v in a.items())
            + "</function>\n</tool_call>"
            for n, a in parsed
        )
    if fmt == "invoke":
        blocks = "".join(
            f'<invoke name="{n}">\n'
            + "".join(f'<parameter name="{k}">{_tag_value(v)}</parameter>\n' for k, v in a.items())
            + "</invoke>\n"
            for n, a in parsed
        )
        return f"<function_calls>\n{blocks}</function_calls>"
    if fmt == "mistral":
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in parsed)
    if fmt == "functools":
        return "functools" + json.dumps([{"name": n, "arguments": a} for n, a in parsed])
    if fmt == "command_r":
        listed = json.dumps([{"tool_name": n, "parameters": a} for n, a in parsed])
        return f"Action: ```json\n{listed}\n```"
    if fmt == "glm":
        return "\n".join(
            f"<tool_call>{n}\n"
            + "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{_tag_value(v)}</arg_value>\n"
                for k, v in a.items()
            )
            + "</tool_call>"
            for n, a in parsed
        )
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in parsed
    )


def cases(data_dir: Path, which: str) -> Iterator[Case]:
    """Yield every draft of the chosen part: recorded answers, then the probes."""
    raw, questions = load_bfcl(data_dir), load_questions(data_dir)
    agree, judged = agreement(raw, questions)
    ds, counts = rejudge_text_calls(raw, questions)
    print(
        f"_bfcl_judge agrees with BFCL on {agree} of {judged} judged answers; text answers "
        f"read as calls and judged again: {dict(sorted(counts.items()))}",
        file=sys.stderr,
    )
    rows = [r for r in sorted(ds.rows, key=lambda r: r.id) if which == "all" or part(r.id) == which]
    for row in rows:
        category = str(row.turn.metadata.get("category"))
        for model, outcome in row.outcomes.items():
            draft = outcome.completion(model=model, backend=model)
            lifted = lift_text_tool_calls(draft, row.turn)
            if lifted is not draft and not outcome.correct:
                # BFCL's decoder failed on the text and never judged the call inside, and
                # _bfcl_judge cannot either (a Java / JavaScript call in prose, or Java
                # syntax Python cannot read): shown apart
                yield Case("unjudged text calls", model, row.turn, draft, False, row.id)
                continue
            yield Case(category, model, row.turn, draft, outcome.correct, row.id)
            calls = outcome.tool_calls or ()
            if outcome.correct and len(calls) >= 2:
                # the right answer to a multi-target request, cut to its first call
                first = Completion(tool_calls=calls[:1], finish_reason="tool_calls")
                yield Case("fewer_calls", model, row.turn, first, False, row.id)
            if calls and all(_parses(c) for c in calls):
                for fmt in FORMATS:
                    text = Completion(text=render(calls, fmt), finish_reason="stop")
                    yield Case(f"text:{fmt}", model, row.turn, text, outcome.correct, row.id)
    n = len(rows)
    for i, row in enumerate(rows):
        names = {t.name for t in row.turn.tools or ()}
        for step in range(n // 2, n):
            other = rows[(i + step) % n]
            if not names & {t.name for t in other.turn.tools or ()}:
                break
        else:
            continue
        turn = Turn(
            [dict(m) for m in row.turn.messages],
            tools=[t.to_openai() for t in other.turn.tools or ()],
        )
        for model, outcome in other.outcomes.items():
            if outcome.tool_calls:
                draft = outcome.completion(model=model, backend=model)
                yield Case("no_tool_fits", model, turn, draft, False, f"{row.id}+{other.id}")


def _parses(call: ToolCall) -> bool:
    try:
        return isinstance(call.parsed_arguments(), dict)
    except ValueError:
        return False


def _total(category: str) -> str:
    if category == "unjudged text calls":
        return "unjudged text calls"
    probe = ":" in category or category in ("no_tool_fits", "fewer_calls")
    return "ALL PROBES" if probe else "ALL BFCL"


def _checks(spec: str) -> list[Any]:
    if spec == "default":
        return list(GateConfig().checks)
    if spec.lstrip().startswith("["):
        checks: list[Any] = json.loads(spec)  # the policy's form: names and {name: options}
        return checks
    return [s.strip() for s in spec.split(",") if s.strip()]


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    w, rt = r["wrong"], r["right"]
    catch = f"{100 * r['caught'] / w:.1f}" if w else "-"
    alarm = f"{100 * r['false_alarms'] / rt:.1f}" if rt else "-"
    return f"{catch} / {alarm}"


def _markdown(table: list[dict[str, Any]], checks: list[str]) -> None:
    """Print, per group, categories as rows and checks as columns: caught % / false alarms %."""
    for group in ("all", "held-out"):
        rows = [r for r in table if r["group"] == group]
        cats = sorted({r["category"] for r in rows}, key=lambda c: (c.startswith("ALL"), c))
        got = {(r["category"], r["check"]): r for r in rows}
        shown = [
            c
            for c in checks
            if any(r["caught"] or r["false_alarms"] for r in rows if r["check"] == c)
        ]
        print(f"\n{group} models: % of wrong answers caught / % of right answers failed\n")
        print("| category | wrong | right | gate | " + " | ".join(shown) + " |")
        print("| --- " * (4 + len(shown)) + "|")
        for cat in cats:
            gate = got.get((cat, "gate"))
            if gate is None:
                continue
            cells = [_cell(got.get((cat, c))) for c in shown]
            print(
                f"| {cat} | {gate['wrong']} | {gate['right']} | **{_cell(gate)}** | "
                + " | ".join(cells)
                + " |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--part", default="report", choices=["report", "tune", "tune2", "all"])
    parser.add_argument("--hold-out", default="gpt-4o", help="family not looked at while tuning")
    parser.add_argument(
        "--checks", default="default", help="'default', NAME,NAME,... or a JSON list of checks"
    )
    parser.add_argument(
        "--no-text-calls", action="store_true", help="judge calls written as text as text"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="one table per group")
    parser.add_argument("--show", default="", help="print failures of this check (or 'miss')")
    parser.add_argument("--limit", type=int, default=20)
    opts = parser.parse_args(argv)

    data_dir = opts.data_dir or find_data_dir()
    if data_dir is None or not (Path(data_dir) / "bfcl_v1_results").is_dir():
        print("shared data folder not found: nothing to measure", file=sys.stderr)
        return 0
    specs = _checks(opts.checks)
    text_calls = not opts.no_text_calls
    gate = QualityGate(specs, text_tool_calls=text_calls)
    singles = [
        (name, QualityGate([spec], text_tool_calls=text_calls))
        for name, spec in zip(gate.names, specs, strict=True)
    ]

    # counts[(group, category, check)] = [wrong, caught, right, false alarms]
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    shown = 0
    for case in cases(Path(data_dir), opts.part):
        group = "held-out" if family(case.model) == opts.hold_out else "tuned"
        verdict = gate.evaluate(case.draft, case.turn)
        results = [("gate", not verdict.passed)]
        results += [
            (name, not single.evaluate(case.draft, case.turn).passed) for name, single in singles
        ]
        for name, failed in results:
            for g in (group, "all"):
                for cat in (case.category, _total(case.category)):
                    c = counts[(g, cat, name)]
                    if case.right:
                        c[2] += 1
                        c[3] += failed
                    else:
                        c[0] += 1
                        c[1] += failed
        looked_at = group == "tuned" or opts.part == "tune2"
        if opts.show and shown < opts.limit and looked_at and opts.part != "report":
            failed_names = set(verdict.failed_checks)
            hit = (opts.show == "miss" and not case.right and verdict.passed) or (
                opts.show in failed_names and (case.right or opts.show.endswith("!"))
            )
            if opts.show == "falsealarm" and case.right and not verdict.passed:
                hit = True
            if hit:
                shown += 1
                print(f"--- {case.row_id} {case.model} {case.category} right={case.right}")
                print("Q:", " | ".join(str(m.get("content"))[:300] for m in case.turn.messages))
                print("T:", [t.name for t in case.turn.tools or ()])
                print(
                    "D:",
                    case.draft.text[:300],
                    [(c.name, c.arguments[:200]) for c in case.draft.tool_calls],
                )
                print("V:", verdict.reasons[:3])
    table: list[dict[str, Any]] = [
        {
            "group": g,
            "category": cat,
            "check": name,
            "wrong": c[0],
            "caught": c[1],
            "right": c[2],
            "false_alarms": c[3],
        }
        for (g, cat, name), c in sorted(counts.items())
    ]
    if opts.json:
        print(json.dumps(table, indent=1))
        return 0
    if opts.markdown:
        _markdown(table, [name for name, _ in singles])
        return 0
    print(f"part: {opts.part}; held-out family: {opts.hold_out}; gate: {', '.join(gate.names)}")
    for g in ("all", "held-out"):
        print(f"\n== {g} models ==")
        cats = sorted({r["category"] for r in table if r["group"] == g})
        header = f"{'category':<30}{'check':<22}{'wrong':>7}{'caught':>9}{'right':>7}{'f.alarm':>9}"
        print(header)
        for cat in cats:
            for r in table:
                if r["group"] != g or r["category"] != cat:
                    continue
                if r["check"] != "gate" and r["caught"] == 0 and r["false_alarms"] == 0:
                    continue
                w, rt = r["wrong"], r["right"]
                catch = f"{100 * r['caught'] / w:.1f}%" if w else "-"
                alarm = f"{100 * r['false_alarms'] / rt:.1f}%" if rt else "-"
                print(f"{cat:<30}{r['check']:<22}{w:>7}{catch:>9}{rt:>7}{alarm:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
