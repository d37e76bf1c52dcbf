"""Client-side stop on a stream, applied as the chunks arrive (backends/_stop_stream.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tiered_router.backends import CompletionRequest
from tiered_router.backends._stop_stream import StopStream, opens_as_prose
from tiered_router.backends.registry import from_preset
from tiered_router.exceptions import BackendResponseError
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import CompletionChunk, Usage, assemble


def texts(cut: StopStream, *parts: str) -> list[str]:
    out: list[str] = []
    for part in parts:
        out += [c.text for c in cut.feed(CompletionChunk(text=part))]
    return out


def test_text_passes_as_it_comes_holding_back_a_possible_stop() -> None:
    cut = StopStream(("END", ""))
    assert texts(cut, "It is ", "18 C. E", "N") == ["It i", "s 18 C.", " "]  # 2 held back
    (last,) = cut.feed(CompletionChunk(text="D and more"))
    assert (last.text, last.finish_reason) == ("", "stop") and cut.stopped
    # after the cut only usage goes on
    assert cut.feed(CompletionChunk(text="x")) == []
    (usage,) = cut.feed(CompletionChunk(usage=Usage(input_tokens=1, output_tokens=2)))
    assert usage.text == "" and usage.usage is not None


def test_the_finish_chunk_and_flush_release_what_was_held() -> None:
    cut = StopStream(("STOP",))
    assert texts(cut, "abcdef") == ["abc"]
    (end,) = cut.feed(CompletionChunk(text="g", finish_reason="length"))
    assert (end.text, end.finish_reason) == ("defg", "length")
    cut = StopStream(("STOP",))
    texts(cut, "abcdef")
    assert [c.text for c in cut.flush()] == ["def"] and cut.flush() == []


@pytest.mark.parametrize("preset", ["dlmserve", "diffulex", "local-diffusion"])
def test_a_stop_stream_arrives_in_pieces(server: ScriptedServer, preset: str) -> None:
    backend = from_preset(preset, base_url=server.base_url, model="m")
    server.script([Reply.text("It is 18 C in Paris today. END and more", chunks=6)])
    chunks = list(
        backend.stream(
            CompletionRequest(
                messages=[{"role": "user", "content": "?"}], params={"stop": ["END"]}, timeout_s=5
            )
        )
    )
    backend.close()
    assert "stop" not in server.requests[-1].body
    done = assemble(chunks)
    assert done.text == "It is 18 C in Paris today. " and done.finish_reason == "stop"
    assert len([c for c in chunks if c.text]) > 1  # not one buffered chunk
    assert "stop: 1 sequence(s) applied to the reply" in chunks[0].conversions


def _json_answer(text: str) -> Reply:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"completion_tokens": 7},
    }
    return Reply.raw(200, json.dumps(body), headers={"content-type": "application/json"})


def test_a_json_answer_to_a_stream_request_is_one_chunk_async_and_sync(
    server: ScriptedServer,
) -> None:
    backend = from_preset("ollada", base_url=server.base_url, model="m")
    req = CompletionRequest(messages=[{"role": "user", "content": "?"}], timeout_s=5)

    async def collect() -> list[CompletionChunk]:
        return [c async for c in backend.astream(req)]

    server.script([_json_answer("whole answer"), _json_answer("again")])
    for chunks in (asyncio.run(collect()), list(backend.stream(req))):
        assert len(chunks) == 1 and chunks[0].finish_reason == "stop"
    assert [c.text for c in chunks] == ["again"]
    assert "stream" not in server.requests[-1].body  # ollada ignores it: not sent
    server.script(
        Reply.raw(
            200, '{"error": {"message": "boom"}}', headers={"content-type": "application/json"}
        )
    )
    with pytest.raises(BackendResponseError, match="boom"):
        list(backend.stream(req))
    backend.close()


@pytest.mark.parametrize(
    ("text", "prose"),
    [
        ("It is 18 C.", True),
        ("  Let me look", True),
        ("18 C and sunny", True),
        ('<tool_call>{"name": "get_weather"}', False),
        ('{"name": "get_weather"', False),
        ('[get_weather(city="Oslo")]', False),
        ('get_weather(city="Oslo")', False),
        ('get_weather (city="Oslo")', False),
        ('functions.get_weather(city="Oslo")', False),
        ("Action: ```json", False),
        ("```json\n{", False),
        ("<think>hmm</think> It is", False),
        ("It", False),  # not yet known
        ("Sure!", False),
    ],
)
def test_what_opens_as_prose(text: str, prose: bool) -> None:
    assert opens_as_prose(text) is prose


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.mark.parametrize(
    ("reply", "pieces", "calls"),
    [
        ("It is 18 C and sunny in Paris today, with a light wind.", True, 0),
        (
            'Let me look that up.\n<tool_call>{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}</tool_call>',
            True,
            0,
        ),
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            False,
            1,
        ),
    ],
    ids=["prose", "prose-then-call", "call"],
)
def test_prompted_tool_replies_stream_when_they_open_as_prose(
    server: ScriptedServer, reply: str, pieces: bool, calls: int
) -> None:
    backend = from_preset("dlmserve", base_url=server.base_url)
    req = CompletionRequest(
        messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER], timeout_s=5
    )
    server.script([Reply.text(reply, chunks=8), Reply.text(reply)])
    chunks = list(backend.stream(req))
    whole = backend.complete(req)  # the same reply, finished whole: the reference
    backend.close()
    done = assemble(chunks)
    assert (done.text, len(done.tool_calls)) == (whole.text, len(whole.tool_calls))
    assert len(done.tool_calls) == calls
    assert (len([c for c in chunks if c.text or c.tool_calls]) > 1) is pieces
    assert chunks[0].conversions == whole.conversions
