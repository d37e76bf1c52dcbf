"""Answer keys and tallies: when two drafts give "the same answer" (tiered_router.panels)."""

from __future__ import annotations

import pytest

from tiered_router.panels import AnswerKey, answer_key, final_answer, tally
from tiered_router.turn import Completion, ToolCall, Turn

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer"},
                "length": {"type": "string"},
            },
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "math.get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}
REQUEST = "Weather in Paris for 3 days (or 4, or 5), in fahrenheit, length in inches or cm?"
TOOLS_TURN = Turn([{"role": "user", "content": REQUEST}], tools=[WEATHER, TIME])
PLAIN_TURN = Turn([{"role": "user", "content": "What is 6 * 7?"}])


def native(*calls: tuple[str, str]) -> Completion:
    return Completion(
        tool_calls=tuple(
            ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)
        ),
        finish_reason="tool_calls",
    )


def key(completion: Completion, turn: Turn = TOOLS_TURN) -> AnswerKey:
    return answer_key(completion, turn)


# -- tool calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        native(("get_weather", '{"city": "Paris", "days": 3}')),
        native(("get_weather", '{"days": 3.0, "city": " paris "}')),  # order, number, case
        native(("get_weather", '{"city": "Paris", "days": "3"}')),  # number as text
        native(("get_weather", '{"city": "Paris", "days": 3, "unit": "Celsius"}')),  # default
        native(("get_weather", '{"city": "Paris", "days": 3, "length": null}')),  # null = absent
        Completion(text='[get_weather(city="Paris", days=3)]'),  # Python syntax
        Completion(
            text='<tool_call>{"name": "get_weather", '
            '"arguments": {"city": "Paris", "days": 3}}</tool_call>'
        ),
    ],
)
def test_the_same_call_in_any_format_gives_the_same_key(other: Completion) -> None:
    reference = key(native(("get_weather", '{"city": "Paris", "days": 3}')))
    assert reference.kind == "tool_calls"
    assert key(other) == reference


def test_a_call_shown_in_a_fence_is_not_a_call() -> None:
    # the lifting rules (docs/gate.md): a fenced call is an example, never lifted, so it is
    # not the answer a real call gives and cannot vote with one
    fenced = Completion(
        text='```json\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n```'
    )
    assert key(fenced).kind != "tool_calls"
    assert key(fenced) != key(native(("get_weather", '{"city": "Paris", "days": 3}')))


@pytest.mark.parametrize(
    "other",
    [
        native(("get_weather", '{"city": "Lyon", "days": 3}')),  # wrong value
        native(("get_weather", '{"city": "Paris", "days": 4}')),
        native(("get_weather", '{"city": "Paris"}')),  # an argument left out (no default)
        native(("get_weather", '{"city": "Paris", "days": 3, "unit": "fahrenheit"}')),
        native(("math_get_time", '{"tz": "CET"}')),  # another tool
        native(
            ("get_weather", '{"city": "Paris", "days": 3}'), ("get_weather", '{"city": "Rome"}')
        ),
        Completion(text='[get_weather(city="Paris", days=5)]'),
        # a call shown in a Markdown fence is an example, not a call (the calls wing's rule)
        Completion(
            text='```json\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n```'
        ),
    ],
)
def test_a_different_call_gives_a_different_key(other: Completion) -> None:
    reference = key(native(("get_weather", '{"city": "Paris", "days": 3}')))
    assert key(other) != reference


def test_parallel_calls_in_any_order_and_dotted_names_are_the_same() -> None:
    a = native(("get_weather", '{"city": "Paris"}'), ("math_get_time", '{"tz": "CET"}'))
    b = Completion(text='[math.get_time(tz="cet"), get_weather(city="Paris")]')
    assert key(a) == key(b)
    assert key(a).value.count("get_weather") == 1


def test_units_and_operators_are_normalised() -> None:
    a = native(("get_weather", '{"city": "Paris", "length": "in"}'))
    b = native(("get_weather", '{"city": "Paris", "length": "Inches"}'))
    c = native(("get_weather", '{"city": "Paris", "length": "cm"}'))
    assert key(a) == key(b) != key(c)
    x = native(("get_weather", '{"city": "x ** 3 + 1"}'))
    y = native(("get_weather", '{"city": "x^3+1"}'))
    assert key(x) == key(y)


