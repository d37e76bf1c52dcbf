from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tiered_router.exceptions import PolicyError
from tiered_router.gate import (
    CheckRegistry,
    JsonSchemaCheck,
    NonEmptyCheck,
    NoRefusalCheck,
    NotTruncatedCheck,
    QualityGate,
    RepetitionCheck,
    SchemaCache,
    ToolArgumentsCheck,
    Verdict,
    cache_info,
    check_names,
    default_registry,
    json_path,
    parse_json,
    register_check,
)
from tiered_router.policy import GateConfig
from tiered_router.turn import Completion, ToolCall, Turn

_counter = itertools.count()
USER = [{"role": "user", "content": "hello"}]

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["answer", "items"],
    "additionalProperties": False,
    "properties": {
        "answer": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "price"],
                "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
            },
        },
    },
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SEARCH_TOOL = {"type": "function", "function": {"name": "search", "parameters": {}}}

PROSE = (
    "Paris is the capital and largest city of France. It sits on the Seine in the north of "
    "the country and has been a centre of finance, diplomacy, commerce, fashion and science "
    "for centuries. The city is known for its museums and architectural landmarks: the "
    "Louvre received nearly nine million visitors last year, and the Eiffel Tower, built for "
    "the 1889 World's Fair, remains the most visited paid monument in the world. You can't "
    "visit everything in a weekend, so most guides suggest picking two or three districts."
)

CODE = '''def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping intervals."""
    if not intervals:
        return []
    intervals = sorted(intervals)
    merged = [intervals[0]]
    for start, end in intervals[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def test_merge_intervals() -> None:
    assert merge_intervals([]) == []
    assert merge_intervals([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]
    assert merge_intervals([(1, 4), (4, 5)]) == [(1, 5)]
    assert merge_intervals([(5, 7), (1, 2)]) == [(1, 2), (5, 7)]
'''


def turn(**kwargs: Any) -> Turn:
    return Turn(USER, **kwargs)


def schema_turn(schema: Mapping[str, Any]) -> Turn:
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    return turn(response_format=fmt)


def call(name: str, arguments: str, i: int = 0) -> ToolCall:
    return ToolCall(id=f"call_{i}", name=name, arguments=arguments)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


ENGINES = [
    "jsonschema",
    pytest.param(
        "jsonschema-rs",
        marks=pytest.mark.skipif(not _has("jsonschema_rs"), reason="jsonschema-rs not installed"),
    ),
]


# ---- non_empty


@pytest.mark.parametrize(
    "completion",
    [
        Completion(text="Paris."),
        Completion(text="</s> is how HTML closes strikethrough"),
        Completion(tool_calls=(call("search", "{}"),)),
    ],
)
def test_non_empty_passes_content(completion: Completion) -> None:
    assert NonEmptyCheck()(completion, turn()) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("  \n\t ", "only whitespace"),
        ("<|endoftext|><|endoftext|>\n</s> <eos>", "end-of-sequence"),
        ("<|mdm_mask|><|mdm_mask|><|eot_id|>", "end-of-sequence"),
    ],
)
def test_non_empty_fails_empty_whitespace_and_eos_only(text: str, reason: str) -> None:
    result = NonEmptyCheck()(Completion(text=text), turn())
    assert result is not None and reason in result


def test_non_empty_custom_eos_tokens() -> None:
    check = NonEmptyCheck(eos_tokens=["<END>"])
    assert check(Completion(text="<END> <END>"), turn()) is not None
    assert check(Completion(text="<|endoftext|>"), turn()) is None


# ---- not_truncated


@pytest.mark.parametrize(
    "text",
    ["A complete answer.", "Done.\n\n", "Done.<|endoftext|>", "Done.</s>\n</s>\n", CODE],
)
def test_not_truncated_passes_complete_output(text: str) -> None:
    assert NotTruncatedCheck()(Completion(text=text), turn()) is None


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        (Completion(text="The answer is", finish_reason="length"), "'length'"),
        (Completion(text="Paris." + "<|endoftext|>" * 40), "end-of-sequence"),
        (Completion(text="Paris.\n<eos>\n<eos>\n<eos>\n"), "end-of-sequence"),
        (Completion(text="Paris." + "\n" * 30), "30 trailing newlines"),
    ],
)
def test_not_truncated_fails_length_and_padding(completion: Completion, reason: str) -> None:
    result = NotTruncatedCheck()(completion, turn())
    assert result is not None and reason in result


