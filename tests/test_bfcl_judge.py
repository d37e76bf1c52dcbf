"""tiered_router.evaluation._bfcl_judge: the BFCL checker re-implementation that labels calls
BFCL's decoder never read (the BFCL loader and the gate benchmarks use it).

The small cases pin the Java and JavaScript rules (values sent as literals in strings and
read by their declared types); the last tests check the judge against every label BFCL
itself gave in the shared data, and the loader's labels of fenced answers, when that data
is here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiered_router.evaluation import _bfcl_judge as judge_mod
from tiered_router.evaluation import find_data_dir
from tiered_router.turn import ToolCall


def _question(category: str, name: str, props: dict[str, Any], answer: dict[str, list[Any]]) -> Any:
    return {
        "category": category,
        "function": {
            "name": name,
            "parameters": {"type": "dict", "properties": props, "required": list(answer)},
        },
        "possible_answer": {name: answer},
    }


def _call(name: str, **args: Any) -> ToolCall:
    return ToolCall(id="c0", name=name, arguments=json.dumps(args))


LONG_Q = _question(
    "java",
    "Cache.put",
    {"key": {"type": "String"}, "ttl": {"type": "long"}, "store": {"type": "any"}},
    {"key": ["session"], "ttl": [3600], "store": ["redisStore"]},
)


@pytest.mark.parametrize(
    ("ttl", "right"),
    [("3600L", True), ("3600l", True), ("3600", False), ("3601L", False), ("3600.0", False)],
)
def test_a_java_long_is_right_only_as_a_long_literal(ttl: str, right: bool) -> None:
    call = _call("Cache_put", key="session", ttl=ttl, store="redisStore")
    assert judge_mod.judge([call], LONG_Q) is right


def test_java_strings_compare_without_case_and_punctuation_and_variables_as_written() -> None:
    ok = _call("Cache_put", key="Session.", ttl="3600L", store="redisStore")
    other_variable = _call("Cache_put", key="session", ttl="3600L", store="memcached")
    assert judge_mod.judge([ok], LONG_Q) is True
    assert judge_mod.judge([other_variable], LONG_Q) is False


def test_java_in_function_calling_mode_a_value_that_is_not_a_string_is_a_type_error() -> None:
    flag = _question("java", "Game.finish", {"success": {"type": "boolean"}}, {"success": [True]})
    assert judge_mod.judge([_call("Game_finish", success="true")], flag) is True
    assert judge_mod.judge([_call("Game_finish", success=True)], flag) is False
    # prompt mode: the decoder hands on the text written, so a parsed literal is text again
    assert judge_mod.judge([_call("Game_finish", success=True)], flag, prompt_mode=True) is True


def test_java_collections_are_read_from_their_constructors() -> None:
    q = _question(
        "java",
        "Index.build",
        {
            "names": {"type": "ArrayList", "items": {"type": "String"}},
            "sizes": {"type": "Array", "items": {"type": "integer"}},
            "options": {"type": "HashMap"},
        },
        {"names": [["a", "b"]], "sizes": [[1, 2]], "options": [{"mode": ["fast"]}]},
    )
    right = _call(
        "Index_build",
        names='new ArrayList<>(Arrays.asList("a", "b"))',
        sizes="new int[]{1, 2}",
        options='new HashMap<String, String>() {{ put("mode", "fast"); }}',
    )
    wrong_list = _call(
        "Index_build",
        names='new ArrayList<>(Arrays.asList("a", "c"))',
        sizes="new int[]{1, 2}",
        options='new HashMap<String, String>() {{ put("mode", "fast"); }}',
    )
    as_json = _call("Index_build", names='["a", "b"]', sizes="[1, 2]", options='{"mode": "fast"}')
    assert judge_mod.judge([right], q) is True
    assert judge_mod.judge([wrong_list], q) is False
    assert judge_mod.judge([as_json], q) is False


def test_javascript_values_numbers_arrays_and_objects() -> None:
    q = _question(
        "javascript",
        "queue_1",  # BFCL takes the spec's name; the answer's key may differ
        {
            "concurrency": {"type": "float"},
            "coords": {"type": "array", "items": {"type": "float"}},
            "chart": {"type": "dict"},
        },
        {"concurrency": [5.0], "coords": [[0.6, 0.3]], "chart": [{"nm": ["BarChart"]}]},
    )
    q["possible_answer"] = {"queue": q["possible_answer"]["queue_1"]}
    right = _call("queue_1", concurrency="5", coords="[0.6, 0.3]", chart="{nm: 'BarChart'}")
    assert judge_mod.judge([right], q) is True
    assert judge_mod.judge([_call("queue_1", concurrency="five", coords="[0.6, 0.3]",
                                  chart="{nm: 'BarChart'}")], q) is False  # fmt: skip
    assert judge_mod.judge([_call("queue_1", concurrency="5", coords="[0.3, 0.6]",
                                  chart="{nm: 'BarChart'}")], q) is False  # fmt: skip
    assert judge_mod.judge([right, right], q) is False  # one call is asked for


def test_a_fenced_java_answer_is_labelled_as_bfcl_would_without_the_fence() -> None:
    label = judge_mod._typed_text_label
    assert (
        label("```java\n[Cache.put(key='session', ttl=3600L, store=redisStore)]\n```", LONG_Q)
        is None
    )
    # "3600L" is Java, not Python: unreadable, so unjudged; the same call with a Python-
    # readable literal is judged, and a JSON body is wrong (BFCL's Java decoder cannot read it)
    fenced = "```json\n[Cache.put(key='session', ttl='3600L', store=redisStore)]\n```"
    assert label(fenced, LONG_Q) is True
    assert label('```json\n[{"name": "Cache.put", "key": "session"}]\n```', LONG_Q) is False
    assert label("Call Cache.put with the session key.", LONG_Q) is None


DATA = find_data_dir()
NEEDS_BFCL = pytest.mark.skipif(
    DATA is None or not (Path(DATA) / "bfcl_v1_results").is_dir(),
    reason="../shared/data/bfcl_v1_results is not here",
)


@NEEDS_BFCL
def test_the_judge_agrees_with_every_label_bfcl_gave() -> None:
    from tiered_router.evaluation.sources import load_bfcl

    assert DATA is not None
    questions = judge_mod.load_questions(Path(DATA))
    dataset = load_bfcl(DATA)
    agree, judged = judge_mod.agreement(dataset, questions)
    typed = sum(
        1
        for row in dataset.rows
        if questions[row.id]["category"] in ("java", "javascript")
        for outcome in row.outcomes.values()
        if outcome.tool_calls
    )
    assert typed > 500  # the Java and JavaScript answers are judged too
    assert judged > 6000 and agree == judged


@NEEDS_BFCL
def test_the_loader_keeps_bfcls_label_on_fenced_calls_and_keeps_their_text() -> None:
    from tiered_router.evaluation.sources import load_bfcl

    assert DATA is not None
    model = "gpt-4o-2024-08-06"  # prompt mode: most of its calls sit in a Markdown fence
    dataset = load_bfcl(DATA, models=[model])
    fenced = [r.outcomes[model] for r in dataset.rows if r.outcomes[model].text.startswith("```")]
    # an example in a fence is not lifted, so the router does not return it as calls: BFCL's
    # label (wrong) describes what the caller gets
    assert len(fenced) > 900 and not any(o.correct for o in fenced)
    # every answer still written as text that is right now was relabelled; its text is
    # kept, so the gate reads what the model wrote
    right = [r.outcomes[model] for r in dataset.rows if r.outcomes[model].text]
    right = [o for o in right if o.correct]
    assert all(not o.tool_calls for o in right)
    note = next(n for n in dataset.notes if "BFCL's decoder rejected unread" in n)
    assert f"{len(right)} right" in note
