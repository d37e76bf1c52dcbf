"""The stand-in upstream's answers (``serve --stand-in``, ``demo --serve``, ``run --stand-in``)."""

from __future__ import annotations

import json
from typing import Any

from tiered_router.testing._stand_in import plausible_reply, sample_of

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "unit": {"enum": ["c", "f"]},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
            "required": ["city", "days", "unit", "when", "tags"],
        },
    },
}


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], **kw}


def test_a_request_with_tools_gets_a_call_of_the_first_tool_that_fits_its_schema() -> None:
    reply = plausible_reply(_body(tools=[WEATHER]))
    ((_, name, arguments),) = reply.calls
    assert name == "get_weather"
    assert json.loads(arguments) == {
        "city": "example",
        "days": 1,
        "unit": "c",
        "when": "example",
        "tags": ["example"],
    }


def test_after_a_tool_result_or_with_tool_choice_none_it_answers_in_text() -> None:
    done = _body(tools=[WEATHER])
    done["messages"] = [*done["messages"], {"role": "tool", "tool_call_id": "1", "content": "{}"}]
    assert plausible_reply(done).calls == ()
    assert plausible_reply(_body(tools=[WEATHER], tool_choice="none")).calls == ()
    text = plausible_reply(_body()).content
    assert text is not None and text.startswith("A stand-in answer from m ")


def test_a_json_response_format_gets_json() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "number"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert json.loads(plausible_reply(_body(response_format=fmt)).content or "") == {
        "ok": True,
        "n": 1.0,
    }
    obj = plausible_reply(_body(response_format={"type": "json_object"}))
    assert json.loads(obj.content or "") == {"answer": "a stand-in answer from m"}


def test_sample_of_takes_const_default_and_nulls_and_stops_at_depth() -> None:
    assert sample_of({"const": 3}) == 3
    assert sample_of({"type": "string", "default": "d"}) == "d"
    assert sample_of({"type": "null"}) is None
    assert sample_of({"type": ["null", "integer"]}) == 1
    assert sample_of("not a schema") is None
    deep: dict[str, Any] = {"type": "object", "properties": {}}
    node = deep
    for _ in range(12):
        child: dict[str, Any] = {"type": "object", "properties": {}}
        node["properties"]["x"] = child
        node = child
    assert isinstance(sample_of(deep), dict)
