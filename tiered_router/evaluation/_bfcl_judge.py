"""A re-implementation of BFCL v1's AST checker, to label calls BFCL's decoder never read.

BFCL's decoder fails answers written in a Markdown fence before its checker sees the call
inside (``ast_decoder:decoder_failed``). The gate reads such text as calls, so to count a
lifted call as right or wrong it has to be judged: :func:`judge` compares calls with the
question's ``possible_answer`` the way BFCL's ``ast_checker`` does for the ``simple``,
``multiple_function``, ``parallel_function`` and ``parallel_multiple_function`` categories
(function name, required parameters, no unexpected parameter, every value among the
accepted ones, strings compared without case, spaces and ``,./-_*^``, optional parameters
given as ``""``, parallel calls matched in any order), and for ``java`` and ``javascript``
(one call; each value sent as the language's literal in a string and read by its declared
type, ``42L`` as a ``long``, ``new ArrayList<>(Arrays.asList(...))``, ``{a: 1}``; a
string that does not read as its type passes only where the answer is a variable name).
The BFCL loader (``_bfcl_source.py``) uses it to label answers written as calls in a
Markdown fence, which BFCL's decoder rejected before its checker saw the call and which the
gate reads as calls; ``benchmarks/bench_gate_quality.py`` prints its agreement with BFCL's
own labels on every answer BFCL judged (all 6,891 in the data: it agrees on each).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from tiered_router.evaluation._bfcl import parse_result
from tiered_router.evaluation._bfcl_literals import (
    JAVA_TYPES,
    JS_TYPES,
    LIST_TYPES,
    java_value,
    js_value,
)
from tiered_router.evaluation.dataset import Dataset
from tiered_router.gate import lift_text_tool_calls
from tiered_router.turn import ToolCall

PYTHON_CATEGORIES = frozenset(
    {"simple", "multiple_function", "parallel_function", "parallel_multiple_function"}
)
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
TYPED_CATEGORIES = frozenset({"java", "javascript"})
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
        return _same_dict(got, want, nested=True)
    return bool(got == want)


def _same_dict(got: Any, want: Mapping[str, Any], *, nested: bool) -> bool:
    """A dict against each key's accepted values (``""`` among them: the key is optional)."""
    if not isinstance(got, Mapping) or not set(got) <= set(want):
        return False
    for key, options in want.items():
        accepted = options if isinstance(options, list) else [options]
        if key not in got:
            if "" not in accepted:
                return False
        elif not any(_same(got[key], a, nested=nested) for a in accepted if a != ""):
            return False
    return True


def _accepted(got: Any, options: Sequence[Any]) -> bool:
    if isinstance(got, Mapping) and options and isinstance(options[0], Mapping):
        return _same_dict(got, options[0], nested=False)  # a dict parameter
    return any(_same(got, a) for a in options if a != "" or got == "")


def _call_arguments(call: ToolCall, spec: Any) -> dict[str, Any] | None:
    """The call's arguments when they are an object holding every required parameter."""
    try:
        args = call.parsed_arguments()
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    required = spec.get("parameters", {}).get("required", []) if isinstance(spec, Mapping) else []
    return None if any(r not in args for r in required) else args


def _optional_left_out(args: Mapping[str, Any], params: Mapping[str, Sequence[Any]]) -> bool:
    """Whether every accepted parameter the call leaves out may be left out."""
    return all(k in args or "" in accepted for k, accepted in params.items())


def _one(call: ToolCall, name: str, params: Mapping[str, Sequence[Any]], spec: Any) -> bool:
    want = name.replace(".", "_")
    if call.name != want and not call.name.endswith("_" + want):
        return False
    args = _call_arguments(call, spec)
    if args is None:
        return False
    for key, value in args.items():
        if key not in params or not _accepted(value, params[key]):
            return False
    return _optional_left_out(args, params)


