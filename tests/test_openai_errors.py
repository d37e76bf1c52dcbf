"""The drop-in raises openai's exception classes that are also tiered_router's, with the trace."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from routerkit import make_policy as shared_policy

from tiered_router.exceptions import (
    AllTiersFailed,
    GateFailed,
    PolicyError,
    StreamInterrupted,
)
from tiered_router.openai import AsyncTieredOpenAI, TieredOpenAI, UnknownModel
from tiered_router.testing import Reply, ScriptedServer

MESSAGES: list[Any] = [{"role": "user", "content": "Say hi."}]


def _client(server: ScriptedServer, **overrides: Any) -> TieredOpenAI:
    return TieredOpenAI(shared_policy(server, retries=(0, 0), **overrides))


def test_a_timeout_on_every_tier_is_an_api_timeout_error(server: ScriptedServer) -> None:
    policy = shared_policy(server, retries=(0, 0))
    for backend in policy["backends"].values():
        backend["timeout_s"] = 0.2
    server.script([Reply.slow(2.0)], model="fast-model")
    server.script([Reply.slow(2.0)], model="frontier-model")
    with TieredOpenAI(policy) as client, pytest.raises(openai.APITimeoutError) as info:
        client.chat.completions.create(model="auto", messages=MESSAGES)
    assert isinstance(info.value, AllTiersFailed)
    assert isinstance(info.value, openai.APIConnectionError)  # as the SDK's own timeouts are
    assert info.value.trace is not None and len(info.value.attempts) == 2
    assert isinstance(info.value.__cause__, AllTiersFailed)


def test_a_dropped_connection_is_an_api_connection_error(server: ScriptedServer) -> None:
    server.script([Reply.drop()], model="fast-model")
    server.script([Reply.drop()], model="frontier-model")
    with _client(server) as client, pytest.raises(openai.APIConnectionError) as info:
        client.chat.completions.create(model="auto", messages=MESSAGES)
    assert not isinstance(info.value, openai.APITimeoutError)
    assert isinstance(info.value, AllTiersFailed)


def test_a_bad_request_everywhere_is_openais_bad_request(server: ScriptedServer) -> None:
    server.script([Reply.status(400)], model="fast-model")
    server.script([Reply.status(400)], model="frontier-model")
    with _client(server) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="auto", messages=MESSAGES)
    assert info.value.status_code == 400
    assert info.value.response.json()["error"]["code"] == "AllTiersFailed"
    assert info.value.body is not None


def test_gate_failed_is_an_api_error(server: ScriptedServer) -> None:
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.bad_json()], model="frontier-model")
    escalation = {"when_frontier_fails_gate": "raise"}
    with _client(server, escalation=escalation) as client:
        with pytest.raises(openai.APIError) as info:
            client.chat.completions.create(
                model="auto", messages=MESSAGES, response_format={"type": "json_object"}
            )
    assert isinstance(info.value, GateFailed)
    assert not info.value.verdict.passed
    assert info.value.trace is not None


def test_malformed_arguments_are_bad_requests_and_value_errors(server: ScriptedServer) -> None:
    with _client(server) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="auto", messages=MESSAGES, n=2)
        assert isinstance(info.value, ValueError)
        with pytest.raises(UnknownModel):
            client.chat.completions.create(model="gpt-2", messages=MESSAGES)
    assert server.requests == []


def test_a_missing_key_is_openais_error_at_the_first_call(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DROPIN_TEST_KEY", raising=False)
    policy = shared_policy(server, api_key="${DROPIN_TEST_KEY}", retries=(0, 0))
    with TieredOpenAI(policy) as client:
        with pytest.raises(openai.OpenAIError) as info:
            client.chat.completions.create(model="auto", messages=MESSAGES)
        with pytest.raises(openai.OpenAIError):
            client.embeddings.create(model="e", input="x")
    assert isinstance(info.value, PolicyError)
    assert "DROPIN_TEST_KEY" in str(info.value)


def test_a_broken_stream_raises_openais_api_error_from_the_iterator(
    server: ScriptedServer,
) -> None:
    server.script([Reply.broken_sse("drop", content="a partial answer")], model="frontier-model")
    with _client(server) as client:
        stream = client.chat.completions.create(model="frontier", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIError) as info:
            for _ in stream:
                pass
    assert isinstance(info.value, StreamInterrupted)


def test_async_raw_response_and_errors(server: ScriptedServer) -> None:
    server.script([Reply.text("hi")], model="fast-model")
    server.script([Reply.status(429)], model="fast-model")
    server.script([Reply.status(429)], model="frontier-model")

    async def main() -> tuple[Any, BaseException | None]:
        async with AsyncTieredOpenAI(shared_policy(server, retries=(0, 0))) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="auto", messages=MESSAGES
            )
            try:
                await client.chat.completions.create(model="auto", messages=MESSAGES)
            except openai.RateLimitError as exc:
                return raw, exc
            return raw, None

    raw, error = asyncio.run(main())
    assert raw.parse().choices[0].message.content == "hi"
    assert raw.status_code == 200 and raw.headers["x-tiered-router-escalated"] == "false"
    assert raw.json()["choices"][0]["message"]["content"] == "hi"
    assert raw.text.startswith("{") and raw.content.startswith(b"{")
    assert "RawResponse" in repr(raw)
    assert isinstance(error, AllTiersFailed)


def test_raw_parse_and_a_non_openai_frontier_cannot_pass_through(server: ScriptedServer) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: int

    server.script([Reply.json({"answer": 4})], model="fast-model")
    with _client(server) as client:
        raw = client.chat.completions.with_raw_response.parse(
            model="auto", messages=MESSAGES, response_format=Answer
        )
        assert raw.parse().choices[0].message.parsed == Answer(answer=4)
        with pytest.raises(TypeError, match="stream"):
            client.chat.completions.parse(model="auto", messages=MESSAGES, stream=True)
    replay = {
        "version": 1,
        "backends": {"f": {"type": "replay", "model": "m", "options": {"data": "sample"}}},
        "tiers": {"fast": "f", "frontier": "f"},
    }
    with TieredOpenAI(replay) as client, pytest.raises(openai.OpenAIError, match="replay"):
        client.embeddings.create(model="e", input="x")


def test_parse_failing_on_both_tiers_is_an_api_error_with_the_trace(
    server: ScriptedServer,
) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: int

    server.script([Reply.json({"answer": "four"})], model="fast-model")
    server.script([Reply.json({"answer": "four"})], model="frontier-model")
    with _client(server) as client, pytest.raises(openai.APIError) as info:
        client.chat.completions.parse(model="auto", messages=MESSAGES, response_format=Answer)
    error = info.value
    assert isinstance(error, GateFailed) and not isinstance(error, openai.APIStatusError)
    assert error.trace is not None and [a.tier for a in error.attempts] == ["fast", "frontier"]
    assert error.verdict.failed_checks == ("json_schema",)
    assert "answer" in str(error) and "every draft failed the gate" in str(error)
    assert error.body is not None and error.body["code"] == "GateFailed"


def test_async_parse_of_a_truncated_answer_is_openais_length_error_with_the_trace(
    server: ScriptedServer,
) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: int

    server.script([Reply.truncated('{"answer": ')], model="fast-model")
    server.script([Reply.truncated('{"answer": ')], model="frontier-model")

    async def main() -> BaseException:
        async with AsyncTieredOpenAI(shared_policy(server, retries=(0, 0))) as client:
            try:
                await client.chat.completions.parse(
                    model="auto", messages=MESSAGES, response_format=Answer
                )
            except openai.LengthFinishReasonError as exc:
                return exc
        raise AssertionError("parse returned")

    error = asyncio.run(main())
    assert isinstance(error, GateFailed) and error.trace is not None
    assert len(error.attempts) == 2 and "not_truncated" in error.verdict.failed_checks
    assert error.completion.choices[0].finish_reason == "length"  # type: ignore[attr-defined]