def test_optional_extras_the_request_does_not_write_are_left_out() -> None:
    reference = key(native(("get_weather", '{"city": "Paris", "days": 3}')))
    extra = native(("get_weather", '{"city": "Paris", "days": 3, "length": "1 furlong"}'))
    assert key(extra) == reference  # an optional value nowhere in the request: an extra
    said = native(("get_weather", '{"city": "Paris", "days": 3, "length": "cm"}'))
    assert key(said) != reference  # the request wrote "cm": it determines the argument
    qualified = native(("get_weather", '{"city": "Paris, France", "days": 3}'))
    assert key(qualified) == reference  # "France" is not in the request: a qualifier
    required = Turn([{"role": "user", "content": "weather"}], tools=[WEATHER])
    assert key(native(("get_weather", '{"city": "Paris"}')), required) != key(
        native(("get_weather", '{"city": "Lyon"}')), required
    )  # required arguments always count, written in the request or not


def test_arguments_that_do_not_parse_are_not_comparable() -> None:
    broken = key(native(("get_weather", '{"city": ')))
    assert broken.kind == "not_comparable" and broken.value == ""
    assert "not JSON" in broken.detail
    assert key(native(("get_weather", "[1]"))).kind == "not_comparable"


# -- JSON outputs --------------------------------------------------------------------------------

SCHEMA_TURN = Turn(
    [{"role": "user", "content": "extract"}],
    response_format={
        "type": "json_schema",
        "json_schema": {
            "name": "person",
            "schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}, "default": []},
                },
                "required": ["name", "age"],
            },
        },
    },
)


def test_json_outputs_compare_as_canonical_json_under_the_schema() -> None:
    a = key(Completion(text='{"name": "Ada", "age": 36}'), SCHEMA_TURN)
    b = key(Completion(text='```json\n{"age": 36.0, "name": "ada", "tags": []}\n```'), SCHEMA_TURN)
    c = key(Completion(text='{"name": "Ada", "age": 37}'), SCHEMA_TURN)
    assert a.kind == "json"
    assert a == b != c
    assert key(Completion(text="{oops"), SCHEMA_TURN).kind == "not_comparable"
    obj_turn = Turn([{"role": "user", "content": "x"}], response_format={"type": "json_object"})
    assert key(Completion(text='{"b": 1, "a": [1, 2]}'), obj_turn) == key(
        Completion(text='{"a": [1, 2.0], "b": 1}'), obj_turn
    )
    assert key(Completion(text='{"a": [2, 1]}'), obj_turn) != key(
        Completion(text='{"a": [1, 2]}'), obj_turn
    )


# -- final answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6 * 7 = 42, so the answer is 42.", "number:42"),
        ("We get \\boxed{42}", "number:42"),
        ("... #### 1,000", "number:1000"),
        ("The answer is $1,000.00.", "number:1000 $"),
        ("42", "number:42"),
        ("Final answer: 42 apples", "number:42 apples"),
        ("The answer is 42 million.", "number:42 million"),
        ("The answer is 42k.", "number:42 thousand"),
        ("42%", "number:42 %"),
        ("The answer is 42 percent.", "number:42 %"),
        ("The answer is 42 EUR.", "number:42 eur"),
        ("\\boxed{\\frac{1}{2}}", "number:0.5"),
        ("So the answer is (B).", "option:B"),
        ("(c)", "option:C"),
        ("The correct option is D: Paris", "option:D"),
        ("The answer is 05/01/2021.", "date:2021-05-01"),
        ("The answer is May 1, 2021", "date:2021-05-01"),
        ("2021-05-01", "date:2021-05-01"),
        ("The answer is Paris.", "text:paris"),
    ],
)
def test_final_answers_are_read_in_one_form(text: str, expected: str) -> None:
    assert final_answer(text) == expected
    got = key(Completion(text=text), PLAIN_TURN)
    assert (got.kind, got.value) == ("final", expected)