def judge(
    calls: Sequence[ToolCall], question: Mapping[str, Any], *, prompt_mode: bool = False
) -> bool | None:
    """Whether ``calls`` answer ``question`` as BFCL's checker would; ``None``: not judged."""
    category = question.get("category")
    if category in TYPED_CATEGORIES:
        return _judge_typed(calls, question, str(category), prompt_mode)
    if category not in PYTHON_CATEGORIES:
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


def _judge_typed(
    calls: Sequence[ToolCall], question: Mapping[str, Any], language: str, prompt_mode: bool
) -> bool | None:
    """A Java or JavaScript question: one call, values read as the declared types.

    In prompt mode BFCL's decoder hands the checker every value as the source text the
    model wrote; the loader read Python-literal values (``{'a': 1}``, ``5``) as data, so
    those are written back as text here. In function-calling mode a value that is not a
    JSON string is a type error, as in BFCL.
    """
    answer = question.get("possible_answer")
    spec = question.get("function")
    if not isinstance(answer, Mapping) or len(answer) != 1 or not isinstance(spec, Mapping):
        return None
    if len(calls) != 1:
        return False
    # BFCL takes the name from the spec and the answer's only entry, whatever its key
    ((_, params),) = answer.items()
    return _typed_call(calls[0], str(spec.get("name")), params, spec, language, prompt_mode)


def _match(calls: list[ToolCall], expected: list[tuple[str, Any, Any]]) -> bool:
    if not expected:
        return True
    name, params, spec = expected[0]
    for i, call in enumerate(calls):
        if _one(call, name, params, spec) and _match(calls[:i] + calls[i + 1 :], expected[1:]):
            return True
    return False


def _std_all(values: Sequence[Any]) -> list[Any]:
    return [_std(v) if isinstance(v, str) else v for v in values]


def _right_type(
    value: Any, accepted: Sequence[Any], want: type, nested: type | None
) -> tuple[bool, bool]:
    """BFCL's ``type_checker``: ``(valid, is_variable)``."""
    first = next((a for a in accepted if a != ""), None)
    answer_type = None if first is None else type(first)
    variable = answer_type is not None and answer_type is not want
    if type(value) is want:
        if nested is None:
            return True, variable
        for option in accepted:
            if not isinstance(option, list):
                return True, variable
            inner = next((a for a in option if a != ""), None)
            inner_type = None if inner is None else type(inner)
            items = cast("list[Any]", value)  # its type is `want`, here list
            if all(type(v) is nested or type(v) is inner_type for v in items):
                return True, variable
        return False, variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, variable


def _dict_matches(got: Any, accepted: Sequence[Any]) -> bool:
    for option in accepted:
        if option == "" or not isinstance(got, Mapping) or len(got) != len(option):
            continue
        ok = True
        for key, value in got.items():
            if key not in option:
                ok = False
                break
            if isinstance(option[key], Mapping):
                ok = _dict_matches(value, [option[key]])
            else:
                ok = (_std(value) if isinstance(value, str) else value) in _std_all(option[key])
            if not ok:
                break
        if ok:
            return True
    return False


def _typed_value_ok(
    value: Any, accepted: Sequence[Any], prop: Mapping[str, Any], language: str
) -> bool:
    types = JAVA_TYPES if language == "java" else JS_TYPES
    convert = java_value if language == "java" else js_value
    declared = str(prop.get("type"))
    if declared not in types or not isinstance(value, str):
        return False  # BFCL: type_error:java / type_error:js (or a type it cannot convert)
    want, nested = types[declared], None
    if declared in LIST_TYPES:
        inner = str(prop.get("items", {}).get("type"))
        nested = types.get(inner)
        value = convert(value, declared, inner)
    else:
        value = convert(value, declared)
    valid, variable = _right_type(value, accepted, want, nested)
    if not valid:
        return False
    if not variable:
        if want is dict:
            return _dict_matches(value, accepted)
        if want is list and nested is dict:
            return any(
                isinstance(option, list)
                and len(option) == len(value)
                and all(_dict_matches(v, [o]) for v, o in zip(value, option, strict=True))
                for option in accepted
            )
        if want is str:
            return _std(value) in [_std(a) for a in accepted if isinstance(a, str)]
        if want is list:
            options = [
                _std_all(a) if isinstance(a, list) else []
                for a in accepted
                if a == "" or isinstance(a, list)
            ]
            return _std_all(value) in options
    return value in accepted