def test_not_truncated_options() -> None:
    lenient = NotTruncatedCheck(max_trailing_newlines=50, max_eos_run=10)
    assert lenient(Completion(text="Paris." + "\n" * 30 + "</s>" * 5), turn()) is None
    strict = NotTruncatedCheck(max_trailing_newlines=1)
    assert strict(Completion(text="Paris.\n\n"), turn()) is not None


# ---- no_refusal


@pytest.mark.parametrize(
    "completion",
    [
        Completion(text="", refusal="I can't help with that.", finish_reason="stop"),
        Completion(text="", finish_reason="content_filter"),
        Completion(text="I'm sorry, but I can't help with that request."),
        Completion(text="I\u2019m sorry, but I can\u2019t assist with that."),
        Completion(text="I cannot help with creating malware."),
        Completion(text="As an AI language model, I do not have personal opinions."),
        Completion(text="**I apologize, but I cannot provide that information.**"),
        Completion(text="Sorry, I can't share verbatim lyrics. I can summarise the song."),
    ],
)
def test_no_refusal_fails_refusals(completion: Completion) -> None:
    result = NoRefusalCheck()(completion, turn())
    assert result is not None and ("refus" in result or "filter" in result)


@pytest.mark.parametrize(
    "text",
    [
        "You can't divide by zero in Python: it raises ZeroDivisionError.",
        "I can't stress enough how important backups are. Keep three copies.",
        "I cannot help but notice the loop never ends; move the increment inside it.",
        "The library cannot help with PDFs, but pypdf can: install it and call PdfReader.",
        "I'm sorry, but I can't give legal advice. " + PROSE,  # long: an answer, not a refusal
        PROSE,
    ],
)
def test_no_refusal_passes_answers_that_mention_cant(text: str) -> None:
    assert NoRefusalCheck()(Completion(text=text), turn()) is None


def test_no_refusal_ignores_text_of_tool_call_drafts() -> None:
    completion = Completion(text="I can't answer that yet.", tool_calls=(call("search", "{}"),))
    assert NoRefusalCheck()(completion, turn(tools=[SEARCH_TOOL])) is None


# ---- repetition

LOOP = (
    "To compute the total, add the price of each item to the running sum. "
    + "The total is the sum of the prices of the items. " * 18
)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (LOOP, "repetition loop"),
        ("Answer: the the the " + "the " * 60, "repetition loop"),
        ("Steps:\n" + "Preheat the oven to 180 C.\n" * 6 + "Bake.", "repeated 5+ times"),
        ("Great question" + "!" * 60, "'!' repeated"),
        # loops with no space in them: the word and line tests cannot see these
        ("Calling the tool: " + "<tool_call>" * 40, "one fragment repeated: '<tool_call>"),
        ('{"items": [' + '{"a":1},' * 50, "one fragment repeated"),
        ("Answer: 0" + "10" * 200, "one fragment repeated: '10'"),
    ],
)
def test_repetition_fails_loops(text: str, reason: str) -> None:
    result = RepetitionCheck()(Completion(text=text), turn())
    assert result is not None and reason in result


def _records_json() -> str:
    rows = [
        {"id": i, "name": f"Widget {w}", "price": round(3.5 * i + 0.99, 2), "in_stock": i % 3 > 0}
        for i, w in enumerate(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"])
    ]
    return json.dumps({"results": rows, "count": len(rows)}, indent=2)


@pytest.mark.parametrize(
    "text",
    [
        PROSE,
        CODE,
        _records_json(),
        "| a | b |\n|---|---|\n| 1 | 2 |\n" + "-" * 80 + "\n" + "=" * 80,
        "ok ok ok ok",  # too short to judge
        "Rule:\n" + "-=" * 200,  # a fragment of separators
        "Status: " + "<ok>" * 70,  # 280 characters of one fragment: under loop_chars
    ],
)
def test_repetition_passes_prose_code_and_json(text: str) -> None:
    assert RepetitionCheck()(Completion(text=text), turn()) is None


def test_repetition_looks_at_the_tail_window_only() -> None:
    text = "word " * 500 + PROSE * 6
    assert RepetitionCheck(window=len(PROSE) * 2)(Completion(text=text), turn()) is None
    assert RepetitionCheck(window=0)(Completion(text=text), turn()) is not None


def test_repetition_bad_option_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match=r"repetition.max_ratio: must be in \(0, 1\]"):
        QualityGate([("repetition", {"max_ratio": 2})])
    with pytest.raises(PolicyError, match=r"repetition.loop_chars: must be an integer >= 2"):
        QualityGate([("repetition", {"loop_chars": 1})])