def test_prose_with_no_checkable_answer_is_not_comparable() -> None:
    got = key(Completion(text="Paris is lovely in spring; you should visit."), PLAIN_TURN)
    assert got.kind == "not_comparable"
    assert key(Completion(text=""), PLAIN_TURN).detail == "empty answer"
    thought = key(Completion(text="<think>the answer is 41</think>The answer is 42."), PLAIN_TURN)
    assert thought.value == "number:42"


def test_a_wrong_final_answer_differs() -> None:
    assert key(Completion(text="The answer is 41"), PLAIN_TURN) != key(
        Completion(text="\\boxed{42}"), PLAIN_TURN
    )


# -- tallies -------------------------------------------------------------------------------------

A = AnswerKey(kind="tool_calls", value="a")
B = AnswerKey(kind="tool_calls", value="b")
C = AnswerKey(kind="final", value="number:1")
N = AnswerKey(kind="not_comparable", value="", detail="prose")


def test_two_equal_drafts_of_three_decide_early() -> None:
    got = tally([A, A, None], k=3, min_agreement=0.67)
    assert (got.decided, got.agreed, got.members, got.majority) == (True, True, (0, 1), A)
    assert got.share == pytest.approx(2 / 3)
    assert tally([A, None, A], k=3, min_agreement=0.67).members == (0, 2)


def test_two_different_drafts_of_three_wait_for_the_third() -> None:
    got = tally([A, B, None], k=3, min_agreement=0.67)
    assert not got.decided and not got.agreed
    assert "pending" in got.reason
    done = tally([A, B, B], k=3, min_agreement=0.67)
    assert done.decided and done.agreed and done.members == (1, 2) and done.majority == B
    split = tally([A, B, C], k=3, min_agreement=0.67)
    assert split.decided and not split.agreed and split.comparable
    assert "disagree" in split.reason


def test_keys_not_yet_started_count_as_pending() -> None:
    assert not tally([A], k=3, min_agreement=0.67).decided
    assert tally([], k=2, min_agreement=1.0).majority is None


def test_a_tie_never_agrees() -> None:
    got = tally([A, B], k=2, min_agreement=0.5)
    assert got.decided and not got.agreed and "tied" in got.reason
    assert tally([A, B, A, B], k=4, min_agreement=0.5).agreed is False


def test_unanimity_and_early_refusal() -> None:
    assert tally([A, A], k=2, min_agreement=1.0).agreed
    early = tally([A, B, None, None], k=4, min_agreement=1.0)
    assert early.decided and not early.agreed and early.comparable


def test_not_comparable_drafts_fall_back_to_the_gate_never_a_silent_agreement() -> None:
    got = tally([N, N], k=2, min_agreement=0.5)
    assert got.decided and not got.agreed and not got.comparable
    assert got.majority == N and got.members == (0, 1)
    assert "not comparable" in got.reason
    mixed = tally([A, N, N], k=3, min_agreement=0.67)
    assert not mixed.comparable and not mixed.agreed
    one_each = tally([A, N], k=2, min_agreement=1.0)  # one call against prose: disagreement
    assert one_each.comparable and not one_each.agreed
    assert tally([A, N], k=2, min_agreement=0.5).agreed  # one of two is enough at 0.5
    conflict = tally([A, B, N, N], k=4, min_agreement=0.5)  # conflicting answers escalate
    assert conflict.comparable and not conflict.agreed
    assert tally([N, N, None], k=3, min_agreement=0.67).decided  # the third cannot change it
    assert not tally([N, None, None], k=3, min_agreement=0.67).decided


def test_failed_drafts_count_against_agreement() -> None:
    got = tally([A, None, A], k=3, min_agreement=0.67, failed={1})
    assert got.decided and got.agreed
    lost = tally([A, None, None], k=3, min_agreement=0.67, failed={1, 2})
    assert lost.decided and not lost.agreed


