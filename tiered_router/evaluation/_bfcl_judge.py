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


# --- Java and JavaScript ---------------------------------------------------------------------
#
# BFCL sends Java / JavaScript parameters as strings holding the language's literal, and its
# checker turns each string into a Python value by the declared type before comparing it
# with the accepted answers; a string that does not read as the declared type stays a string
# (then it passes only where the accepted answer is a string: a variable name). Behaviour
# reproduced from BFCL's ``java_type_converter`` / ``js_type_converter`` and
# ``simple_function_checker`` at the data's pinned commit (de8307b4).

_JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "long": int, "float": float, "double": float,
    "boolean": bool, "char": str, "Array": list, "ArrayList": list, "HashMap": dict,
    "String": str, "any": str,
}  # fmt: skip
_JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool,
    "dict": dict, "array": list, "any": str,
}  # fmt: skip
_LISTS = frozenset({"Array", "ArrayList", "array"})
_INT = re.compile(r"-?\d+")
_JAVA_FLOAT = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]")
_JAVA_DOUBLE = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_JAVA_LONG = re.compile(r"-?\d+[lL]")
_JS_FLOAT = re.compile(r"-?\d+(\.\d+)?")
_JS_BIGINT = re.compile(r"-?\d+n")


def _unquote(text: str, quotes: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in quotes:
        return text[1:-1]
    return None


def _java_literal(text: str) -> Any:
    """A Java element read without its declared type (BFCL's ``parse_java_value``)."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.fullmatch(text):
        return int(text[:-1])
    if _JAVA_FLOAT.fullmatch(text):
        return float(text[:-1])
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def _java_elements(parts: Sequence[str], nested: str | None, *, quoted: bool) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        part = part.strip()
        if quoted and nested in ("char", "String"):
            out.append(part[1:-1])
        else:
            out.append(_java_value(part, nested) if nested else _java_literal(part))
    return out


def _java_value(text: str, declared: str, nested: str | None = None) -> Any:
    """A Java literal read as ``declared`` (BFCL's ``java_type_converter``)."""
    if declared in ("byte", "short", "integer"):
        return int(text) if _INT.fullmatch(text) else text
    if declared == "float":
        return float(text[:-1]) if _JAVA_FLOAT.fullmatch(text) else text
    if declared == "double":
        return float(text) if _JAVA_DOUBLE.fullmatch(text) else text
    if declared == "long":
        return int(text[:-1]) if _JAVA_LONG.fullmatch(text) else text
    if declared == "boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "ArrayList":
        found = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
        if found:
            return _java_elements(found.group(1).split(","), nested, quoted=True)
        found = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
        if found:
            added = re.findall(r"add\((.+?)\)", found.group(1))
            return _java_elements(added, nested, quoted=True)
        return [] if re.search(r"new\s+ArrayList<\w*>\(\)", text) else text
    if declared == "Array":
        found = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
        if not found:
            return text
        parts = [p for p in found.group(1).split(",") if p.strip()]
        return _java_elements(parts, nested, quoted=False)
    if declared == "HashMap":
        found = re.search(
            r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL
        )
        if found:
            puts = re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", found.group(1))
            return {key: _java_literal(value.strip()) for key, value in puts}
        return {} if re.search(r"new\s+HashMap<.*?>\s*\(\)", text) else text
    return text  # String, char, any: the text as written


def _js_literal(text: str) -> Any:
    """A JavaScript element read without its declared type (BFCL's ``parse_js_value``)."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    unquoted = _unquote(text, "\"'")
    if unquoted is not None:
        return unquoted
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def _js_array(code: str, nested: str | None) -> Any:
    rows = re.match(
        r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)", code
    )
    if rows:
        inner = re.findall(r"\[(.*?)\]", rows.group(0))
        out = []
        for i, row in enumerate(inner):
            row = row.strip()
            if i == 0 and row.startswith("["):
                row = row[1:]
            out.append([_js_literal(e) for e in row.split(",")])
        return out
    flat = re.match(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)", code)
    if not flat:
        return code
    body = (flat.group(1) if flat.group(1) is not None else flat.group(2) or "").strip()
    parts = body.split(",") if body else []
    if nested:
        return [_js_value(p.strip(), nested) for p in parts]
    return [_js_literal(p) for p in parts]


def _js_dict(code: str) -> Any:
    if code == "{}":
        return {}
    found = re.match(r"\{(.*?)\}", code)
    if not found:
        return code
    out: dict[str, Any] = {}
    for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", found.group(1)):
        key, value = key.strip().strip("'\""), value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key] = _js_array(value, None)
        elif value.startswith("{") and value.endswith("}"):
            out[key] = _js_dict(value)
        else:
            out[key] = _js_literal(value.strip("'\""))
    return out


def _js_value(text: str, declared: str, nested: str | None = None) -> Any:
    """A JavaScript literal read as ``declared`` (BFCL's ``js_type_converter``)."""
    if declared == "String":
        unquoted = _unquote(text, "\"'")
        return text if unquoted is None else unquoted
    if declared == "integer":
        return int(text) if _INT.fullmatch(text) else text
    if declared == "float":
        return float(text) if _JS_FLOAT.fullmatch(text) else text
    if declared == "Bigint":
        return int(text[:-1]) if _JS_BIGINT.fullmatch(text) else text
    if declared == "Boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "array":
        try:
            return _js_array(text.strip(), nested)
        except (ValueError, IndexError):
            return text.strip()
    if declared == "dict":
        return _js_dict(text.strip())
    return text  # any


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
    types = _JAVA_TYPES if language == "java" else _JS_TYPES
    convert = _java_value if language == "java" else _js_value
    declared = str(prop.get("type"))
    if declared not in types or not isinstance(value, str):
        return False  # BFCL: type_error:java / type_error:js (or a type it cannot convert)
    want, nested = types[declared], None
    if declared in _LISTS:
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
    want = name.replace(".", "_")
    if call.name != want or not isinstance(spec, Mapping):
        return False
    try:
        args = call.parsed_arguments()
    except ValueError:
        return False
    if not isinstance(args, dict):
        return False
    props = spec.get("parameters", {}).get("properties", {})
    if any(r not in args for r in spec.get("parameters", {}).get("required", [])):
        return False
    for key, value in args.items():
        if key not in props or key not in params:
            return False
        if prompt_mode and not isinstance(value, str):
            value = repr(value) if not isinstance(value, bool) else str(value).lower()
        if not _typed_value_ok(value, params[key], props[key], language):
            return False
    return all(k in args or "" in accepted for k, accepted in params.items())


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
