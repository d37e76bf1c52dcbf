"""Conformance with dlmserve 0.1.1, checked against its own code.

1. Schema: every request the ``dlmserve`` profile sends (as it left over HTTP, read back by
   the scripted server) validates with dlmserve's own ``ChatCompletionRequest``, over a matrix
   of agent-turn shapes, completing and streaming; what cannot be expressed is refused before
   any call.
2. HTTP: dlmserve's real FastAPI app (fake engine) serves a multi-step tool loop through the
   router, JSON and SSE.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agent_shapes import SHAPES, SYSTEM, USER, WEATHER, request
from dlmserve_kit import MODEL, load_protocol, serve
from pydantic import ValidationError

from tiered_router import Router, Turn
from tiered_router.backends import CompletionRequest, OpenAICompatBackend
from tiered_router.backends.registry import build_backend
from tiered_router.exceptions import CapabilityError
from tiered_router.policy import BackendConfig
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

_open: list[OpenAICompatBackend] = []


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def dlm_backend(base_url: str, **fields: Any) -> OpenAICompatBackend:
    config = BackendConfig(preset="dlmserve", base_url=base_url, **fields)
    backend = build_backend("local", config)
    assert isinstance(backend, OpenAICompatBackend)
    _open.append(backend)
    return backend


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_sent_request_is_valid_for_dlmserve(
    server: ScriptedServer, shape: Any, stream: bool
) -> None:
    protocol = load_protocol()
    server.script([Reply.text("ok", chunks=1)])
    backend = dlm_backend(server.base_url)
    if stream:
        list(backend.stream(request(shape)))
    else:
        backend.complete(request(shape))
    sent = server.requests[-1].body
    parsed = protocol.ChatCompletionRequest.model_validate(sent)  # raises on any refusal
    assert parsed.model == MODEL and parsed.stream is stream
    assert all(isinstance(m.content, str) for m in parsed.messages)


def test_the_raw_shapes_are_refused_by_dlmserve(server: ScriptedServer) -> None:
    # the negative control: sent without the profile, dlmserve's model refuses these shapes
    protocol = load_protocol()
    refused = []
    for shape in SHAPES:
        server.script([Reply.text("ok", chunks=1)])
        backend = OpenAICompatBackend("raw", model=MODEL, base_url=server.base_url)
        _open.append(backend)
        backend.complete(request(shape))
        try:
            protocol.ChatCompletionRequest.model_validate(server.requests[-1].body)
        except ValidationError:
            refused.append(shape[0])
    assert {"developer", "json_object", "stop", "tool_history", "content_parts", "tools"} <= set(
        refused
    )
    assert "plain" not in refused


@pytest.mark.parametrize(
    ("messages", "params", "what"),
    [
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                    ],
                }
            ],
            {},
            "'image_url' part",
        ),
        ([USER], {"n": 2}, "n=2"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_what_cannot_be_expressed_is_refused_before_any_call(
    server: ScriptedServer, messages: Any, params: Any, what: str, stream: bool
) -> None:
    backend = dlm_backend(server.base_url)
    req = CompletionRequest(messages=messages, params=params, timeout_s=5)
    with pytest.raises(CapabilityError, match=what):
        if stream:
            list(backend.stream(req))
        else:
            backend.complete(req)
    assert server.requests == []


def test_diffusion_fields_from_yaml_reach_the_request(server: ScriptedServer) -> None:
    protocol = load_protocol()
    server.script([Reply.text("ok", chunks=1)])
    backend = dlm_backend(
        server.base_url,
        diffusion={"num_denoising_steps": 32, "block_length": 16, "use_local_leap": True},
    )
    backend.complete(CompletionRequest(messages=[USER], timeout_s=5))
    parsed = protocol.ChatCompletionRequest.model_validate(server.requests[-1].body)
    assert (parsed.num_denoising_steps, parsed.block_length, parsed.use_local_leap) == (
        32,
        16,
        True,
    )


# -- dlmserve's real app over HTTP --------------------------------------------------------------


def _agent_reply(prompt: str, params: Any) -> str:
    """The fake LLaDA: call the tool, then answer from its result; one malformed call."""
    last = prompt.rsplit("<|user|>", 1)[-1]
    if "Berlin" in last:
        return '<tool_call>{"name": "get_weather", "arguments": {"city": 7}}</tool_call>'
    if "<tool_result" in last:
        return "It is 18 C in Paris. END and more"
    return (
        "<think>The user wants Paris.</think>\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    )


def _policy(fast_url: str, frontier_url: str) -> dict[str, Any]:
    return {
        "version": 1,
        "backends": {
            "llada": {"preset": "dlmserve", "base_url": fast_url, "max_retries": 0},
            "frontier": {
                "type": "openai",
                "base_url": frontier_url,
                "api_key": "sk-test-0123456789",
                "model": "frontier-model",
            },
        },
        "tiers": {"fast": "llada", "frontier": "frontier"},
        "scoring": {"threshold": 1.0},
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_tool_loop_through_the_router_on_dlmserve(server: ScriptedServer, streaming: bool) -> None:
    sink = MemorySink()
    server.script([Reply.tool_calls([("get_weather", {"city": "Berlin"})])])
    with serve(_agent_reply) as dlm:
        router = Router(_policy(dlm.base_url, server.base_url), sinks=[sink])
        messages: list[dict[str, Any]] = [SYSTEM, USER]

        def run(turn: Turn) -> Any:
            if not streaming:
                return router.complete(turn)
            stream = router.stream(turn)
            for _ in stream:
                pass
            return stream.result

        # step 1: the diffusion model calls the tool (prompted, parsed back)
        first = run(Turn(messages, tools=[WEATHER], params={"stop": ["END"]}))
        assert first.tier == "fast" and not first.escalated
        (call,) = first.completion.tool_calls
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        assert first.completion.text == ""  # the reply was only the call (and its thinking)
        assert first.completion.reasoning == "The user wants Paris."
        messages += [
            first.completion.to_message(),
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'},
        ]
        # step 2: with the tool history as text, it answers; stop applied client-side
        second = run(Turn(messages, tools=[WEATHER], params={"stop": ["END"]}))
        assert second.tier == "fast" and second.completion.text == "It is 18 C in Paris. "
        assert second.completion.tool_calls == ()
        # step 3: a malformed prompted call (city must be a string) fails the gate
        messages += [
            second.completion.to_message(),
            {"role": "user", "content": "And in Berlin?"},
        ]
        third = run(Turn(messages, tools=[WEATHER]))
        router.close()
    assert third.escalated and third.tier == "frontier"
    fast_try = third.trace.attempts[0]
    assert fast_try.verdict is not None and not fast_try.verdict.passed
    assert any("city" in r for r in fast_try.verdict.reasons)
    # what dlmserve's engine saw: plain chat, tools in the system prompt, history as text
    assert len(dlm.engine.prompts) == 3
    assert "# Tools" in dlm.engine.prompts[1] and "<tool_result" in dlm.engine.prompts[1]
    assert '<tool_call>{"name": "get_weather"' in dlm.engine.prompts[1]
    traces = sink.traces
    fast_share = sum(t.tier == "fast" for t in traces) / len(traces)
    assert len(traces) == 3 and fast_share == pytest.approx(2 / 3)
    conversions = traces[1].attempts[0].conversions
    assert "tools: 1 described in the system prompt (prompted)" in conversions
    assert "history: 1 tool result(s) -> user text" in conversions
    assert "stop: 1 sequence(s) applied to the reply" in conversions
    assert traces[1].attempts[0].to_dict()["conversions"] == list(conversions)


def test_dlmserve_refuses_what_the_profile_would_not_send() -> None:
    # the real app answers 400 (FastAPI: 422) to a raw OpenAI request with tools: the
    # profile is what makes the difference, not a lenient fake
    with serve(lambda prompt, params: "x") as dlm:
        raw = OpenAICompatBackend("raw", model=MODEL, base_url=dlm.base_url)
        _open.append(raw)
        with pytest.raises(Exception, match="tools") as info:
            raw.complete(CompletionRequest(messages=[USER], tools=[WEATHER], timeout_s=10))
        assert getattr(info.value, "status_code", None) == 422
        good = dlm_backend(dlm.base_url)
        done = good.complete(CompletionRequest(messages=[USER], tools=[WEATHER], timeout_s=10))
        assert done.text == "x" and done.tool_calls == ()
