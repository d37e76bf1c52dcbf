"""openai-python's documented call patterns, run unchanged against TieredOpenAI.

Each test body below the client construction is taken from openai-python 3.54's README
(the package's METADATA) or its ``examples/`` (parsing.py, parsing_tools.py), with
``client = OpenAI()`` replaced by a TieredOpenAI on the scripted server. The README's model
names are served by the policy: ``gpt-5.5`` is the frontier backend's model (pinning the
frontier tier) and ``gpt-4o-2024-08-06`` the fast backend's (pinning the fast tier, still
gated and escalated).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from enum import Enum
from typing import Any, List, Union  # noqa: UP035 - the examples' own spelling

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

from tiered_router.exceptions import AllTiersFailed
from tiered_router.openai import AsyncTieredOpenAI, TieredOpenAI, wrap_openai
from tiered_router.testing import Reply, ScriptedServer

FAST = "gpt-4o-2024-08-06"
FRONTIER = "gpt-5.5"


def _policy(server: ScriptedServer) -> dict[str, Any]:
    backend = {"base_url": server.base_url, "api_key": "sk-test", "max_retries": 0}
    return {
        "version": 1,
        "backends": {
            "fast": {**backend, "model": FAST, "kind": "diffusion"},
            "frontier": {**backend, "model": FRONTIER},
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
    }


@pytest.fixture
def client(server: ScriptedServer) -> Iterator[TieredOpenAI]:
    with TieredOpenAI(_policy(server)) as made:
        yield made


def test_readme_chat_completion(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.text("Use isinstance(obj, cls), matey.")], model=FRONTIER)

    completion = client.chat.completions.create(
        model="gpt-5.5",
        messages=[
            {"role": "developer", "content": "Talk like a pirate."},
            {
                "role": "user",
                "content": "How do I check if a Python object is an instance of a class?",
            },
        ],
    )

    print(completion.choices[0].message.content)
    assert completion.choices[0].message.content == "Use isinstance(obj, cls), matey."
    assert server.requests_for(FRONTIER)[0].messages[0]["role"] == "developer"


def test_readme_async_usage(server: ScriptedServer) -> None:
    server.script([Reply.text("this is a test")], model=FRONTIER)
    seen: list[str | None] = []

    async def main() -> None:
        async with AsyncTieredOpenAI(_policy(server)) as client:
            chat_completion = await client.chat.completions.create(
                messages=[
                    {
                        "role": "user",
                        "content": "Say this is a test",
                    }
                ],
                model="gpt-5.5",
            )
            seen.append(chat_completion.choices[0].message.content)

    asyncio.run(main())
    assert seen == ["this is a test"]


def test_readme_handling_errors(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.status(429)], model=FAST)
    server.script([Reply.status(429)], model=FRONTIER)
    printed: list[str] = []

    try:
        client.chat.completions.create(
            messages=[{"role": "user", "content": "Say this is a test"}], model="auto"
        )
    except openai.APIConnectionError:
        printed.append("The server could not be reached")
    except openai.RateLimitError as e:
        printed.append("A 429 status code was received; we should back off a bit.")
        assert e.status_code == 429
        assert isinstance(e, AllTiersFailed) and e.trace is not None
        assert [a.tier for a in e.trace.attempts] == ["fast", "frontier"]
    except openai.APIStatusError:
        printed.append("Another non-200-range status code was received")
    assert printed == ["A 429 status code was received; we should back off a bit."]


def test_readme_request_ids_on_status_errors(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.status(500)], model=FRONTIER)
    server.script([Reply.status(500)], model=FAST)

    with pytest.raises(openai.APIStatusError) as info:
        try:
            client.chat.completions.create(
                messages=[{"role": "user", "content": "Say this is a test"}], model="gpt-5.5"
            )
        except openai.APIStatusError as exc:
            print(exc.request_id)
            raise exc
    assert isinstance(info.value, openai.InternalServerError)
    assert info.value.status_code == 500


def test_readme_retries_and_timeouts(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.text("Date.getDay()"), Reply.text("os.listdir")], model=FRONTIER)

    client.with_options(max_retries=5).chat.completions.create(
        messages=[
            {
                "role": "user",
                "content": "How can I get the name of the current day in JavaScript?",
            }
        ],
        model="gpt-5.5",
    )
    client.with_options(timeout=5.0).chat.completions.create(
        messages=[
            {
                "role": "user",
                "content": "How can I list all files in a directory using Python?",
            }
        ],
        model="gpt-5.5",
    )
    assert len(server.requests_for(FRONTIER)) == 2


def test_readme_raw_response(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.text("this is a test")], model=FRONTIER)

    response = client.chat.completions.with_raw_response.create(
        messages=[
            {
                "role": "user",
                "content": "Say this is a test",
            }
        ],
        model="gpt-5.5",
    )
    print(response.headers.get("X-My-Header"))

    completion = (
        response.parse()
    )  # get the object that `chat.completions.create()` would have returned
    print(completion)
    assert completion.choices[0].message.content == "this is a test"
    assert response.headers.get("x-tiered-router-tier") == "frontier"
    assert response.headers.get("X-My-Header") is None


def test_chat_streaming(server: ScriptedServer, client: TieredOpenAI) -> None:
    server.script([Reply.text("a unicorn slept")], model=FRONTIER)

    stream = client.chat.completions.create(
        model="gpt-5.5",
        messages=[{"role": "user", "content": "Write a one-sentence bedtime story."}],
        stream=True,
    )
    text = ""
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "a unicorn slept"


class Step(BaseModel):
    explanation: str
    output: str


class MathResponse(BaseModel):
    steps: List[Step]  # noqa: UP006 - as in the example
    final_answer: str


ANSWER = {"steps": [{"explanation": "subtract 31", "output": "8x = -29"}], "final_answer": "-29/8"}


@pytest.mark.parametrize("beta", [False, True], ids=["chat", "beta.chat"])
def test_examples_parsing(server: ScriptedServer, client: TieredOpenAI, beta: bool) -> None:
    # the fast draft misses a required key: the gate checks it against MathResponse's schema
    server.script([Reply.text(json.dumps({"steps": []}))], model=FAST)
    server.script([Reply.text(json.dumps(ANSWER))], model=FRONTIER)
    completions = client.beta.chat.completions if beta else client.chat.completions

    completion = completions.parse(
        model="gpt-4o-2024-08-06",
        messages=[
            {"role": "system", "content": "You are a helpful math tutor."},
            {"role": "user", "content": "solve 8x + 31 = 2"},
        ],
        response_format=MathResponse,
    )

    message = completion.choices[0].message
    if message.parsed:
        print(message.parsed.steps)
        print("answer: ", message.parsed.final_answer)
    else:
        print(message.refusal)
    assert isinstance(message.parsed, MathResponse)
    assert message.parsed.final_answer == "-29/8"
    route = completion.tiered_router  # type: ignore[attr-defined]
    assert route["escalated"] is True and route["tier"] == "frontier"
    sent = server.requests_for(FAST)[0].body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "MathResponse"


class Table(str, Enum):
    orders = "orders"
    customers = "customers"


class Operator(str, Enum):
    eq = "="
    lt = "<"


class DynamicValue(BaseModel):
    column_name: str


class Condition(BaseModel):
    column: str
    operator: Operator
    value: Union[str, int, DynamicValue]  # noqa: UP007 - as in the example


class Query(BaseModel):
    table_name: Table
    columns: List[str]  # noqa: UP006 - as in the example
    conditions: List[Condition]  # noqa: UP006 - as in the example


def test_examples_parsing_tools(server: ScriptedServer, client: TieredOpenAI) -> None:
    args = {
        "table_name": "orders",
        "columns": ["id"],
        "conditions": [{"column": "status", "operator": "=", "value": "fulfilled"}],
    }
    server.script([Reply.tool_calls([("Query", args)])], model=FAST)

    completion = client.chat.completions.parse(
        model="gpt-4o-2024-08-06",
        messages=[
            {
                "role": "system",
                "content": "You help users query for the data they are looking for.",
            },
            {"role": "user", "content": "look up all my orders that were fulfilled"},
        ],
        tools=[
            openai.pydantic_function_tool(Query),
        ],
    )

    tool_call = (completion.choices[0].message.tool_calls or [])[0]
    assert tool_call.type == "function"
    assert isinstance(tool_call.function.parsed_arguments, Query)
    print(tool_call.function.parsed_arguments.table_name)
    assert tool_call.function.parsed_arguments.table_name is Table.orders


def test_create_accepts_a_pydantic_response_format(
    server: ScriptedServer, client: TieredOpenAI
) -> None:
    server.script([Reply.text(json.dumps(ANSWER))], model=FAST)
    completion = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "solve 8x + 31 = 2"}],
        response_format=MathResponse,  # type: ignore[arg-type]
    )
    assert MathResponse.model_validate_json(completion.choices[0].message.content or "")


def test_models_list_and_pass_through(server: ScriptedServer, client: TieredOpenAI) -> None:
    ids = [model.id for model in client.models.list()]
    assert ids[:3] == ["auto", "fast", "frontier"] and FAST in ids and FRONTIER in ids

    response = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(response.data) == 2 and len(response.data[0].embedding) == 8
    assert server.requests[-1].path == "/v1/embeddings"
    assert server.requests[-1].headers["authorization"] == "Bearer sk-test"


def test_async_models_list_and_pass_through(server: ScriptedServer) -> None:
    async def main() -> tuple[list[str], list[str], int]:
        async with AsyncTieredOpenAI(_policy(server)) as client:
            page = await client.models.list()
            listed = [m.id async for m in client.models.list()]
            embedded = await client.embeddings.create(model="e", input="hello")
            return [m.id for m in page.data], listed, len(embedded.data)

    awaited, iterated, embedded = asyncio.run(main())
    assert awaited == iterated and "auto" in awaited
    assert embedded == 1


def test_an_unknown_model_is_openais_not_found(client: TieredOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-3", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 404
    assert "auto" in str(info.value)


def test_wrapped_parse_with_model_auto_is_routed(server: ScriptedServer) -> None:
    server.script([Reply.text(json.dumps(ANSWER))], model=FAST)
    inner = OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    client = wrap_openai(inner, _policy(server))
    completion = client.chat.completions.parse(
        model="auto",
        messages=[{"role": "user", "content": "solve 8x + 31 = 2"}],
        response_format=MathResponse,
    )
    assert completion.choices[0].message.parsed.final_answer == "-29/8"
    assert all(r.model != "auto" for r in server.requests)
    inner.close()
    client.router.close()


def test_wrapped_async_parse_and_other_models_go_to_the_wrapped_client(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text(json.dumps(ANSWER))], model="someone-else")

    async def main() -> Any:
        inner = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        client = wrap_openai(inner, _policy(server))
        try:
            return await client.chat.completions.parse(
                model="someone-else",
                messages=[{"role": "user", "content": "solve"}],
                response_format=MathResponse,
            )
        finally:
            await inner.close()
            await client.router.aclose()

    completion = asyncio.run(main())
    assert completion.choices[0].message.parsed.final_answer == "-29/8"
    assert not hasattr(completion, "tiered_router")


def test_async_parse_with_options_and_resources_passed_through(server: ScriptedServer) -> None:
    server.script([Reply.text(json.dumps(ANSWER))], model=FAST)

    async def main() -> tuple[Any, Any]:
        async with AsyncTieredOpenAI(_policy(server)) as client:
            quick = client.with_options(timeout=5.0)
            completion = await quick.beta.chat.completions.parse(
                model="auto",
                messages=[{"role": "user", "content": "solve 8x + 31 = 2"}],
                response_format=MathResponse,
            )
            raw = await client.chat.completions.with_raw_response.parse(
                model="frontier",
                messages=[{"role": "user", "content": "solve"}],
                response_format=MathResponse,
            )
            return completion, raw

    server.script([Reply.text(json.dumps(ANSWER))], model=FRONTIER)
    completion, raw = asyncio.run(main())
    assert completion.choices[0].message.parsed.final_answer == "-29/8"
    assert raw.parse().choices[0].message.parsed.final_answer == "-29/8"
    assert raw.headers["x-tiered-router-tier"] == "frontier"


def test_sync_resources_and_wrapped_options_pass_through(
    server: ScriptedServer, client: TieredOpenAI
) -> None:
    # chat.completions.<other>, chat.<other>, models.<other> and beta.<other> are the SDK's
    assert callable(client.chat.completions.retrieve)
    assert client.chat.completions.with_streaming_response is not None
    assert client.models.retrieve is not None and client.beta.assistants is not None
    with pytest.raises(AttributeError):
        client.chat._private  # noqa: B018 - private names are never passed through
    inner = OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    wrapped = wrap_openai(inner, _policy(server))
    quick = wrapped.with_options(timeout=3.0)
    server.script([Reply.text("ok!")], model=FAST)
    response = quick.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "x"}]
    )
    assert response.choices[0].message.content == "ok!"
    assert [m.id for m in quick.models.list()][-1] == "scripted"  # the wrapped client's own
    inner.close()
    wrapped.router.close()


def test_a_turn_built_with_a_pydantic_class_scores_and_routes() -> None:
    from tiered_router import Router, Turn

    turn = Turn([{"role": "user", "content": "solve 8x + 31 = 2"}], response_format=MathResponse)
    assert turn.response_format is not None
    assert turn.response_format["json_schema"]["name"] == "MathResponse"
    policy = {
        "version": 1,
        "backends": {"f": {"model": "a", "api_key": "k"}, "b": {"model": "b", "api_key": "k"}},
        "tiers": {"fast": "f", "frontier": "b"},
    }
    assert Router(policy).decide(turn).tier in ("fast", "frontier")
    with pytest.raises(ValueError, match="response_format"):
        Turn([{"role": "user", "content": "x"}], response_format=int)


def test_closing_the_client_closes_what_its_copies_opened(server: ScriptedServer) -> None:
    client = TieredOpenAI(_policy(server))
    copy = client.with_options(timeout=5.0)
    copy.embeddings.create(model="e", input="a")
    client.embeddings.create(model="e", input="b")
    opened = [copy._pt, client._pt]
    assert all(c is not None for c in opened) and opened[0] is not opened[1]
    client.close()
    assert all(c.is_closed() for c in opened)
