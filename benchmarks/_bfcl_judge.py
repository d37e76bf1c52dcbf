"""A re-implementation of BFCL v1's AST checker for Python categories (benchmarks only).

BFCL's decoder fails answers written in a Markdown fence before its checker sees the call
inside (``ast_decoder:decoder_failed``). The gate reads such text as calls, so to count a
lifted call as right or wrong it has to be judged: :func:`judge` compares calls with the
question's ``possible_answer`` the way BFCL's ``ast_checker`` does for the ``simple``,
``multiple_function``, ``parallel_function`` and ``parallel_multiple_function`` categories
(function name, required parameters, no unexpected parameter, every value among the
accepted ones, strings compared without case, spaces and ``,./-_*^``, optional parameters
given as ``""``, parallel calls matched in any order). Java and JavaScript answers are
not judged (``None``). ``bench_gate_quality.py`` prints its agreement with BFCL's own
labels on the answers BFCL did judge.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tiered_router.evaluation.dataset import Dataset
from tiered_router.gate import lift_text_tool_calls
from tiered_router.turn import ToolCall

PYTHON_CATEGORIES = frozenset(
    {"simple", "multiple_function", "parallel_function", "parallel_multiple_function"}
)
_STRIP = re.compile(r"[ ,./\-_*^]")


def _std(value: str) -> str:
    return _STRIP.sub("", value).lower().replace("'", '"')


def _same(got: Any, want: Any, *, nested: bool = False) -> bool:
    if isinstance(want, str):
        return isinstance(got, str) and _std(got) == _std(want)
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, float) and nested and type(got) is int:
        return False  # BFCL checks the inner type of a list of floats strictly
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and float(got) == float(want)
    if isinstance(want, (list, tuple)):
        return (
            isinstance(got, (list, tuple))
            and len(got) == len(want)
            and all(_same(g, w, nested=True) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping) or not set(got) <= set(want):
            return False
        for key, options in want.items():
            accepted = options if isinstance(options, list) else [options]
            if key not in got:
                if "" not in accepted:
                    return False
            elif not any(_same(got[key], a, nested=True) for a in accepted if a != ""):
                return False
        return True
    return bool(got == want)


def _accepted(got: Any, options: Sequence[Any]) -> bool:
    if isinstance(got, Mapping) and options and isinstance(options[0], Mapping):
        # a dict parameter: each key's accepted values, "" for an optional key
        want = options[0]
        if not set(got) <= set(want):
            return False
        for key, accepted in want.items():
            if key not in got:
                if "" not in accepted:
                    return False
            elif not any(_same(got[key], a) for a in accepted if a != ""):
                return False
        return True
    return any(_same(got, a) for a in options if a != "" or got == "")


def _one(call: ToolCall, name: str, params: Mapping[str, Sequence[Any]], spec: Any) -> bool:
    want = name.replace(".", "_")
    if call.name != want and not call.name.endswith("_" + want):
        return False
    try:
        args = call.parsed_arguments()
    except ValueError:
        return False
    if not isinstance(args, dict):
        return False
    required = spec.get("parameters", {}).get("required", []) if isinstance(spec, Mapping) else []
    if any(r not in args for r in required):
        return False
    for key, value in args.items():
        if key not in params or not _accepted(value, params[key]):
            return False
    return all(k in args or "" in accepted for k, accepted in params.items())


def judge(calls: Sequence[ToolCall], question: Mapping[str, Any]) -> bool | None:
    """Whether ``calls`` answer ``question`` as BFCL's checker would; ``None``: not judged."""
    if question.get("category") not in PYTHON_CATEGORIES:
        return None
    answer = question.get("possible_answer")
    if not isinstance(answer, Mapping) or not calls:
        return None if not isinstance(answer, Mapping) else False
    specs = (
        question["function"] if isinstance(question["function"], list) else [question["function"]]
    )
    by_name = {s["name"]: s for s in specs if isinstance(s, Mapping)}
    expected = []
    for key, params in answer.items():
        name = key
        stripped = re.sub(r"[ _]\d+$", "", key)
        if key not in by_name and stripped in by_name:
            name = stripped
        expected.append((name, params, by_name.get(name)))
    if len(expected) != len(calls):
        return False
    return _match(list(calls), expected)


def _match(calls: list[ToolCall], expected: list[tuple[str, Any, Any]]) -> bool:
    if not expected:
        return True
    name, params, spec = expected[0]
    for i, call in enumerate(calls):
        if _one(call, name, params, spec) and _match(calls[:i] + calls[i + 1 :], expected[1:]):
            return True
    return False


def load_questions(data_dir: Path) -> dict[str, dict[str, Any]]:
    """BFCL's questions by id."""
    path = data_dir / "bfcl_v1_results" / "questions.jsonl"
    with open(path, encoding="utf-8") as f:
        return {str(q["id"]): q for q in map(json.loads, f)}


def rejudge_text_calls(
    dataset: Dataset, questions: Mapping[str, Mapping[str, Any]]
) -> tuple[Dataset, Counter[str]]:
    """Return ``dataset`` with text answers the gate reads as calls turned into those calls.

    An answer that made no call but whose text the gate reads as calls (a fenced
    ``[f(x=1)]``) becomes a completion with those calls, labelled by :func:`judge` (BFCL's
    own label only says its decoder failed). Answers :func:`judge` cannot label (Java,
    JavaScript) are kept as they were. The counter says how many were relabelled right,
    relabelled wrong and kept.
    """
    counts: Counter[str] = Counter()
    rows = []
    for row in dataset.rows:
        outcomes = dict(row.outcomes)
        for model, outcome in row.outcomes.items():
            if outcome.tool_calls or not outcome.text or outcome.correct:
                continue
            draft = outcome.completion(model=model, backend=model)
            lifted = lift_text_tool_calls(draft, row.turn)
            if lifted is draft:
                continue
            label = judge(lifted.tool_calls, questions.get(row.id, {}))
            if label is None:
                counts["kept (not judged)"] += 1
                continue
            counts["right" if label else "wrong"] += 1
            outcomes[model] = dataclasses.replace(
                outcome,
                text="",
                tool_calls=lifted.tool_calls,
                finish_reason="tool_calls",
                quality=1.0 if label else 0.0,
            )
        rows.append(dataclasses.replace(row, outcomes=outcomes))
    return dataclasses.replace(dataset, rows=tuple(rows)), counts


def agreement(dataset: Dataset, questions: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """``(agreeing, judged)``: :func:`judge` against BFCL's labels on the calls BFCL judged."""
    agree = judged = 0
    for row in dataset.rows:
        for outcome in row.outcomes.values():
            if not outcome.tool_calls:
                continue
            label = judge(outcome.tool_calls, questions.get(row.id, {}))
            if label is None:
                continue
            judged += 1
            agree += label == outcome.correct
    return agree, judged
