"""Router tests with the in-process test doubles (no HTTP)."""

from __future__ import annotations

import pytest
from routerkit import doubles_policy

from tiered_router import BackendTimeout, Completion, MemorySink, Router, ToolCall, Turn
from tiered_router.backends import CompletionRequest
from tiered_router.testing import FunctionBackend, ScriptedBackend

POLICY = doubles_policy(resilience={"retry": {"base_s": 0.0, "max_s": 0.0}})


def test_scripted_backends_drive_escalation_and_are_used_up() -> None:
    fast = ScriptedBackend("fast", [BackendTimeout("slow"), BackendTimeout("slow"), "x"])
    frontier = ScriptedBackend("frontier", [Completion(text="from frontier")])
    sink = MemorySink()
    router = Router(POLICY, backends={"fast": fast, "frontier": frontier}, sinks=[sink])
    turn = Turn([{"role": "user", "content": "hello"}])
    first = router.complete(turn)
    assert first.tier == "fast" and first.completion.text == "x"
    assert [a.error is None for a in first.trace.attempts] == [False, False, True]
    fast.extend([BackendTimeout("slow")] * 3)
    second = router.complete(turn)
    assert second.tier == "frontier" and second.completion.backend == "frontier"
    assert sink.traces[-1].escalations == ("backend_error",)
    fast.assert_complete()
    frontier.assert_complete()
    with pytest.raises(AssertionError, match="unused"):
        ScriptedBackend("x", ["left over"]).assert_complete()


@pytest.mark.anyio
async def test_function_backend_sees_the_request() -> None:
    async def answer(request):  # type: ignore[no-untyped-def]
        return Completion(
            tool_calls=(ToolCall(id="c1", name="echo", arguments='{"n": 1}'),),
            finish_reason="tool_calls",
        )

    tools = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]
    fast = FunctionBackend("fast", answer)
    router = Router(POLICY, backends={"fast": fast, "frontier": ScriptedBackend("frontier")})
    result = await router.acomplete(Turn([{"role": "user", "content": "echo n=1"}], tools=tools))
    assert result.tier == "fast" and fast.calls == 1
    assert result.completion.tool_calls[0].name == "echo"
    with pytest.raises(TypeError, match="async function"):
        fast.complete(CompletionRequest(messages=[{"role": "user", "content": "go"}]))
