"""Conformance of the sglang, vllm and mercury-2 profiles.

- SGLang: every request validates with SGLang's own ``ChatCompletionRequest`` (loaded from the
  installed package without GPU dependencies, see ``sglang_kit``).
- vLLM and Mercury 2: a few direct checks; the full matrix against vLLM 0.34.0's rules
  (read from its wheel) and Mercury 2's documented facts is in
  ``test_conformance_profiles.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agent_shapes import SHAPES, USER, WEATHER, request
from sglang_kit import validate

from tiered_router.backends import CompletionRequest, OpenAICompatBackend
from tiered_router.backends.registry import build_backend
from tiered_router.exceptions import CapabilityError
from tiered_router.policy import BackendConfig
from tiered_router.testing import Reply, ScriptedServer

KEY = "sk-test-0123456789"
IMAGE = {
    "role": "user",
    "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
    ],
}
_open: list[OpenAICompatBackend] = []


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def make(preset: str, base_url: str, **fields: Any) -> OpenAICompatBackend:
    fields.setdefault("model", "served-model")
    backend = build_backend(
        "b",
        BackendConfig(preset=preset, base_url=base_url, **fields),
        env={"INCEPTION_API_KEY": KEY},
    )
    assert isinstance(backend, OpenAICompatBackend)
    _open.append(backend)
    return backend


def sent(
    server: ScriptedServer, backend: OpenAICompatBackend, req: CompletionRequest, *, stream: bool
) -> dict[str, Any]:
    server.script([Reply.text("ok", chunks=1)])
    if stream:
        list(backend.stream(req))
    else:
        backend.complete(req)
    body: dict[str, Any] = server.requests[-1].body
    return body


# -- SGLang, against its own request model ------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_sglang_request_validates_with_sglang(
    server: ScriptedServer, shape: Any, stream: bool
) -> None:
    body = sent(server, make("sglang", server.base_url), request(shape), stream=stream)
    parsed = validate(body)
    assert parsed.stream is stream
    # prompted tools and JSON: none of OpenAI's tool or format fields reach the server
    assert parsed.tools is None and parsed.response_format is None
    assert {m.role for m in parsed.messages} <= {"system", "user", "assistant", "tool"}
    if shape[0] == "stop":
        assert parsed.stop == ["\n\n", "END"]  # SGLang takes stop natively


def test_sglang_with_native_tools_validates_too(server: ScriptedServer) -> None:
    backend = make(
        "sglang", server.base_url, options={"dialect": {"profile": "sglang", "tools": "native"}}
    )
    for shape in SHAPES:
        if shape[2]:
            parsed = validate(sent(server, backend, request(shape), stream=False))
            assert parsed.tools and parsed.tools[0].function.name == "get_weather"


def test_sglang_refuses_images_before_any_call(server: ScriptedServer) -> None:
    with pytest.raises(CapabilityError, match="text only"):
        make("sglang", server.base_url).complete(CompletionRequest(messages=[IMAGE]))
    assert server.requests == []


# -- vLLM ---------------------------------------------------------


def test_vllm_sends_system_for_developer_and_keeps_stop(server: ScriptedServer) -> None:
    body = sent(server, make("vllm", server.base_url), request(SHAPES[1]), stream=False)
    assert body["messages"][0] == {"role": "system", "content": "Be terse."}
    body = sent(server, make("vllm", server.base_url), request(SHAPES[4]), stream=False)
    assert body["stop"] == ["\n\n", "END"]


# -- Mercury 2, against the documented facts ----------------------------------------------------


def test_mercury_requests_follow_the_documented_facts(server: ScriptedServer) -> None:
    backend = make("mercury-2", server.base_url, model="mercury-2")
    # developer rejected with 400: mapped to system
    body = sent(server, backend, request(SHAPES[1]), stream=False)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    # tools and structured outputs are native
    body = sent(server, backend, request(SHAPES[7]), stream=False)
    assert body["tools"][0]["function"]["name"] == "get_weather"
    body = sent(server, backend, request(SHAPES[3]), stream=True)
    assert body["response_format"]["type"] == "json_schema"
    # temperature 0.5..1.0, at most 4 stop sequences, no `diffusing` on agent turns
    req = CompletionRequest(
        messages=[USER],
        params={"temperature": 0, "stop": list("abcde"), "diffusing": True},
        timeout_s=5,
    )
    body = sent(server, backend, req, stream=True)
    assert body["temperature"] == 0.5 and body["stop"] == list("abcd")
    assert "diffusing" not in body
    # text only
    with pytest.raises(CapabilityError, match="'image_url' part"):
        backend.complete(CompletionRequest(messages=[IMAGE], tools=[WEATHER]))


def test_what_the_mercury_dialect_changes_is_recorded(server: ScriptedServer) -> None:
    """Each Mercury 2 rule has one home, its dialect profile; every change it makes is
    recorded once (the rules that were ``mercury`` quirks are the profile's now)."""
    backend = make("mercury-2", server.base_url, model="mercury-2")
    server.script([Reply.text("ok")])
    done = backend.complete(
        CompletionRequest(
            messages=[{"role": "developer", "content": "Be terse."}, USER],
            tools=[WEATHER],
            params={
                "temperature": 0,
                "stop": list("abcde"),
                "diffusing": True,
                "max_completion_tokens": 90_000,
                "tool_choice": "none",
            },
            timeout_s=5,
        )
    )
    assert done.conversions == (
        'tool_choice "none" -> 0 tool(s)',
        "messages[0]: developer -> system",
        "stop: sent the first 4 of 5, the rest applied to the reply",
        "max_completion_tokens -> max_tokens",
        "temperature: 0 -> 0.5 (the server accepts 0.5..1.0)",
        "max_tokens: 90000 -> 50000 (the server accepts 1..50000)",
        "dropped (not accepted): diffusing",
    )
    assert "tools" not in server.requests[-1].body


def test_vllm_0_34_takes_empty_tools_and_refuses_choices_without_a_tool() -> None:
    """vLLM 0.34.0 drops ``tools: []`` (auto / required become none) for every model;
    ``check_tool_usage`` still refuses a choice with nothing to choose from."""
    from server_rules import VLLM, refusals

    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    named = {"type": "function", "function": {"name": "get_weather"}}
    user = [{"role": "user", "content": "hi"}]
    for choice in (None, "auto", "required", "none"):
        body: dict[str, Any] = {"messages": user, "tools": []}
        if choice is not None:
            body["tool_choice"] = choice
        assert refusals(VLLM, body) == [], choice  # 0.33.0 refused every one of these
    assert refusals(VLLM, {"messages": user, "tool_choice": "required"})
    assert refusals(VLLM, {"messages": user, "tools": [], "tool_choice": named})
    assert refusals(VLLM, {"messages": user, "tools": [weather], "tool_choice": named}) == []
