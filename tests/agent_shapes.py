"""The agent-turn shapes the conformance tests send to each server's own request model.

Each shape is ``(name, messages, tools, response_format, params)``: the shapes of the issue's
table (plain, developer, json_object, stop, tool history, content parts), plus tools with each
``tool_choice``, parallel calls in the history, a long history, and OpenAI's other fields.
"""

from __future__ import annotations

import json
from typing import Any

from tiered_router.backends import CompletionRequest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string"}},
            "required": ["tz"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are a helpful agent."}
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'}
PARALLEL = {
    "role": "assistant",
    "content": "Checking both.",
    "tool_calls": [
        {
            "id": "a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        },
        {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ],
}


def _long_history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, USER]
    for i in range(12):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": f"C{i}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} C"})
        messages.append({"role": "user", "content": f"and then city {i + 1}?"})
    return messages


# (name, messages, tools, response_format, params)
SHAPES: list[tuple[str, list[dict[str, Any]], Any, Any, dict[str, Any]]] = [
    ("plain", [SYSTEM, USER], None, None, {}),
    ("developer", [{"role": "developer", "content": "Be terse."}, USER], None, None, {}),
    ("json_object", [USER], None, {"type": "json_object"}, {}),
    (
        "json_schema",
        [USER],
        None,
        {
            "type": "json_schema",
            "json_schema": {"name": "w", "schema": {"type": "object", "required": ["temp"]}},
        },
        {},
    ),
    ("stop", [USER], None, None, {"temperature": 0, "stop": ["\n\n", "END"], "max_tokens": 64}),
    ("tool_history", [SYSTEM, USER, CALL, RESULT], [WEATHER], None, {}),
    (
        "content_parts",
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
        None,
        None,
        {},
    ),
    ("tools", [USER], [WEATHER, TIME], None, {"tool_choice": "auto"}),
    ("tool_choice_required", [USER], [WEATHER], None, {"tool_choice": "required"}),
    (
        "tool_choice_named",
        [USER],
        [WEATHER, TIME],
        None,
        {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    ),
    ("tool_choice_none", [USER, CALL, RESULT], [WEATHER], None, {"tool_choice": "none"}),
    (
        "parallel_calls",
        [
            USER,
            PARALLEL,
            {"role": "tool", "tool_call_id": "a", "content": "7 C"},
            {"role": "tool", "tool_call_id": "b", "content": "12:00"},
        ],
        [WEATHER, TIME],
        None,
        {"parallel_tool_calls": True},
    ),
    ("long_history", _long_history(), [WEATHER], None, {"max_completion_tokens": 256}),
    (
        "openai_extras",
        [USER],
        None,
        None,
        {
            "top_p": 0.9,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.1,
            "n": 1,
            "logit_bias": {"1": 1},
            "logprobs": True,
            "user": "u1",
            "seed": 3,
            "metadata": {"k": "v"},
            "stream_options": {"include_usage": True},
        },
    ),
    (
        "named_messages",
        [
            {"role": "user", "content": "hi", "name": "ada"},
            {"role": "assistant", "content": "hello"},
        ],
        None,
        None,
        {"temperature": 1.5, "num_denoising_steps": 16},
    ),
]


def request(shape: tuple[str, list[Any], Any, Any, dict[str, Any]]) -> CompletionRequest:
    _, messages, tools, response_format, params = shape
    return CompletionRequest(
        messages=messages,
        tools=tools,
        response_format=response_format,
        params=params,
        timeout_s=10,
    )