def test_repetition_loop_options() -> None:
    text = "Calling: " + "<tool_call>" * 40
    assert RepetitionCheck(loop_fragment=0)(Completion(text=text), turn()) is None
    assert RepetitionCheck(loop_fragment=10)(Completion(text=text), turn()) is None  # 11 chars
    assert RepetitionCheck(loop_chars=500)(Completion(text=text), turn()) is None  # 440 chars
    assert RepetitionCheck(loop_chars=400)(Completion(text=text), turn()) is not None


# ---- json_schema


@pytest.mark.parametrize(
    "completion",
    [
        Completion(text='{"answer": "Paris", "items": [{"name": "a", "price": 1.5}]}'),
        Completion(text="", tool_calls=(call("search", "{}"),)),
    ],
)
def test_json_schema_passes_valid_and_tool_only_drafts(completion: Completion) -> None:
    assert JsonSchemaCheck()(completion, schema_turn(ANSWER_SCHEMA)) is None


def test_json_schema_passes_without_response_format() -> None:
    check = JsonSchemaCheck()
    assert check(Completion(text="not json"), turn()) is None
    assert check(Completion(text="not json"), turn(response_format={"type": "text"})) is None


@pytest.mark.parametrize("engine", ENGINES)
def test_json_schema_reports_violations_with_paths(engine: str) -> None:
    check = JsonSchemaCheck(cache=SchemaCache(engine=engine))  # type: ignore[arg-type]
    draft = {"items": [{"name": "a", "price": 1}, {"name": "b", "price": "free"}], "x": 1}
    reasons = check(Completion(text=json.dumps(draft)), schema_turn(ANSWER_SCHEMA))
    assert reasons is not None
    joined = "\n".join(reasons)
    assert "$.answer: " in joined and "required property" in joined
    assert "$.items[1].price: " in joined and "not of type" in joined
    assert "$: Additional properties are not allowed" in joined


@pytest.mark.parametrize("engine", ENGINES)
def test_json_schema_broken_schema_is_a_reason(engine: str) -> None:
    check = JsonSchemaCheck(cache=SchemaCache(engine=engine))  # type: ignore[arg-type]
    for schema in ({"type": "nope"}, {"$ref": "#/$defs/missing"}, {"$ref": "http://x.test/s"}):
        reasons = check(Completion(text="{}"), schema_turn(schema))
        assert reasons is not None and reasons[0].startswith("invalid schema")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"answer": "Paris", ', "not valid JSON"),
        ('```json\n{"answer": "Paris", "items": []}\n```', "code fence"),
        ('{"answer": NaN, "items": []}', "not valid JSON"),
        ("", "content is empty"),
    ],
)
def test_json_schema_fails_unparsable_content(text: str, reason: str) -> None:
    reasons = JsonSchemaCheck()(Completion(text=text), schema_turn(ANSWER_SCHEMA))
    assert reasons is not None and reason in reasons[0]


def test_json_schema_limits_reported_errors() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    reasons = JsonSchemaCheck(max_errors=2)(
        Completion(text='["a","b","c","d"]'), schema_turn(schema)
    )
    assert reasons is not None and len(reasons) == 3 and reasons[-1] == "... and 2 more errors"


def test_json_object_format() -> None:
    check = JsonSchemaCheck()
    fmt = turn(response_format={"type": "json_object"})
    assert check(Completion(text='{"a": 1}'), fmt) is None
    assert check(Completion(text="[1, 2]"), fmt) == ["content must be a JSON object, got array"]
    reasons = check(Completion(text="{'a': 1}"), fmt)
    assert reasons is not None and "not valid JSON" in reasons[0]


