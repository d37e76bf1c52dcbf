"""A caller's own malformed request is the caller's: 400-class, refused before any attempt.

In process it is :class:`tiered_router.InvalidRequest` (a ``ValueError``), through the
drop-in ``openai.BadRequestError``, over the proxy a 400 in OpenAI's error shape. Nothing
reaches the upstream, nothing is retried, and no circuit breaker counts it.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from routerkit import make_policy

pytest.importorskip("uvicorn")

from test_server import CLIENT_KEY, post, running  # noqa: E402

from tiered_router import InvalidRequest, Router, TieredRouterError, Turn  # noqa: E402
from tiered_router.openai import TieredOpenAI  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

USER = {"role": "user", "content": "Say hi."}


def nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}


def large_schema() -> dict[str, Any]:
    properties = {f"field_{i}": {"type": "string", "description": "x" * 100} for i in range(3000)}
    schema = {"type": "object", "properties": properties}
    return {"type": "json_schema", "json_schema": {"name": "large", "schema": schema}}


# (create() arguments, the parameter named in the error)
FAULTS: list[tuple[dict[str, Any], str]] = [
    ({"response_format": nested_schema(2000)}, "response_format"),
    ({"response_format": nested_schema(200)}, "response_format"),
    ({"response_format": large_schema()}, "response_format"),
    ({"n": "2"}, "n"),
    ({"n": 2.0}, "n"),
    ({"n": 0}, "n"),
    ({"n": -1}, "n"),
    ({"n": True}, "n"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (
        {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": 7}]},
        "messages[1].tool_calls",
    ),
    ({"extra_body": {"tiered_router": {"metadata": 5}}}, "tiered_router.metadata"),
]
IDS = [f"{param}-{i}" for i, (_, param) in enumerate(FAULTS)]


def _args(fault: dict[str, Any]) -> dict[str, Any]:
    return {"model": "auto", "messages": [USER], **fault}


@pytest.mark.parametrize(("fault", "param"), FAULTS, ids=IDS)
def test_in_process_a_fault_is_invalid_request_before_any_attempt(
    server: ScriptedServer, fault: dict[str, Any], param: str
) -> None:
    args = _args(fault)
    args.pop("model")
    with pytest.raises(InvalidRequest) as info:
        Turn.from_openai(**args)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TieredRouterError)
    assert info.value.param == param
    assert param.split("[")[0].split(".")[-1] in str(info.value)
    assert server.requests == []


@pytest.mark.parametrize(("fault", "param"), FAULTS, ids=IDS)
def test_the_drop_in_raises_bad_request_and_nothing_is_sent(
    server: ScriptedServer, fault: dict[str, Any], param: str
) -> None:
    with TieredOpenAI(make_policy(server, retries=(2, 2))) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(**_args(fault))
    assert info.value.status_code == 400
    assert isinstance(info.value, InvalidRequest)
    assert info.value.param == param
    assert info.value.response.json()["error"]["param"] == param
    assert server.requests == []


def test_two_faulty_turns_leave_both_breakers_closed_for_other_callers(
    server: ScriptedServer,
) -> None:
    policy = make_policy(
        server,
        retries=(2, 2),
        resilience={"breaker": {"consecutive_failures": 2, "cooldown_s": 60}},
    )
    router = Router(policy)
    with TieredOpenAI(router) as client:
        for _ in range(2):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(**_args(FAULTS[0][0]))
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(**_args({"n": "2"}))
        assert router.breaker("fast").state == "closed"
        assert router.breaker("frontier").state == "closed"
        assert server.requests == []
        server.script([Reply.text("hello")], model="fast-model")
        reply = client.chat.completions.create(model="auto", messages=[USER])
    assert reply.choices[0].message.content == "hello"
    assert [r.body["model"] for r in server.requests] == ["fast-model"]


@pytest.mark.parametrize(("fault", "param"), FAULTS[2:], ids=IDS[2:])
def test_the_proxy_answers_400_in_openais_shape(
    server: ScriptedServer, fault: dict[str, Any], param: str
) -> None:
    policy = make_policy(server, retries=(2, 2), server={"api_keys": [CLIENT_KEY]})
    body = _args(fault)
    extra = body.pop("extra_body", {})
    body.update(extra)  # the proxy takes the agent signals in the body itself
    with running(create_app(policy, env={})) as url:
        response = post(url, json.dumps(body).encode())
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]
    assert server.requests == []


@pytest.mark.parametrize("depth", [200, 2000])
def test_the_proxy_refuses_a_deeply_nested_schema_as_400(
    server: ScriptedServer, depth: int
) -> None:
    policy = make_policy(server, server={"api_keys": [CLIENT_KEY]})
    schema = '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth
    body = (
        '{"model":"auto","messages":[{"role":"user","content":"hi"}],"response_format":'
        '{"type":"json_schema","json_schema":{"name":"deep","schema":' + schema + "}}}"
    )
    with running(create_app(policy, env={})) as url:
        response = post(url, body.encode())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "nested deeper than" in error["message"]
    assert server.requests == []
