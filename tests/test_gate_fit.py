"""Text-form tool calls, tool_fit, argument_grounding's unstated_calls, enumerated_targets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered_router.evaluation import find_data_dir
from tiered_router.exceptions import PolicyError
from tiered_router.gate import QualityGate, lift_text_tool_calls, parse_text_tool_calls
from tiered_router.policy import GateConfig
from tiered_router.turn import Completion, ToolCall, ToolSpec, Turn


def _tool(name: str, properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    fn: dict[str, Any] = {
        "name": name,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": list(properties)[:1],
            "additionalProperties": False,
        },
    }
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


WEATHER = _tool(
    "get_weather",
    {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "Current weather for a city.",
)
FACTORIAL = _tool("math.factorial", {"number": {"type": "integer"}}, "Factorial of a number.")
AREA = _tool(
    "triangle_area",
    {"base": {"type": "number"}, "height": {"type": "number"}},
    "Area of a triangle from its base and height.",
)
GENE = _tool(
    "get_protein_sequence",
    {"gene": {"type": "string"}, "species": {"type": "string"}},
    "Protein sequence encoded by a gene.",
)
DEFAULT = QualityGate(GateConfig().checks)


def _turn(text: str, *tools: dict[str, Any], **kwargs: Any) -> Turn:
    return Turn([{"role": "user", "content": text}], tools=list(tools), **kwargs)


def _calls(*calls: tuple[str, dict[str, Any]]) -> Completion:
    return Completion(
        tool_calls=tuple(
            ToolCall(id=f"c{i}", name=n, arguments=json.dumps(a)) for i, (n, a) in enumerate(calls)
        ),
        finish_reason="tool_calls",
    )


# -- text-form calls ----------------------------------------------------------------------

PARIS = [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[get_weather(city='Paris')]", PARIS),
        ('get_weather(city="Paris")', PARIS),
        ("functions.get_weather(city='Paris');", PARIS),
        (
            "get_weather('Paris', 'celsius')",
            [("get_weather", {"city": "Paris", "unit": "celsius"})],
        ),
        ('[{"name": "get_weather", "arguments": {"city": "Paris"}}]', PARIS),
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', PARIS),
        ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', PARIS),
        (
            '{"tool_calls": [{"function": '
            '{"name": "get_weather", "arguments": {"city": "Paris"}}}]}',
            PARIS,
        ),
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            PARIS,
        ),
        ("<|python_tag|>get_weather(city='Paris')", PARIS),
        (
            "[get_weather(city='Paris'), math.factorial(number=5)]",
            [*PARIS, ("math_factorial", {"number": 5})],
        ),
        (
            'get_weather(city="Paris")\nget_weather(city="Lyon", unit=null)',
            [*PARIS, ("get_weather", {"city": "Lyon", "unit": None})],
        ),
        ("[math_factorial(number=5, from=1)]", [("math_factorial", {"number": 5, "from": 1})]),
    ],
)
def test_text_formats_are_read_as_calls(text: str, expected: list[tuple[str, Any]]) -> None:
    tools = [WEATHER, _tool("math_factorial", {"number": {"type": "integer"}})]
    calls = parse_text_tool_calls(text, tools)
    assert calls is not None, text
    assert [(c.name, c.parsed_arguments()) for c in calls] == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The weather in Paris is mild.",
        "I would call get_weather(city='Paris') for that.",  # prose around the call
        "[print(city='Paris')]",  # not a declared tool
        '{"name": "send_email", "arguments": {}}',
        '<tool_call>{"name": "get_weather"}</tool_call> and more text',
        "get_weather('Paris', 'celsius', 'extra')",  # more positionals than parameters
        "get_weather(**kwargs)",
        '{"name": "get_weather", "arguments": "not json"}',
        "[]",
        "```python\n[get_weather(city='Paris')]\n```",  # an example in a fence
        "[get_weather(city=...)]",  # not a literal value
        "[get_weather(city=paris)]",
        "<think>[get_weather(city='Paris')]</think>It is sunny.",  # inside reasoning
    ],
)
def test_other_text_is_not_read_as_calls(text: str) -> None:
    assert parse_text_tool_calls(text, [ToolSpec.from_openai(WEATHER), "math_factorial"]) is None


def test_right_calls_written_as_text_pass_the_default_gate() -> None:
    turn = _turn("What's the weather in Paris, in celsius?", WEATHER)
    for text in (
        "[get_weather(city='Paris', unit='celsius')]",
        'get_weather(city="Paris", unit="celsius")',
        '[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
        "</tool_call>",
    ):
        verdict = DEFAULT.evaluate(Completion(text=text), turn)
        assert verdict.passed, (text, verdict.reasons)


def test_wrong_calls_written_as_text_fail_for_what_is_wrong() -> None:
    turn = _turn("What's the weather in Paris?", WEATHER)
    bad_unit = DEFAULT.evaluate(Completion(text="[get_weather(city='Paris', unit='kelvin')]"), turn)
    # not lifted (its arguments do not validate): the text stays, and the reason says why
    assert bad_unit.failed_checks == ("tool_call_in_text",)
    assert '"kelvin" is not one of' in bad_unit.reasons[0]
    elsewhere = DEFAULT.evaluate(Completion(text='get_weather(city="Tokyo")'), turn)
    assert elsewhere.failed_checks == ("argument_grounding",)
    # reading can be turned off: the text is then a call written as text
    plain = QualityGate(GateConfig().checks, text_tool_calls=False)
    verdict = plain.evaluate(Completion(text="[get_weather(city='Paris')]"), turn)
    assert verdict.failed_checks == ("tool_call_in_text",)


def test_lift_keeps_other_drafts_unchanged() -> None:
    turn = _turn("Weather in Paris?", WEATHER)
    prose = Completion(text="It is sunny.")
    assert lift_text_tool_calls(prose, turn) is prose
    none = _turn("Weather in Paris?", WEATHER, params={"tool_choice": "none"})
    text = Completion(text="[get_weather(city='Paris')]", model="m")
    assert lift_text_tool_calls(text, none) is text
    lifted = lift_text_tool_calls(text, turn)
    assert lifted.text == "" and lifted.finish_reason == "tool_calls" and lifted.model == "m"
    assert lifted.tool_calls[0].id == "text_call_0"


# -- tool_fit -----------------------------------------------------------------------------


def test_tool_fit_fails_a_tool_nothing_asks_for() -> None:
    turn = _turn("Who won the 1998 football World Cup?", AREA)
    verdict = DEFAULT.evaluate(_calls(("triangle_area", {"base": 10, "height": 5})), turn)
    assert "tool_fit" in verdict.failed_checks
    assert "nothing in the conversation asks for this tool" in verdict.reasons[-1]
    assert DEFAULT.evaluate(Completion(text="France won it."), turn).passed


@pytest.mark.parametrize(
    ("request_text", "tool", "args"),
    [
        (
            "What's the area of a triangle with base 10 and height 5?",
            AREA,
            {"base": 10, "height": 5},
        ),
        ("Weather in Lyon?", WEATHER, {"city": "Lyon"}),  # "weather" in the tool's name
        (
            "I have 100 euro. How much is it in USD?",  # no shared word; the amount is stated
            _tool("currency_conversion", {"amount": {"type": "number"}}),
            {"amount": 100},
        ),
        ("Factorial of 5?", FACTORIAL, {"number": 5}),
    ],
)
def test_tool_fit_passes_tools_the_request_asks_for(
    request_text: str, tool: dict[str, Any], args: dict[str, Any]
) -> None:
    name = tool["function"]["name"].replace(".", "_")
    tool = {**tool, "function": {**tool["function"], "name": name}}
    verdict = QualityGate(["tool_fit"]).evaluate(_calls((name, args)), _turn(request_text, tool))
    assert verdict.passed, verdict.reasons


def test_tool_fit_trusts_a_required_or_named_tool_choice() -> None:
    draft = _calls(("triangle_area", {"base": 10, "height": 5}))
    for choice in ("required", {"type": "function", "function": {"name": "triangle_area"}}):
        turn = _turn("Who won the World Cup?", AREA, params={"tool_choice": choice})
        assert QualityGate(["tool_fit"]).evaluate(draft, turn).passed


# -- argument_grounding: unstated_calls ---------------------------------------------------


def test_a_call_with_no_stated_value_fails() -> None:
    turn = _turn("What's the weather in Paris?", WEATHER)
    verdict = QualityGate(["argument_grounding"]).evaluate(
        _calls(("get_weather", {"city": "Tokyo", "unit": "celsius"})), turn
    )
    assert verdict.reasons == (
        "argument_grounding: tool_calls[0] (get_weather): none of its argument values is "
        "stated in the conversation: the call answers some other request",
    )
    off = QualityGate([{"argument_grounding": {"unstated_calls": False}}])
    assert off.evaluate(_calls(("get_weather", {"city": "Tokyo"})), turn).passed
    with pytest.raises(PolicyError, match="unstated_calls: must be true or false"):
        QualityGate([{"argument_grounding": {"unstated_calls": "yes"}}])


@pytest.mark.parametrize(
    ("request_text", "args"),
    [
        ("Weather in NYC?", {"city": "New York"}),  # initials
        ("Weather in Washington?", {"city": "Washington state"}),  # a word of the value
        ("Plot 4x+7 please", {"city": "4*x+7"}),  # punctuation aside
        ("Weather for a deck of cards?", {"city": "GBP"}),  # an upper-case code
        ("Weather, any unit?", {"city": "GBP", "unit": "celsius"}),  # an enum is a choice
        ("Weather?", {}),
        ("Data points 3,4,5 and the weather", {"city": ["3", "4", "5"]}),
    ],
)
def test_values_stated_another_way_pass(request_text: str, args: dict[str, Any]) -> None:
    verdict = QualityGate(["argument_grounding"]).evaluate(
        _calls(("get_weather", args)), _turn(request_text, WEATHER)
    )
    assert verdict.passed, verdict.reasons


# -- enumerated_targets -------------------------------------------------------------------


def test_one_call_for_a_listed_request_fails_enumerated_targets() -> None:
    gate = QualityGate(["enumerated_targets"])
    turn = _turn("Weather in Paris, London and Tokyo?", WEATHER)
    verdict = gate.evaluate(_calls(("get_weather", {"city": "Paris"})), turn)
    assert verdict.failed_checks == ("enumerated_targets",)
    assert "'London' (listed with 'Paris')" in verdict.reasons[0]
    assert "'Tokyo'" in verdict.reasons[0]
    every = _calls(*[("get_weather", {"city": c}) for c in ("Paris", "London", "Tokyo")])
    assert gate.evaluate(every, turn).passed


def test_enumerated_targets_reads_repeated_phrasing_and_skips_non_lists() -> None:
    gate = QualityGate(["enumerated_targets"])
    genes = _turn("Protein of the gene BRCA1 in humans, then the gene BRCA2 too.", GENE)
    assert not gate.evaluate(_calls(("get_protein_sequence", {"gene": "BRCA1"})), genes).passed
    for text, args in (
        ("Weather in Paris, France please", {"city": "Paris"}),  # a place, not a list
        ("Area for a base between 4 and 9", {"city": "Paris"}),  # nothing stated is listed
        ("Weather in New York City, NY and Los Angeles, CA", {"city": "New York City"}),
    ):
        assert gate.evaluate(_calls(("get_weather", args)), _turn(text, WEATHER)).passed, text
    numbers = _turn("Area of triangles with base 4 and 9, height 2", AREA)
    assert not gate.evaluate(_calls(("triangle_area", {"base": 4, "height": 2})), numbers).passed
    ranged = _turn("Area for a base between 4 and 9, height 2", AREA)
    assert gate.evaluate(_calls(("triangle_area", {"base": 4, "height": 2})), ranged).passed


# -- redundant_tool_calls: swapped, hedged ------------------------------------------------

GCD = _tool("math_gcd", {"num1": {"type": "integer"}, "num2": {"type": "integer"}}, "GCD.")
BOIL = _tool(
    "boiling_point", {"substance": {"type": "string"}, "sea_level": {"type": "integer"}}, "Boil."
)


def test_swapped_values_fail_and_two_targets_pass() -> None:
    gate = QualityGate(["redundant_tool_calls"])
    turn = _turn("Greatest common divisor of 40 and 50?", GCD)
    swapped = _calls(("math_gcd", {"num1": 40, "num2": 50}), ("math_gcd", {"num1": 50, "num2": 40}))
    verdict = gate.evaluate(swapped, turn)
    assert verdict.failed_checks == ("redundant_tool_calls",)
    assert "with the values of num1, num2 swapped" in verdict.reasons[0]
    assert QualityGate([{"redundant_tool_calls": {"swapped": False}}]).evaluate(swapped, turn)
    two = _turn("GCD of 40 and 50, and of 12 and 18?", GCD)
    pair = _calls(("math_gcd", {"num1": 40, "num2": 50}), ("math_gcd", {"num1": 12, "num2": 18}))
    assert gate.evaluate(pair, two).passed


def test_a_second_guess_fails_and_stated_targets_pass() -> None:
    gate = QualityGate(["redundant_tool_calls"])
    turn = _turn("Boiling point of water at a sea level of 5000m?", BOIL)
    guess = _calls(
        ("boiling_point", {"substance": "water", "sea_level": 5000}),
        ("boiling_point", {"substance": "water", "sea_level": 0}),
    )
    verdict = gate.evaluate(guess, turn)
    assert verdict.failed_checks == ("redundant_tool_calls",)
    assert "only sea_level changed, to 0 from 5000" in verdict.reasons[0]
    assert QualityGate([{"redundant_tool_calls": {"hedged": False}}]).evaluate(guess, turn)
    both = _turn("Boiling point of water at 5000m and at 0m?", BOIL)
    assert gate.evaluate(guess, both).passed
    stocks = _turn("Prices of Google and Microsoft", BOIL)
    codes = _calls(
        ("boiling_point", {"substance": "GOOGL", "sea_level": 1}),
        ("boiling_point", {"substance": "MSFT", "sea_level": 1}),
    )
    assert gate.evaluate(codes, stocks).passed


def test_alternative_tools_with_the_same_arguments_fail_unless_both_are_asked() -> None:
    data = {"type": "array", "items": {"type": "number"}}
    tools = [
        _tool(n, {"data": data}, "Fit.")
        for n in ("linear_regression", "random_forest_regression", "statistics_median")
    ]
    gate = QualityGate(["redundant_tool_calls"])
    both = _calls(
        ("linear_regression", {"data": [1, 2]}), ("random_forest_regression", {"data": [1, 2]})
    )
    verdict = gate.evaluate(both, _turn("Predict house prices from 1, 2", *tools))
    assert verdict.failed_checks == ("redundant_tool_calls",)
    assert "a hedge between alternative tools" in verdict.reasons[0]
    asked = _turn("Fit a linear and a random forest regression on 1, 2", *tools)
    assert gate.evaluate(both, asked).passed
    off = QualityGate([{"redundant_tool_calls": {"alternatives": False}}])
    assert off.evaluate(both, _turn("Predict house prices from 1, 2", *tools)).passed


def test_two_unsaid_words_are_a_guess_and_two_derived_dates_are_not() -> None:
    gate = QualityGate(["redundant_tool_calls"])
    phase = _tool("energy", {"mass": {"type": "number"}, "phase": {"type": "string"}}, "E.")
    turn = _turn("Energy to turn 100g of water from liquid to steam?", phase)
    guesses = _calls(
        ("energy", {"mass": 100, "phase": "vaporization"}),
        ("energy", {"mass": 100, "phase": "melting"}),
    )
    assert gate.evaluate(guesses, turn).failed_checks == ("redundant_tool_calls",)
    days = _turn("Air quality today and yesterday? Today is May 5, 2023", phase)
    dates = _calls(
        ("energy", {"mass": 1, "phase": "2023-05-05"}),
        ("energy", {"mass": 1, "phase": "2023-05-04"}),
    )
    assert gate.evaluate(dates, days).passed
    flags = _calls(
        ("energy", {"mass": 100, "phase": True}), ("energy", {"mass": 100, "phase": False})
    )
    assert gate.evaluate(flags, turn).passed


def test_a_tool_whose_name_starts_with_functions_is_read() -> None:
    tools = [_tool("functions_intersect", {"f": {"type": "string"}}), WEATHER]
    for text in (
        "functions_intersect(f='x')",
        "functions.functions_intersect(f='x')",
        '{"name": "functions_intersect", "arguments": {"f": "x"}}',
    ):
        calls = parse_text_tool_calls(text, tools)
        assert calls is not None and calls[0].name == "functions_intersect", text


# -- on the shared data: calls to tools that do not fit, text forms of recorded calls -------

DATA = find_data_dir()


@pytest.mark.skipif(
    DATA is None or not (DATA / "bfcl_v1_results").is_dir(), reason="shared data absent"
)
def test_on_bfcl_no_tool_fits_probes_and_text_forms() -> None:
    from tiered_router.evaluation.sources import load_bfcl

    assert DATA is not None
    model = "gpt-4o-mini-2024-07-18-FC"
    rows = sorted(load_bfcl(DATA, models=[model]).rows, key=lambda r: r.id)[::4]
    n = len(rows)
    probes = caught = 0
    for i, row in enumerate(rows):
        other = rows[(i + n // 2) % n]
        names = {t.name for t in row.turn.tools or ()}
        calls = other.outcomes[model].tool_calls
        if names & {t.name for t in other.turn.tools or ()} or not calls:
            continue
        turn = Turn(row.turn.messages, tools=[t.to_openai() for t in other.turn.tools or ()])
        probes += 1
        caught += not DEFAULT.evaluate(Completion(tool_calls=calls), turn).passed
    assert probes > 200 and caught / probes >= 0.8, (caught, probes)

    same = total = 0
    for row in rows:
        outcome = row.outcomes[model]
        if not outcome.tool_calls:
            continue
        native = DEFAULT.evaluate(Completion(tool_calls=outcome.tool_calls), row.turn).passed
        args = [(c.name, c.parsed_arguments()) for c in outcome.tool_calls]
        text = json.dumps([{"name": n, "arguments": a} for n, a in args])
        total += 1
        same += DEFAULT.evaluate(Completion(text=text), row.turn).passed == native
    assert total > 200 and same == total


def test_the_policy_can_turn_reading_text_calls_off() -> None:
    from tiered_router.policy import load_policy

    yaml = """
version: 1
backends:
  fast: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k, model: m}
tiers: {fast: fast, frontier: fast}
gate: {text_tool_calls: false}
"""
    policy = load_policy(yaml)
    assert policy.gate.text_tool_calls is False and GateConfig().text_tool_calls is True
    turn = _turn("Weather in Paris?", WEATHER)
    draft = Completion(text="[get_weather(city='Paris')]")
    assert QualityGate.from_config(GateConfig()).evaluate(draft, turn).passed
    off = QualityGate.from_config(policy.gate).evaluate(draft, turn)
    assert off.failed_checks == ("tool_call_in_text",)