def test_parse_json_is_strict_and_exact() -> None:
    assert parse_json('{"a": [1, 2.5, null, true, "\\u00e9"]}') == {"a": [1, 2.5, None, True, "é"]}
    huge = JsonSchemaCheck()(
        Completion(text="[123456789012345678901234567890]"),
        schema_turn({"items": {"type": "integer"}}),
    )
    assert huge is None
    with pytest.raises(ValueError, match="Infinity is not valid JSON"):
        parse_json("[Infinity]")
    with pytest.raises(ValueError, match="line 1 column"):
        parse_json('{"a" 1}')


def test_json_path_rendering() -> None:
    assert json_path([]) == "$"
    assert json_path(["items", 3, "name"]) == "$.items[3].name"
    assert json_path(["a b", 0]) == '$["a b"][0]'


# ---- tool_arguments


def tools_turn(**kwargs: Any) -> Turn:
    return turn(tools=[WEATHER_TOOL, SEARCH_TOOL], **kwargs)


def test_tool_arguments_passes_valid_calls() -> None:
    completion = Completion(
        tool_calls=(call("get_weather", '{"city": "Paris", "unit": "celsius"}'), call("search", ""))
    )
    assert ToolArgumentsCheck()(completion, tools_turn()) is None
    assert ToolArgumentsCheck()(Completion(text="no calls"), tools_turn()) is None


def test_tool_arguments_unknown_tool_names_it_and_the_declared_ones() -> None:
    reasons = ToolArgumentsCheck()(Completion(tool_calls=(call("get_wether", "{}"),)), tools_turn())
    assert reasons == ["tool_calls[0]: unknown tool 'get_wether'; declared: get_weather, search"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"city": "Paris"', "arguments are not valid JSON"),
        ('["Paris"]', "arguments must be a JSON object, got array"),
        ('{"unit": "kelvin"}', "$.city: "),
        ('{"unit": "kelvin", "city": "Paris"}', "$.unit: "),
        ("", "$.city: "),
    ],
)
def test_tool_arguments_bad_args(arguments: str, expected: str) -> None:
    reasons = ToolArgumentsCheck()(
        Completion(tool_calls=(call("get_weather", arguments),)), tools_turn()
    )
    assert reasons is not None
    assert all(r.startswith("tool_calls[0] (get_weather): ") for r in reasons)
    assert any(expected in r for r in reasons)


def test_tool_arguments_calls_without_declared_tools() -> None:
    reasons = ToolArgumentsCheck()(Completion(tool_calls=(call("search", "{}"),)), turn())
    assert reasons == ["1 tool call(s) ('search') but the turn declared no tools"]


def test_tool_arguments_honours_tool_choice() -> None:
    check = ToolArgumentsCheck()
    text_only = Completion(text="It is sunny.")
    weather = Completion(tool_calls=(call("get_weather", '{"city": "Oslo"}'),))
    assert check(text_only, tools_turn(params={"tool_choice": "required"})) is not None
    assert check(weather, tools_turn(params={"tool_choice": "none"})) is not None
    named = {"type": "function", "function": {"name": "search"}}
    reasons = check(weather, tools_turn(params={"tool_choice": named}))
    assert reasons == ["tool_choice names 'search' but the draft called get_weather"]
    assert check(weather, tools_turn(params={"tool_choice": "auto"})) is None


# ---- regex and max_chars


def test_regex_must_match() -> None:
    gate = QualityGate([("regex", {"pattern": "^ANSWER: ", "flags": "m"})])
    assert gate.evaluate(Completion(text="Thinking...\nANSWER: 4"), turn()).passed
    verdict = gate.evaluate(Completion(text="4"), turn())
    assert verdict.reasons == ("regex: text does not match /^ANSWER: /",)


def test_regex_must_not_match_with_named_flags() -> None:
    gate = QualityGate(
        [{"regex": {"pattern": "lorem ipsum", "must_match": False, "flags": ["IGNORECASE"]}}]
    )
    assert gate.evaluate(Completion(text="A real answer."), turn()).passed
    verdict = gate.evaluate(Completion(text="Lorem Ipsum dolor"), turn())
    assert verdict.failed_checks == ("regex",) and "at char 0" in verdict.reasons[0]


