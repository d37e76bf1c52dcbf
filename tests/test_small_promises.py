"""Smaller promises, over real HTTP to the scripted server.

- Mercury takes at most 4 ``stop`` sequences (docs/../PROVIDERS.md): a 5th is applied to the
  reply, complete or streamed, so text after it never reaches the caller;
- the ``repetition`` check passes valid JSON nested 48 deep (48 closing brackets in a row)
  and still fails a run of brackets that closes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from routerkit import make_policy

from tiered_router import Router, Turn
from tiered_router.testing import Reply, ScriptedServer

STOPS = ["<s1>", "<s2>", "<s3>", "<s4>", "END5"]
JSON_OBJECT = {"type": "json_object"}
SAID = "the answer is 4 END5 and this secret must never be seen"


def mercury_policy(server: ScriptedServer) -> dict[str, Any]:
    policy = make_policy(server, retries=(0, 0), gate={"checks": ["non_empty"]})
    policy["backends"]["fast"] = {
        "preset": "mercury-2",
        "base_url": server.base_url,
        "api_key": "sk-test-mercury",
        "model": "fast-model",
    }
    return policy


def stop_turn() -> Turn:
    return Turn([{"role": "user", "content": "What is 2 + 2?"}], params={"stop": STOPS})


def test_mercurys_fifth_stop_sequence_is_applied_to_a_complete_reply(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text(SAID)], model="fast-model")
    with Router(mercury_policy(server)) as router:
        result = router.complete(stop_turn(), tier="fast")
    assert result.tier == "fast"
    assert result.completion.text == "the answer is 4 "
    assert result.completion.finish_reason == "stop"
    assert server.requests[0].body["stop"] == STOPS[:4]  # what Mercury accepts


def test_mercurys_fifth_stop_sequence_is_applied_to_a_stream(server: ScriptedServer) -> None:
    server.script([Reply.text(SAID).streamed(chunks=8)], model="fast-model")
    with Router(mercury_policy(server)) as router:
        stream = router.stream(stop_turn(), tier="fast")
        with stream:
            chunks = list(stream)
    text = "".join(c.text for c in chunks)
    assert text == "the answer is 4 "
    assert "secret" not in text
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["stop"]
    assert server.requests[0].body["stop"] == STOPS[:4]


def nested(depth: int) -> str:
    value: Any = {"leaf": [1, 2, 3]}
    for i in range(depth - 1):
        value = {f"k{i % 3}": value}
    return json.dumps(value, separators=(",", ":"))


def test_repetition_passes_json_with_48_closing_brackets_in_a_row(server: ScriptedServer) -> None:
    draft = nested(48)
    assert "}" * 48 in draft
    server.script([Reply.text(draft)], model="fast-model")
    policy = make_policy(server, retries=(0, 0))
    with Router(policy) as router:
        result = router.complete(
            Turn(
                [{"role": "user", "content": "Nest it."}], response_format={"type": "json_object"}
            ),
            tier="fast",
        )
    assert "repetition" in result.trace.attempts[0].verdict.checks
    assert result.trace.attempts[0].verdict.passed
    assert (result.tier, result.escalated) == ("fast", False)
    assert json.loads(result.completion.text) == json.loads(draft)


def test_repetition_still_fails_a_run_of_brackets_that_close_nothing(
    server: ScriptedServer,
) -> None:
    server.script([Reply.text("The list is done " + "]" * 60)], model="fast-model")
    server.script([Reply.text("The list is done.")], model="frontier-model")
    with Router(make_policy(server, retries=(0, 0))) as router:
        result = router.complete(Turn([{"role": "user", "content": "List."}]), tier="fast")
    failures = result.trace.attempts[0].verdict.failures
    assert [f.check for f in failures] == ["repetition"]
    assert (result.tier, result.escalated) == ("frontier", True)


@pytest.mark.parametrize("depth", [48, 100])
def test_repetition_passes_nested_arrays(depth: int) -> None:
    from tiered_router import Completion
    from tiered_router.gate import RepetitionCheck

    value: Any = [1]
    for _ in range(depth - 1):
        value = [value]
    text = json.dumps(value, separators=(",", ":"))
    assert (
        RepetitionCheck()(Completion(text=text), Turn([{"role": "user", "content": "x"}])) is None
    )
