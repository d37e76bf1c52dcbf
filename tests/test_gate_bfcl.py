"""Call-level gate checks (tool_call_in_text, redundant_tool_calls, argument_grounding,
requested_tools) and the BFCL spec conversion they are measured with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiered_router.evaluation import _bfcl, find_data_dir
from tiered_router.exceptions import PolicyError
from tiered_router.gate import QualityGate, check_names
from tiered_router.gate._calls import ToolCallInTextCheck
from tiered_router.gate._grounding import ArgumentGroundingCheck, RequestedToolsCheck
from tiered_router.gate._redundant import RedundantToolCallsCheck
from tiered_router.turn import Completion, ToolCall, Turn

NEW_CHECKS = ["tool_call_in_text", "redundant_tool_calls", "argument_grounding", "requested_tools"]


def _tool(name: str, properties: dict[str, Any], required: list[str] | None = None) -> Any:
    params: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": params}}


WEATHER = _tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}})
FACTORIAL = _tool("math_factorial", {"number": {"type": "integer"}})
EMPLOYEE = _tool(
    "employee_fetch_data",
    {
        "company_name": {"type": "string"},
        "employee_id": {"type": "integer"},
        "data_field": {"type": "array", "items": {"type": "string"}},
    },
)
RATE = _tool(
    "calculate_compounded_interest",
    {
        "principal": {"type": "number"},
        "interest_rate": {"type": "number", "description": "The annual interest rate."},
        "period": {"type": "integer"},
        "brightness": {"type": "number", "description": "Screen brightness in percentage."},
    },
)


def _turn(text: str, *tools: Any, **kwargs: Any) -> Turn:
    return Turn([{"role": "user", "content": text}], tools=list(tools) or None, **kwargs)


def _calls(*calls: tuple[str, dict[str, Any] | str]) -> Completion:
    return Completion(
        tool_calls=tuple(
            ToolCall(id=f"c{i}", name=n, arguments=a if isinstance(a, str) else json.dumps(a))
            for i, (n, a) in enumerate(calls)
        ),
        finish_reason="tool_calls",
    )


# -- tool_call_in_text -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'Here is how:\n```python\nfunctions.get_weather(city="Paris")\n```',
        "Call get_weather(city='Paris', unit='celsius') to get it.",
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    ],
)
def test_a_call_written_as_text_fails(text: str) -> None:
    reason = ToolCallInTextCheck()(Completion(text=text), _turn("Weather in Paris?", WEATHER))
    assert reason is not None and "'get_weather'" in reason and "instead of calling it" in reason


def test_a_namespaced_tool_written_with_dots_fails() -> None:
    draft = Completion(text="Use `math.factorial(number=5)`; it returns 120.")
    reason = ToolCallInTextCheck()(draft, _turn("Factorial of 5?", FACTORIAL))
    assert reason is not None and "'math_factorial'" in reason


@pytest.mark.parametrize(
    "text",
    [
        "I can only look up the weather with the get_weather function; I cannot book hotels.",
        "The `get_weather()` tool does not cover hotel bookings.",
        "It is sunny in Paris.",
    ],
)
def test_prose_that_only_mentions_a_tool_passes(text: str) -> None:
    assert ToolCallInTextCheck()(Completion(text=text), _turn("Book a hotel.", WEATHER)) is None


def test_tool_call_in_text_ignores_calls_no_tools_and_tool_choice_none() -> None:
    text = Completion(text='get_weather(city="Paris")')
    check = ToolCallInTextCheck()
    assert check(text, _turn("Weather?")) is None  # no tools declared
    assert check(text, _turn("Weather?", WEATHER, params={"tool_choice": "none"})) is None
    called = Completion(
        text='get_weather(city="Paris")', tool_calls=_calls(("get_weather", {})).tool_calls
    )
    assert check(called, _turn("Weather?", WEATHER)) is None
    assert check(text, _turn("Weather?", WEATHER)) is not None


# -- redundant_tool_calls --------------------------------------------------------------------


def test_the_same_call_twice_fails_whatever_the_key_order() -> None:
    draft = _calls(
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("get_weather", '{"unit": "celsius", "city": "Paris"}'),
    )
    reasons = RedundantToolCallsCheck()(draft, _turn("Weather in Paris in celsius?", WEATHER))
    assert reasons == [
        "tool_calls[1] (get_weather) repeats tool_calls[0]: same tool, same arguments"
    ]


def test_different_calls_pass() -> None:
    draft = _calls(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}))
    assert RedundantToolCallsCheck()(draft, _turn("Weather in Paris and Rome?", WEATHER)) is None
    mixed = _calls(("get_weather", {"city": "Paris"}), ("math_factorial", {"number": 5}))
    assert RedundantToolCallsCheck()(mixed, _turn("x", WEATHER, FACTORIAL)) is None


def test_a_list_parameter_split_into_one_call_per_element_fails() -> None:
    base = {"company_name": "ABC Ltd.", "employee_id": 345}
    draft = _calls(
        ("employee_fetch_data", {**base, "data_field": ["Personal Info"]}),
        ("employee_fetch_data", {**base, "data_field": ["Job History"]}),
    )
    turn = _turn("Personal Info and Job History of employee 345 at ABC Ltd.", EMPLOYEE)
    reasons = RedundantToolCallsCheck()(draft, turn)
    assert reasons is not None and "split the list parameter 'data_field'" in reasons[0]
    assert '["Personal Info","Job History"]' in reasons[0]
    assert RedundantToolCallsCheck(split_lists=False)(draft, turn) is None


def test_one_element_values_of_a_non_list_parameter_are_not_a_split() -> None:
    tool = _tool("lookup", {"tags": {"type": "string"}, "id": {"type": "integer"}})
    draft = _calls(("lookup", {"id": 1, "tags": ["a"]}), ("lookup", {"id": 1, "tags": ["b"]}))
    assert RedundantToolCallsCheck()(draft, _turn("a and b for 1", tool)) is None


def test_a_repeat_padded_with_unrequested_arguments_fails() -> None:
    hypot = _tool("math_hypot", {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {}})
    draft = _calls(("math_hypot", {"x": 4, "y": 5}), ("math_hypot", {"x": 4, "y": 5, "z": 0}))
    turn = _turn("Hypotenuse of a right triangle with sides 4 and 5.", hypot)
    reasons = RedundantToolCallsCheck()(draft, turn)
    assert reasons is not None and "repeats tool_calls[0] with extra arguments" in reasons[0]
    assert "z=0" in reasons[0]
    assert RedundantToolCallsCheck(padded=False)(draft, turn) is None


def test_a_repeat_with_requested_extra_arguments_passes() -> None:
    draft = _calls(
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Paris", "unit": "kelvin"})
    )
    turn = _turn("Weather in Paris, and again in kelvin.", WEATHER)
    assert RedundantToolCallsCheck()(draft, turn) is None
    sci = _tool("force", {"q": {"type": "integer"}, "eps": {"type": "number"}})
    padded = _calls(("force", {"q": 5}), ("force", {"q": 5, "eps": 5e-12}))
    stated = _turn("Force for charge 5, in vacuum and with a permittivity of 5 x 10^-12 F/m.", sci)
    assert RedundantToolCallsCheck()(padded, stated) is None


def test_unparsable_arguments_are_left_to_tool_arguments() -> None:
    draft = _calls(("get_weather", "{oops"), ("get_weather", "{oops"))
    assert RedundantToolCallsCheck()(draft, _turn("Weather?", WEATHER)) is None


# -- argument_grounding -----------------------------------------------------------------------


def test_a_percentage_passed_as_a_whole_number_fails() -> None:
    draft = _calls(
        ("calculate_compounded_interest", {"principal": 5000, "interest_rate": 5, "period": 10})
    )
    turn = _turn("Compound interest on $5000 at 5% for 10 years.", RATE)
    reasons = ArgumentGroundingCheck()(draft, turn)
    assert reasons == [
        "tool_calls[0] (calculate_compounded_interest): $.interest_rate: 5 is the conversation's "
        "5% written as a whole number, and 'interest_rate' does not say it takes a percentage: "
        "the fraction 0.05 is expected"
    ]
    assert ArgumentGroundingCheck(percent_scale=False)(draft, turn) is None


@pytest.mark.parametrize(
    "args",
    [
        {"principal": 5000, "interest_rate": 0.05, "period": 10},  # a fraction
        {"principal": 5000, "brightness": 70},  # the description says percentage
        {"principal": 5000, "period": 5},  # integer parameter
    ],
)
def test_fractions_and_declared_percentages_pass(args: dict[str, Any]) -> None:
    turn = _turn("Invest $5000 at 5% for 5 years, screen at 70%.", RATE)
    assert ArgumentGroundingCheck()(_calls(("calculate_compounded_interest", args)), turn) is None


def test_a_number_also_written_without_a_percent_sign_is_ambiguous_and_passes() -> None:
    draft = _calls(("calculate_compounded_interest", {"principal": 5000, "interest_rate": 5}))
    turn = _turn("Invest $5000 at 5% for 5 years.", RATE)  # the 5 may be the years
    assert ArgumentGroundingCheck()(draft, turn) is None
    per_cent = _turn("Invest $5000 at 5 per cent a year.", RATE)
    assert ArgumentGroundingCheck()(draft, per_cent) is not None


def test_numbers_without_a_percent_sign_pass() -> None:
    draft = _calls(("calculate_compounded_interest", {"principal": 5000, "interest_rate": 5}))
    assert ArgumentGroundingCheck()(draft, _turn("Rate 5, principal 5000.", RATE)) is None


def test_unstated_years_are_opt_in() -> None:
    concert = _tool("concert_find", {"city": {"type": "string"}, "date": {"type": "string"}})
    draft = _calls(("concert_find", {"city": "Berlin", "date": "2023-11-03"}))
    relative = _turn("Classical concerts in Berlin next Friday?", concert)
    assert ArgumentGroundingCheck()(draft, relative) is None  # off by default
    on = ArgumentGroundingCheck(unstated_years=True)
    reasons = on(draft, relative)
    assert reasons is not None and "the year 2023 of '2023-11-03'" in reasons[0]
    dated = Turn(
        [
            {"role": "system", "content": "Today is Monday 2023-10-30."},
            {"role": "user", "content": "Classical concerts in Berlin next Friday?"},
        ],
        tools=[concert],
    )
    assert on(draft, dated) is None


# -- requested_tools --------------------------------------------------------------------------

SEARCH = _tool("court_records_search_cases", {"location": {"type": "string"}})
BRIEFS = _tool("briefs_display_cases", {"case_id": {"type": "array"}})
LIBRARY = [
    _tool("library_search_book", {"book_name": {"type": "string"}}),
    _tool("library_reserve_book", {"book_id": {"type": "string"}}),
]


def test_a_requested_tool_left_uncalled_fails() -> None:
    turn = _turn("Search the library for 'Dune' and reserve book id 123ABC.", *LIBRARY)
    draft = _calls(("library_search_book", {"book_name": "Dune"}))
    reason = RequestedToolsCheck()(draft, turn)
    assert reason is not None and "'library_reserve_book'" in reason
    both = _calls(
        ("library_search_book", {"book_name": "Dune"}),
        ("library_reserve_book", {"book_id": "123ABC"}),
    )
    assert RequestedToolsCheck()(both, turn) is None


def test_requested_tools_passes_prose_unnamed_tools_and_earlier_calls() -> None:
    check = RequestedToolsCheck()
    turn = _turn("Find theft cases in New York and display briefs of the cases.", SEARCH, BRIEFS)
    assert check(Completion(text="Which year?"), turn) is None  # no call: not judged here
    unnamed = _turn("Find theft cases in New York.", SEARCH, BRIEFS)
    assert check(_calls(("court_records_search_cases", {"location": "NY"})), unnamed) is None
    earlier = Turn(
        [
            {
                "role": "user",
                "content": "Search theft cases in NY and display briefs of the cases.",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "briefs_display_cases", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "[]"},
        ],
        tools=[SEARCH, BRIEFS],
    )
    assert check(_calls(("court_records_search_cases", {"location": "NY"})), earlier) is None
    long_names = RequestedToolsCheck(min_words=4)
    assert long_names(_calls(("court_records_search_cases", {"location": "NY"})), turn) is None


# -- registry and gate ------------------------------------------------------------------------


def test_new_checks_are_registered_and_validate_options() -> None:
    assert set(NEW_CHECKS) <= set(check_names())
    gate = QualityGate([*NEW_CHECKS, {"argument_grounding": {"unstated_years": True}}])
    assert gate.names == (*NEW_CHECKS, "argument_grounding")
    with pytest.raises(PolicyError, match="split_lists: must be true or false"):
        QualityGate([{"redundant_tool_calls": {"split_lists": "yes"}}])
    with pytest.raises(PolicyError, match="min_words: must be an integer >= 1"):
        QualityGate([{"requested_tools": {"min_words": 0}}])
    with pytest.raises(PolicyError, match="unknown option"):
        QualityGate([{"tool_call_in_text": {"strict": True}}])


def test_an_ordinary_agent_tool_turn_passes_every_new_check() -> None:
    flights = _tool(
        "search_flights",
        {
            "origin": {"type": "string"},
            "date": {"type": "string"},
            "passengers": {"type": "integer"},
        },
    )
    draft = _calls(
        ("search_flights", {"origin": "CDG", "date": "2026-03-14", "passengers": 2}),
        ("get_weather", {"city": "New York", "unit": "celsius"}),
    )
    turn = _turn(
        "Find me a flight to NYC on 14 March for two, and the weather there.", flights, WEATHER
    )
    verdict = QualityGate(["tool_arguments", *NEW_CHECKS]).evaluate(draft, turn)
    assert verdict.passed, verdict.reasons


# -- BFCL conversion ------------------------------------------------------------------------


def test_bfcl_parameters_are_a_closed_object_with_open_nested_dicts() -> None:
    spec = {
        "type": "dict",
        "properties": {
            "rate": {"type": "float"},
            "coords": {"type": "tuple", "items": {"type": "float"}},
            "info": {"type": "dict", "properties": {"name": {"type": "string"}}},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "anything": {"type": "any"},
        },
        "required": ["rate"],
    }
    schema = _bfcl.to_json_schema(spec)
    assert schema["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["info"]
    assert schema["properties"]["coords"] == {"type": "array", "items": {"type": "number"}}
    assert schema["properties"]["mode"]["enum"] == ["a", "b"]
    assert schema["properties"]["anything"] == {}
    java = _bfcl.to_json_schema(
        {"type": "dict", "properties": {"n": {"type": "long"}}}, language="java"
    )
    assert java["additionalProperties"] is False and java["properties"]["n"]["type"] == "string"
    assert "additionalProperties" not in _bfcl.to_json_schema({"type": "dict"})


def test_an_undeclared_argument_fails_tool_arguments_on_a_bfcl_schema() -> None:
    params = _bfcl.to_json_schema(
        {"type": "dict", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    )
    turn = _turn("x is 1", {"type": "function", "function": {"name": "f", "parameters": params}})
    verdict = QualityGate(["tool_arguments"]).evaluate(_calls(("f", {"x": 1, "y": 2})), turn)
    assert not verdict.passed and "'y' was unexpected" in verdict.reasons[0]
    assert QualityGate(["tool_arguments"]).evaluate(_calls(("f", {"x": 1})), turn).passed


def test_prompt_mode_calls_with_python_keywords_are_parsed() -> None:
    _, calls = _bfcl.parse_result(
        "[dvRangeQuery(field='t', from='20.5', to='30.0'), "
        "Tests.getChildren(node=n, node_type=Element.class)]"
    )
    assert [c.name for c in calls] == ["dvRangeQuery", "Tests_getChildren"]
    assert calls[0].parsed_arguments() == {"field": "t", "from": "20.5", "to": "30.0"}
    assert calls[1].parsed_arguments() == {"node": "n", "node_type": "Element.class"}
    text, none = _bfcl.parse_result("[f(x=)]")
    assert none == () and text == "[f(x=)]"


# -- on the recorded BFCL answers -----------------------------------------------------------

DATA = find_data_dir()


@pytest.mark.skipif(
    DATA is None or not (Path(DATA) / "bfcl_v1_results").is_dir(),
    reason="../shared/data/bfcl_v1_results is not here",
)
def test_on_recorded_bfcl_answers_the_call_checks_catch_more_at_few_false_alarms() -> None:
    from tiered_router.evaluation.sources import load_bfcl

    assert DATA is not None
    model = "gpt-4o-mini-2024-07-18-FC"
    ds = load_bfcl(DATA, models=[model])
    base = QualityGate(["non_empty", "json_schema", "tool_arguments"])
    full = QualityGate(["non_empty", "json_schema", "tool_arguments", *NEW_CHECKS])
    caught = {"base": 0, "full": 0}
    alarms = {"base": 0, "full": 0}
    wrong = right = 0
    for row in ds.rows:
        outcome = row.outcomes[model]
        draft = outcome.completion(model=model, backend="fast")
        for name, gate in (("base", base), ("full", full)):
            failed = not gate.evaluate(draft, row.turn).passed
            if outcome.correct:
                alarms[name] += failed
            else:
                caught[name] += failed
        right += outcome.correct
        wrong += not outcome.correct
    assert alarms["full"] <= 0.01 * right
    assert caught["full"] >= 0.30 * wrong > caught["base"]