@pytest.mark.parametrize(
    ("options", "message", "option"),
    [
        ({"pattern": "("}, "invalid regular expression", "pattern"),
        ({"pattern": r"(a)\1"}, "no backreferences", "pattern"),
        ({"pattern": "x(?=y)"}, "no lookaround", "pattern"),
        ({"pattern": "a", "flags": "q"}, "unknown flag 'q'", "flags"),
        ({"pattern": "a", "flags": "x"}, "unknown flag 'x'", "flags"),
        ({"pattern": "a", "must_match": "yes"}, "must be true or false", "must_match"),
        ({}, "missing option 'pattern'", None),
        (
            {"pattern": "a", "colour": "red"},
            "unknown option 'colour'; known: flags, must_match, pattern",
            "colour",
        ),
    ],
)
def test_regex_bad_options(options: dict[str, Any], message: str, option: str | None) -> None:
    with pytest.raises(PolicyError, match=message) as info:
        QualityGate(["non_empty", ("regex", options)])
    assert info.value.field == ("gate.checks[1]" + (f".regex.{option}" if option else ""))


def test_regex_runs_in_linear_time_on_a_catastrophic_pattern() -> None:
    # with a backtracking engine this pattern takes exponential time in the draft's length;
    # on RE2 it is a plain scan, so even 100,000 characters are checked
    gate = QualityGate([("regex", {"pattern": "^(a+)+$"})])
    verdict = gate.evaluate(Completion(text="a" * 100_000 + "b"), turn())
    assert verdict.reasons == ("regex: text does not match /^(a+)+$/",)
    assert gate.evaluate(Completion(text="a" * 100_000), turn()).passed


def test_regex_flags_and_unicode_text() -> None:
    gate = QualityGate([("regex", {"pattern": "^café: \\pL+$", "flags": ["i", "MULTILINE", "a"]})])
    assert gate.evaluate(Completion(text="intro\nCAFÉ: Crème"), turn()).passed
    verdict = gate.evaluate(Completion(text="café: 42"), turn())
    assert not verdict.passed
    dotall = QualityGate([("regex", {"pattern": "a.b", "flags": "s", "must_match": False})])
    verdict = dotall.evaluate(Completion(text="xx é a\nb"), turn())
    assert verdict.reasons == ("regex: text matches forbidden /a.b/ at char 5: 'a\\nb'",)


def test_max_chars() -> None:
    gate = QualityGate([{"max_chars": {"limit": 10}}])
    assert gate.evaluate(Completion(text="short"), turn()).passed
    verdict = gate.evaluate(Completion(text="far too long"), turn())
    assert verdict.reasons == ("max_chars: text is 12 characters (max 10)",)
    with pytest.raises(PolicyError, match="missing option 'limit'"):
        QualityGate(["max_chars"])


# ---- the gate


def test_gate_collects_every_failure_in_order() -> None:
    gate = QualityGate(["non_empty", "not_truncated", "json_schema"])
    verdict = gate.evaluate(Completion(text="", finish_reason="length"), schema_turn(ANSWER_SCHEMA))
    assert isinstance(verdict, Verdict) and not verdict.passed and not verdict
    assert verdict.failed_checks == ("non_empty", "not_truncated", "json_schema")
    assert verdict.checks == gate.names == ("non_empty", "not_truncated", "json_schema")


def test_gate_passes_a_good_draft() -> None:
    gate = QualityGate.from_config(GateConfig())
    text = '{"answer": "Paris", "items": []}'
    verdict = gate.evaluate(Completion(text=text), schema_turn(ANSWER_SCHEMA))
    assert verdict.passed and verdict.failures == ()
    assert gate.names == tuple(GateConfig().checks)


def test_from_config_reads_options() -> None:
    config = GateConfig(checks=["non_empty", {"max_chars": {"limit": 3}}, {"repetition": {"n": 3}}])
    gate = QualityGate.from_config(config)
    assert gate.names == ("non_empty", "max_chars", "repetition")
    assert gate.evaluate(Completion(text="four"), turn()).failed_checks == ("max_chars",)


def test_unknown_check_name_lists_known_names() -> None:
    with pytest.raises(PolicyError) as info:
        QualityGate(["non_empty", "no_such_check"])
    message = str(info.value)
    assert "unknown check 'no_such_check'" in message
    for name in ("json_schema", "max_chars", "no_refusal", "regex", "repetition", "tool_arguments"):
        assert name in message
    assert info.value.field == "gate.checks[1]"


@pytest.mark.parametrize(
    "spec",
    [{"non_empty": None, "regex": None}, ("regex",), 42, {"max_chars": [1]}],
)
def test_malformed_specs_are_policy_errors(spec: Any) -> None:
    with pytest.raises(PolicyError, match=r"gate\.checks\[0\]"):
        QualityGate([spec])


