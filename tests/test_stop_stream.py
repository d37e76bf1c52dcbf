"""Client-side stop on a stream, applied as the chunks arrive (backends/_stop_stream.py)."""

from __future__ import annotations

import pytest

from tiered_router.backends import CompletionRequest
from tiered_router.backends._stop_stream import StopStream
from tiered_router.backends.registry import from_preset
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