def test_a_single_draft_agrees_with_itself() -> None:
    assert tally([A], k=1, min_agreement=0.67).agreed
    assert not tally([N], k=1, min_agreement=0.67).comparable


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0, "min_agreement": 0.5}, "k must be"),
        ({"k": 1, "min_agreement": 0.0}, "min_agreement"),
        ({"k": 1, "min_agreement": 1.5}, "min_agreement"),
    ],
)
def test_bad_tally_arguments_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tally([], **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keys for a panel"):
        tally([A, A], k=1, min_agreement=0.5)


# -- the policy's drafts: section -----------------------------------------------------------------

POLICY = """\
version: 1
backends:
  fast: {model: small, kind: diffusion}
  big: {model: large}
tiers: {fast: fast, frontier: big}
"""


def test_drafts_section_loads_with_defaults_and_values() -> None:
    from tiered_router import load_policy

    assert load_policy(POLICY).drafts is None
    policy = load_policy(POLICY + "drafts: {k: 3, backends: [fast], min_agreement: 0.6}\n")
    assert policy.drafts is not None
    assert (policy.drafts.k, policy.drafts.backends, policy.drafts.min_agreement) == (
        3,
        ["fast"],
        0.6,
    )
    default = load_policy(POLICY + "drafts: {}\n").drafts
    assert default is not None and (default.k, default.min_agreement) == (1, 0.67)


@pytest.mark.parametrize(
    ("section", "field", "message"),
    [
        ("drafts: {k: 0}", "drafts.k", "greater than or equal to 1"),
        ("drafts: {min_agreement: 0}", "drafts.min_agreement", "greater than 0"),
        ("drafts: {min_agreement: 1.5}", "drafts.min_agreement", "less than or equal to 1"),
        ("drafts: {backends: [fsat]}", "drafts.backends[0]", "did you mean 'fast'"),
    ],
)
def test_bad_drafts_section_names_the_field(section: str, field: str, message: str) -> None:
    from tiered_router import load_policy
    from tiered_router.exceptions import PolicyError

    with pytest.raises(PolicyError) as info:
        load_policy(POLICY + section + "\n")
    problems = info.value.problems
    assert any(f == field and message in m for _, f, m in problems), problems


# -- over the real BFCL answers ------------------------------------------------------------------


def _bfcl_dir() -> str | None:
    from pathlib import Path

    from tiered_router.evaluation import find_data_dir

    found = find_data_dir()
    return str(found) if found and (Path(found) / "bfcl_v1_results").is_dir() else None


@pytest.mark.skipif(_bfcl_dir() is None, reason="../shared/data/bfcl_v1_results not found")
def test_on_real_bfcl_calls_agreement_is_mostly_right_and_beats_exact_json() -> None:
    import json

    from tiered_router.evaluation.sources import load_bfcl

    a, b = "gpt-3.5-turbo-0125-FC", "gpt-4o-mini-2024-07-18"  # native calls, calls as text
    data = load_bfcl(_bfcl_dir() or "", models=[a, b])

    def exact(calls: tuple[ToolCall, ...] | None) -> str | None:
        if not calls:
            return None
        return json.dumps(sorted(json.dumps([c.name, json.loads(c.arguments)]) for c in calls))

    agree = agree_wrong = exact_agree = both_right = both_right_agree = 0
    for row in data.rows:
        oa, ob = row.outcomes[a], row.outcomes[b]
        ka = answer_key(oa.completion(model=a, backend=a), row.turn)
        kb = answer_key(ob.completion(model=b, backend=b), row.turn)
        same = ka == kb and ka.comparable
        agree += same
        agree_wrong += same and not oa.correct
        ea = exact(oa.tool_calls)
        exact_agree += ea is not None and ea == exact(ob.tool_calls)
        if oa.correct and ob.correct:
            both_right += 1
            both_right_agree += same
    assert agree > exact_agree * 1.05  # the normalisation finds more of the same answers
    assert agree_wrong / agree < 0.06  # and what two models agree on is mostly right
    assert both_right_agree / both_right > 0.9  # two right answers are mostly "the same"


def test_the_policy_blocks_of_docs_panels_load() -> None:
    import re
    from pathlib import Path

    import yaml

    from tiered_router import load_policy

    page = (Path(__file__).parents[1] / "docs" / "panels.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    assert len(blocks) == 3
    for block in blocks:
        data = yaml.safe_load(block)
        if "version" not in data:  # a section: merge it into a two-tier policy
            data = {**yaml.safe_load(POLICY), **data}
            data["drafts"]["backends"] = ["fast"]
        policy = load_policy(data)
        assert policy.drafts is not None and policy.drafts.k in (3, 5)