def test_a_check_that_raises_is_a_failure_not_an_exception() -> None:
    def crashes(completion: Completion, turn: Turn) -> str | None:
        return str(1 / 0)

    gate = QualityGate([crashes, "non_empty"])
    verdict = gate.evaluate(Completion(text=""), turn())
    assert verdict.failed_checks == ("crashes", "non_empty")
    assert verdict.failures[0].reason == "check raised ZeroDivisionError: division by zero"


def test_checks_may_return_several_reasons_or_misbehave() -> None:
    def several(completion: Completion, turn: Turn) -> Iterator[str]:
        yield "first"
        yield "second"

    def nothing(completion: Completion, turn: Turn) -> list[str]:
        return []

    def boolean(completion: Completion, turn: Turn) -> bool:
        return False

    gate = QualityGate([several, nothing, boolean])  # type: ignore[list-item]
    verdict = gate.evaluate(Completion(text="x"), turn())
    assert [(f.check, f.reason) for f in verdict.failures[:2]] == [
        ("several", "first"),
        ("several", "second"),
    ]
    assert verdict.failed_checks == ("several", "boolean")
    assert "check returned bool" in verdict.failures[2].reason


def test_register_check_function_and_factory() -> None:
    name = f"no_todo_{next(_counter)}"

    def no_todo(completion: Completion, turn: Turn) -> str | None:
        return "draft contains TODO" if "TODO" in completion.text else None

    register_check(name, no_todo)
    assert name in check_names()
    gate = QualityGate([name])
    assert gate.evaluate(Completion(text="TODO: finish"), turn()).reasons == (
        f"{name}: draft contains TODO",
    )
    assert gate.evaluate(Completion(text="done"), turn()).passed
    with pytest.raises(ValueError, match="already registered"):
        register_check(name, no_todo)
    with pytest.raises(PolicyError, match="takes no options"):
        QualityGate([(name, {"x": 1})])
    default_registry().unregister(name)
    assert name not in check_names()


def test_private_registry_with_a_factory() -> None:
    def min_chars(*, limit: int) -> Any:
        def check(completion: Completion, turn: Turn) -> str | None:
            return f"shorter than {limit}" if len(completion.text) < limit else None

        return check

    registry = CheckRegistry()
    registry.register("min_chars", factory=min_chars)
    gate = QualityGate([{"min_chars": {"limit": 5}}], registry=registry)
    assert gate.names == ("min_chars",)
    assert gate.evaluate(Completion(text="abc"), turn()).reasons == ("min_chars: shorter than 5",)
    with pytest.raises(PolicyError, match="unknown check 'non_empty'; known: min_chars"):
        QualityGate(["non_empty"], registry=registry)
    with pytest.raises(PolicyError, match="check 'min_chars': .*limit"):
        QualityGate(["min_chars"], registry=registry)


def test_registry_rejects_ambiguous_registrations() -> None:
    registry = default_registry().copy()
    with pytest.raises(TypeError, match="exactly one"):
        registry.register("x")
    with pytest.raises(TypeError, match="pass it as factory="):
        registry.register("x", NonEmptyCheck)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use letters"):
        registry.register("bad name", NonEmptyCheck())
    registry.register("non_empty", NonEmptyCheck(eos_tokens=["<x>"]), replace=True)
    assert "non_empty" in registry and "non_empty" in default_registry()


# ---- schema cache


def test_same_schema_object_is_compiled_once() -> None:
    cache = SchemaCache()
    check = JsonSchemaCheck(cache=cache)
    schema_of_turn = schema_turn(ANSWER_SCHEMA)
    good = Completion(text='{"answer": "a", "items": []}')
    assert check(good, schema_of_turn) is None
    assert check(Completion(text='{"answer": 1, "items": []}'), schema_of_turn) is not None
    info = cache.cache_info()
    assert (info.compiled, info.misses, info.hits, info.size) == (1, 1, 1, 1)
    # an equal schema built anew (as from a fresh request) hits through its canonical JSON
    assert check(good, schema_turn(json.loads(json.dumps(ANSWER_SCHEMA)))) is None
    assert cache.cache_info().compiled == 1 and cache.cache_info().hits == 2