def _typed_call(
    call: ToolCall,
    name: str,
    params: Mapping[str, Sequence[Any]],
    spec: Any,
    language: str,
    prompt_mode: bool,
) -> bool:
    if call.name != name.replace(".", "_") or not isinstance(spec, Mapping):
        return False
    args = _call_arguments(call, spec)
    if args is None:
        return False
    props = spec.get("parameters", {}).get("properties", {})
    for key, value in args.items():
        if key not in props or key not in params:
            return False
        if prompt_mode and not isinstance(value, str):
            value = repr(value) if not isinstance(value, bool) else str(value).lower()
        if not _typed_value_ok(value, params[key], props[key], language):
            return False
    return _optional_left_out(args, params)


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
    own label only says its decoder failed). A Java or JavaScript answer is labelled by what
    BFCL would have judged without the fence (:func:`_typed_text_label`); one that cannot be
    labelled so is kept as it was. The counter says how many were relabelled right,
    relabelled wrong and kept.
    """
    counts: Counter[str] = Counter()
    rows = []
    for row in dataset.rows:
        outcomes = dict(row.outcomes)
        for model, outcome in row.outcomes.items():
            if outcome.tool_calls or not outcome.text:
                continue
            draft = outcome.completion(model=model, backend=model)
            lifted = lift_text_tool_calls(draft, row.turn)
            if lifted is draft:
                continue
            label = label_text_calls(outcome.text, lifted.tool_calls, questions.get(row.id, {}))
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


def label_text_calls(
    text: str, lifted: Sequence[ToolCall], question: Mapping[str, Any]
) -> bool | None:
    """Label an answer written as text that the gate reads as the calls ``lifted``.

    Python categories: :func:`judge` of those calls. Java and JavaScript: what BFCL would
    have judged of the text without its fence (:func:`_typed_text_label`). ``None``: not
    judged (another category, or text neither reads).
    """
    if question.get("category") in TYPED_CATEGORIES:
        return _typed_text_label(text, question)
    return judge(lifted, question)


def _typed_text_label(text: str, question: Mapping[str, Any]) -> bool | None:
    """Label a fenced Java / JavaScript answer as BFCL would have without the fence.

    BFCL's Java and JavaScript decoders read only call syntax (``[f(a=b)]``) and hand each
    value on as the text written: the fence's body is read the way the loader reads a
    prompt-mode answer and judged in prompt mode. A body that is JSON (a list of
    ``{"name": ...}`` objects) is wrong: those decoders cannot read it at all. ``None``:
    not a fence, or a body neither reads (Java syntax that is not also Python's, such as
    ``new int[]{1, 2}``); such answers stay unjudged.
    """
    fenced = _FENCE.fullmatch(text.strip())
    if fenced is None:
        return None
    body = fenced.group(1).strip()
    try:
        json.loads(body)
    except ValueError:
        pass
    else:
        return False
    _, calls = parse_result(body, category=str(question.get("category", "")))
    return judge(calls, question, prompt_mode=True) if calls else None


def agreement(dataset: Dataset, questions: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """``(agreeing, judged)``: :func:`judge` against BFCL's labels on the calls BFCL judged."""
    agree = judged = 0
    for row in dataset.rows:
        for model, outcome in row.outcomes.items():
            if not outcome.tool_calls:
                continue
            prompt_mode = not model.endswith("-FC")
            label = judge(outcome.tool_calls, questions.get(row.id, {}), prompt_mode=prompt_mode)
            if label is None:
                continue
            judged += 1
            agree += label == outcome.correct
    return agree, judged
