"""Live checks against the real providers; each runs only when its API key is set.

INCEPTION_API_KEY enables the Mercury 2 tests, OPENAI_API_KEY the OpenAI ones
(model from OPENAI_LIVE_MODEL, default gpt-4.1-mini). They cost a fraction of a cent.
"""

from __future__ import annotations

import os

import pytest

from tiered_router.backends import CompletionRequest, OpenAICompatBackend, mercury2, openai_backend
from tiered_router.turn import assemble

pytestmark = pytest.mark.live

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ASK_PONG = [{"role": "user", "content": "Reply with the single word: pong"}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]

needs_inception = pytest.mark.skipif(
    not os.environ.get("INCEPTION_API_KEY"), reason="INCEPTION_API_KEY is not set"
)
needs_openai = pytest.mark.skipif(
    not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set"
)


def _mercury() -> OpenAICompatBackend:
    return mercury2(params={"max_tokens": 300, "reasoning_effort": "instant"}, timeout_s=60)


def _openai() -> OpenAICompatBackend:
    model = os.environ.get("OPENAI_LIVE_MODEL", "gpt-4.1-mini")
    return openai_backend(model=model, params={"max_completion_tokens": 300}, timeout_s=60)


@needs_inception
def test_mercury_short_completion() -> None:
    backend = _mercury()
    done = backend.complete(CompletionRequest(messages=ASK_PONG, timeout_s=60))
    backend.close()
    assert "pong" in done.text.lower()
    assert done.usage.output_tokens > 0 and done.backend == "mercury"


@needs_inception
@pytest.mark.anyio
async def test_mercury_stream_and_tool_call() -> None:
    backend = _mercury()
    request = CompletionRequest(
        messages=ASK_WEATHER, tools=[WEATHER], params={"tool_choice": "required"}, timeout_s=60
    )
    done = assemble([c async for c in backend.astream(request)])
    await backend.aclose()
    assert done.tool_calls and done.tool_calls[0].name == "get_weather"
    assert "paris" in str(done.tool_calls[0].parsed_arguments()).lower()


@needs_openai
def test_openai_short_completion() -> None:
    backend = _openai()
    done = backend.complete(CompletionRequest(messages=ASK_PONG, timeout_s=60))
    backend.close()
    assert "pong" in done.text.lower()
    assert done.usage.input_tokens > 0 and done.finish_reason == "stop"


@needs_openai
@pytest.mark.anyio
async def test_openai_tool_call() -> None:
    backend = _openai()
    request = CompletionRequest(
        messages=ASK_WEATHER, tools=[WEATHER], params={"tool_choice": "required"}, timeout_s=60
    )
    done = await backend.acomplete(request)
    await backend.aclose()
    assert done.tool_calls and done.tool_calls[0].name == "get_weather"
    assert "paris" in str(done.tool_calls[0].parsed_arguments()).lower()