def test_default_cache_info_counts_compiles() -> None:
    schema = {"type": "object", "properties": {"k": {"const": next(_counter)}}}
    before = cache_info()
    gate = QualityGate(["json_schema", "tool_arguments"])
    t = schema_turn(schema)
    for _ in range(3):
        assert gate.evaluate(Completion(text="{}"), t).passed
    after = cache_info()
    assert after.compiled - before.compiled == 1
    assert after.hits - before.hits >= 2


def test_tool_parameter_schemas_are_cached() -> None:
    cache = SchemaCache()
    check = ToolArgumentsCheck(cache=cache)
    t = tools_turn()
    for _ in range(3):
        assert check(Completion(tool_calls=(call("get_weather", '{"city": "Rome"}'),)), t) is None
    assert cache.cache_info().compiled == 1 and cache.cache_info().hits == 2


def test_cache_evicts_least_recently_used_and_clears() -> None:
    cache = SchemaCache(maxsize=1)
    first, second = {"type": "string"}, {"type": "integer"}
    assert cache.validator(first).errors("a") == ()
    assert cache.validator(second).errors(1) == ()
    assert cache.validator({"type": "string"}).errors(1) != ()
    info = cache.cache_info()
    assert (info.compiled, info.size, info.maxsize) == (3, 1, 1)
    cache.clear()
    assert cache.cache_info().compiled == 0 and cache.cache_info().size == 0


def test_cache_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        SchemaCache(maxsize=0)
    with pytest.raises(ValueError, match="unknown engine 'fast'"):
        SchemaCache(engine="fast")  # type: ignore[arg-type]


def test_importing_the_gate_loads_no_schema_library() -> None:
    code = (
        "import sys, tiered_router.gate;"
        "bad = [m for m in ('jsonschema', 'jsonschema_rs', 'orjson') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


# ---- real model outputs (skipped when ../shared/data is absent)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.skipif(not (DATA / "alpacaeval2_pairwise").is_dir(), reason="shared data absent")
def test_real_answers_rarely_trip_the_text_checks() -> None:
    lines = (DATA / "alpacaeval2_pairwise" / "outputs.jsonl").read_text().splitlines()
    outputs = [json.loads(line)["output"] for line in lines]
    assert len(outputs) > 500
    gate = QualityGate(["non_empty", "not_truncated", "repetition", "no_refusal"])
    failed: dict[str, int] = {}
    for text in outputs:
        for name in gate.evaluate(Completion(text=text), turn()).failed_checks:
            failed[name] = failed.get(name, 0) + 1
    assert failed.get("non_empty", 0) == failed.get("not_truncated", 0) == 0
    assert failed.get("repetition", 0) <= len(outputs) // 500
    assert failed.get("no_refusal", 0) <= len(outputs) // 50  # real refusals exist in the set


@pytest.mark.parametrize("engine", ENGINES)
def test_schema_cache_engines_agree_on_shape(engine: str) -> None:
    cache = SchemaCache(engine=engine)  # type: ignore[arg-type]
    good = cache.validator(MappingProxyType({"type": "object", "required": ["a"]}))
    assert good.problem is None and good.errors({"a": 1}) == ()
    assert good.errors({}) in (
        ("$.a: 'a' is a required property",),
        ('$.a: "a" is a required property',),
    )
    long = cache.validator({"type": "integer"}).errors("x" * 1000)
    assert len(long) == 1 and len(long[0]) < 300 and long[0].endswith("...")
    broken = cache.validator({"properties": {"a": {"type": "nope"}}})
    assert broken.problem is not None and broken.problem.startswith("invalid schema at $.")
    assert cache.cache_info().engine == engine and engine in repr(cache)


def test_schemas_that_are_not_json_objects_are_reasons() -> None:
    cache = SchemaCache()
    assert cache.validator({"enum": [{1, 2}]}).errors(1)[0].startswith("invalid schema: not JSON")
    assert cache.validator([1, 2]).errors(1) == ("invalid schema: must be an object, got list",)


def test_reprs_name_the_checks() -> None:
    assert repr(QualityGate(["non_empty", ("regex", {"pattern": "x"})])) == (
        "QualityGate(['non_empty', 'regex'])"
    )
    assert "non_empty" in repr(default_registry())
    assert len(QualityGate(["non_empty"])) == 1
