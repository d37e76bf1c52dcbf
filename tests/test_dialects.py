from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_shapes import CALL, RESULT, TIME, USER, WEATHER
from routerkit import make_policy

from tiered_router import Router, Turn
from tiered_router.backends import OpenAICompatBackend, from_preset
from tiered_router.backends._dialect import capability_gap
from tiered_router.backends._dialect_shape import Plan, shape
from tiered_router.backends._profiles import DIALECTS, resolve_dialect
from tiered_router.backends.presets import PRESETS, dialect_for
from tiered_router.exceptions import CapabilityError, PolicyError
from tiered_router.policy import BackendConfig, load_policy
from tiered_router.testing import FunctionBackend, Reply, ScriptedServer
from tiered_router.trace import MemorySink
from tiered_router.turn import Completion, CompletionChunk, ToolCall, ToolSpec

IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}


def body(**fields: Any) -> dict[str, Any]:
    fields.setdefault("model", "m")
    fields.setdefault("messages", [USER])
    return fields


def test_every_preset_names_a_known_dialect_with_a_latency_model() -> None:
    for preset in PRESETS.values():
        profile = DIALECTS[preset.dialect]
        assert profile.checked
        if preset.dialect != "openai" or preset.name == "openai":
            # hosted OpenAI-compatible presets keep the generic latency model
            assert preset.latency == profile.latency, preset.name
    assert DIALECTS["mercury-2"].latency.tokens_per_s == 1000
    assert 30 <= DIALECTS["dlmserve"].latency.tokens_per_s <= 150


def test_resolve_dialect_names_mappings_and_errors() -> None:
    assert resolve_dialect("dlmserve") is DIALECTS["dlmserve"]
    assert resolve_dialect(DIALECTS["vllm"]) is DIALECTS["vllm"]
    custom = resolve_dialect({"profile": "vllm", "tools": "native", "roles": ["user", "system"]})
    assert custom.name == "vllm*" and custom.tools == "native"
    assert custom.roles == frozenset({"user", "system"})
    assert resolve_dialect({"stop": False}).name == "openai*"
    with pytest.raises(ValueError, match="known: dfastllm, diffulex, dlmserve, lmdeploy, local-"):
        resolve_dialect("tgi")
    with pytest.raises(ValueError, match="unknown dialect fields \\['speed'\\]"):
        resolve_dialect({"profile": "vllm", "speed": 1})
    with pytest.raises(ValueError, match="tools: 'sometimes' is not one of"):
        resolve_dialect({"tools": "sometimes"})
    with pytest.raises(ValueError, match="a name or a mapping"):
        resolve_dialect(3)  # type: ignore[arg-type]


def test_policy_options_pick_the_dialect_and_check_diffusion_fields() -> None:
    config = BackendConfig(preset="dlmserve", options={"dialect": "local-diffusion"})
    assert dialect_for(config).name == "local-diffusion"
    assert dialect_for(BackendConfig(model="gpt-5.2")).name == "openai-api"  # the openai preset
    assert dialect_for(BackendConfig(model="m", base_url="http://10.0.0.9/v1")).name == "openai"
    with pytest.raises(PolicyError, match="options.dialect"):
        dialect_for(BackendConfig(preset="dlmserve", options={"dialect": "nope"}), backend="x")
    policy = {
        "version": 1,
        "backends": {
            "llada": {"preset": "dlmserve", "diffusion": {"num_denoising_stepz": 8}},
            "big": {"type": "openai", "model": "gpt-5.2", "api_key": "k"},
        },
        "tiers": {"fast": "llada", "frontier": "big"},
    }
    # refused when the policy is loaded (and so by `tiered-router validate`), not at first use
    with pytest.raises(PolicyError, match="num_denoising_stepz") as info:
        load_policy(policy)
    assert info.value.field == "backends.llada.diffusion"
    policy["backends"]["llada"]["diffusion"] = {"num_denoising_steps": 8}  # type: ignore[index]
    assert Router(load_policy(policy)).backend("llada").name == "llada"
    with pytest.raises(ValueError, match="diffusion fields \\['x'\\]"):
        OpenAICompatBackend("b", model="m", dialect="dlmserve", diffusion={"x": 1})


def test_openai_profile_changes_nothing() -> None:
    sent = body(
        messages=[{"role": "developer", "content": [{"type": "text", "text": "x"}]}, CALL, RESULT],
        tools=[WEATHER],
        stop=["a"],
        stream_options={"include_usage": True},
        top_p=0.5,
    )
    out, plan = shape(DIALECTS["openai"], sent)
    assert out == sent and plan == Plan()
    assert not plan.buffers


def test_json_object_only_servers_get_the_schema_as_an_instruction() -> None:
    profile = resolve_dialect({"profile": "openai", "response_format": "json_object"})
    schema = {"type": "object", "required": ["a"]}
    out, plan = shape(
        profile,
        body(
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        ),
    )
    assert out["response_format"] == {"type": "json_object"}
    assert out["messages"][0]["role"] == "system"
    assert '{"type": "object", "required": ["a"]}' in out["messages"][0]["content"]
    assert plan.conversions == ("response_format json_schema -> json_object + schema instruction",)
    out, plan = shape(profile, body(response_format={"type": "text"}))
    assert "response_format" not in out and plan.conversions == ()


def test_prompted_json_joins_an_existing_system_message() -> None:
    sent = body(
        messages=[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, USER],
        response_format={"type": "json_object"},
    )
    out, plan = shape(DIALECTS["dlmserve"], sent)
    assert out["messages"][0]["content"].startswith("Be brief.\n\nReply with only a JSON object")
    assert "response_format json_object -> instruction" in plan.conversions
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "Be brief."}]


def test_tool_choice_none_hides_the_tools_and_keeps_the_history_readable() -> None:
    out, plan = shape(
        DIALECTS["dlmserve"],
        body(messages=[USER, CALL, RESULT], tools=[WEATHER], tool_choice="none"),
    )
    assert "tool_choice" not in out and "tools" not in out
    assert not plan.tools and "tools: not described (tool_choice none)" in plan.conversions
    assert out["messages"][1] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    }
    assert out["messages"][2] == {
        "role": "user",
        "content": '<tool_result name="get_weather" id="call_1">{"temp_c": 18}</tool_result>',
    }


def test_named_tool_choice_becomes_an_instruction() -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    out, plan = shape(DIALECTS["sglang"], body(tools=[WEATHER, TIME], tool_choice=choice))
    assert "You must call the tool get_time now." in out["messages"][0]["content"]
    assert 'tool_choice {"type": "function", "function": {"name": "get_time"}} -> instruction' in (
        plan.conversions
    )
    assert [t.name for t in plan.tools] == ["get_weather", "get_time"]


def test_unknown_roles_and_plain_messages() -> None:
    with pytest.raises(CapabilityError, match="role 'critic' is not accepted by the dlmserve"):
        shape(
            DIALECTS["dlmserve"], body(messages=[{"role": "critic", "content": "x"}]), backend="b"
        )
    out, plan = shape(
        DIALECTS["dlmserve"], body(messages=[{"role": "user", "content": None, "name": "ada"}])
    )
    assert out["messages"] == [{"role": "user", "content": ""}]
    assert "message fields dropped: name" in plan.conversions


@pytest.mark.parametrize(
    ("profile", "fields", "what"),
    [
        (
            "dlmserve",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE_PART]}
                ]
            },
            "images",
        ),
        ("mercury-2", {"messages": [{"role": "user", "content": ["plain", IMAGE_PART]}]}, "images"),
        ({"profile": "openai", "tools": "none"}, {"tools": [WEATHER]}, "tools"),
        (
            {"profile": "openai", "response_format": "none"},
            {"response_format": {"type": "json_object"}},
            "response_format",
        ),
        ("dlmserve", {"n": 3}, "n"),
    ],
)
def test_capability_gaps(profile: Any, fields: dict[str, Any], what: str) -> None:
    resolved = resolve_dialect(profile)
    sent = body(**fields)
    gap = capability_gap(
        resolved,
        messages=sent["messages"],
        tools=sent.get("tools"),
        response_format=sent.get("response_format"),
        params=sent,
    )
    assert gap is not None and gap[0] == what
    with pytest.raises(CapabilityError) as info:
        shape(resolved, sent, backend="b")
    assert str(info.value) == f"b: {gap[1]}"


def test_nothing_to_do_for_plain_text_and_n_of_one() -> None:
    out, plan = shape(DIALECTS["dlmserve"], body(n=1, max_completion_tokens=9))
    assert "n" not in out and out["max_tokens"] == 9
    assert plan.conversions == ("max_completion_tokens -> max_tokens",)
    gap = capability_gap(DIALECTS["openai"], messages=[{"role": "user", "content": [IMAGE_PART]}])
    assert gap is None


def test_plan_finishes_replies() -> None:
    tools = (ToolSpec(name="get_weather"),)
    plan = Plan(conversions=("c",), stop=("END",), tools=tools)
    assert plan.buffers
    done = plan.finish(Completion(text="Sunny.END extra", finish_reason="length"))
    assert (done.text, done.finish_reason, done.conversions) == ("Sunny.", "stop", ("c",))
    call = plan.finish(Completion(text='[get_weather(city="x")]'))
    assert call.finish_reason == "tool_calls" and call.tool_calls[0].name == "get_weather"
    assert call.tool_calls[0].id.startswith("call_") and call.text == ""
    native = Completion(tool_calls=(ToolCall(id="1", name="get_weather"),), text="hm")
    assert plan.finish(native).tool_calls == native.tool_calls
    same = Completion(text="x")
    assert Plan().finish(same) is same
    chunk = plan.finish_chunks(
        [
            CompletionChunk(text='<tool_call>{"name": "get_weather", '),
            CompletionChunk(text='"arguments": {}}'),
        ],
        backend="b",
    )
    assert chunk.tool_calls[0].name == "get_weather" and chunk.finish_reason == "tool_calls"
    assert Plan().mark(CompletionChunk(text="a")) == CompletionChunk(text="a")
    assert plan.mark(CompletionChunk(text="a")).conversions == ("c",)


# -- the router --------------------------------------------------------------------------------


def _dlm_policy(server: ScriptedServer) -> dict[str, Any]:
    policy = make_policy(server)
    policy["backends"]["fast"] = {"preset": "dlmserve", "base_url": server.base_url}
    policy["scoring"] = {"threshold": 1.0}
    return policy


def test_decide_sends_what_the_fast_dialect_cannot_express_to_the_frontier(
    server: ScriptedServer,
) -> None:
    router = Router(_dlm_policy(server))
    image = Turn([{"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE_PART]}])
    decision = router.decide(image)
    assert decision.tier == "frontier" and decision.rule == "capability.images"
    assert decision.reasons[0].startswith("fast messages[0].content[1] is a 'image_url' part")
    # prompted tools: a tool turn stays on the fast tier
    assert router.decide(Turn([USER], tools=[WEATHER])).tier == "fast"
    assert router.decide(Turn([USER], params={"n": 2})).rule == "capability.n"
    server.script([Reply.text("a picture")])
    result = router.complete(image)
    assert result.tier == "frontier" and not result.escalated
    assert [a.backend for a in result.trace.attempts] == ["frontier"]
    router.close()


def test_a_capability_error_at_call_time_escalates(server: ScriptedServer) -> None:
    # a wrapper the router cannot see into: the dlmserve backend refuses before any call
    sink = MemorySink()
    inner = OpenAICompatBackend("fast", model="m", base_url=server.base_url, dialect="dlmserve")
    fast = FunctionBackend("fast", inner.complete, kind="diffusion")
    router = Router(
        make_policy(server, scoring={"threshold": 1.0}), backends={"fast": fast}, sinks=[sink]
    )
    server.script([Reply.text("frontier answer")])
    result = router.complete(Turn([USER], params={"n": 2}))
    assert result.tier == "frontier" and result.escalated
    error = result.trace.attempts[0].error
    assert error is not None and error["type"] == "CapabilityError"
    assert "n=2" in error["message"]
    assert len(server.requests) == 1 and server.requests[0].body["model"] == "frontier-model"
    assert sink.traces[-1].escalations == ("backend_error",)
    router.close()
    inner.close()


def test_from_preset_builds_any_preset() -> None:
    llada = from_preset("dlmserve", diffusion={"num_denoising_steps": 32})
    assert (llada.name, llada.model, llada.dialect.name) == (
        "dlmserve",
        "gsai-ml/LLaDA-8B-Instruct",
        "dlmserve",
    )
    assert llada.base_url == "http://127.0.0.1:8000/v1" and llada.supports_tools
    gemma = from_preset("vllm", name="gemma", model="google/diffusion-gemma")
    assert gemma.name == "gemma" and gemma.kind == "diffusion"
    with pytest.raises(PolicyError, match="model"):
        from_preset("sglang")


def test_the_dlmserve_example_policy_builds_a_dlmserve_backend() -> None:
    path = Path(__file__).resolve().parents[1] / "examples" / "dlmserve.yaml"
    policy = load_policy(path, env={"OPENAI_API_KEY": "sk-test-0123456789"})
    router = Router(policy)
    llada = router.backend("llada")
    assert isinstance(llada, OpenAICompatBackend)
    assert (llada.dialect.name, llada.base_url, llada.model) == (
        "dlmserve",
        "http://127.0.0.1:8000/v1",
        "gsai-ml/LLaDA-8B-Instruct",
    )
    assert llada.supports_tools and llada.kind == "diffusion"
    config = router.backend_config("llada")
    assert config is not None and config.diffusion["num_denoising_steps"] == 64
    assert config.latency == DIALECTS["dlmserve"].latency
    # prompted tools keep tool turns on the fast tier; an image cannot go there
    assert router.decide(Turn([USER], tools=[WEATHER])).tier == "fast"
    image = Turn([{"role": "user", "content": [IMAGE_PART]}])
    assert router.decide(image).rule == "capability.images"
    router.close()


def test_every_backend_in_docs_backends_md_builds() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    built = []
    for block in blocks:
        data = yaml.safe_load(block)
        names = list(data["backends"])
        policy = load_policy(
            {"version": 1, **data, "tiers": {"fast": names[0], "frontier": names[0]}},
            env={"INCEPTION_API_KEY": "sk-test-0123456789", "VLLM_MODEL": "gemma"},
        )
        router = Router(policy)
        for name in names:
            built.append((name, router.backend(name).dialect.name))  # type: ignore[attr-defined]
        router.close()
    assert built == [
        ("gemma", "vllm*"),
        ("gemma", "vllm"),
        ("llada2", "sglang"),
        ("sgemma", "sglang-gemma"),
        ("sdar", "lmdeploy"),
        ("dlx", "diffulex"),
        ("shelf", "ollada"),
        ("dfast", "dfastllm"),
        ("llada", "dlmserve"),
        ("mercury", "mercury-2"),
        ("llada", "sglang"),
    ]


def test_parallel_results_share_one_user_message() -> None:
    calls = [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    messages = [
        USER,
        {"role": "assistant", "content": "Both.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "7 C"},
        {"role": "tool", "tool_call_id": "b", "content": "12:00"},
        {"role": "user", "content": "thanks"},
    ]
    out, plan = shape(DIALECTS["dlmserve"], body(messages=messages))
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user", "user"]
    assert out["messages"][1]["content"].startswith("Both.\n<tool_call>")
    assert out["messages"][2]["content"] == (
        '<tool_result name="get_weather" id="a">7 C</tool_result>\n'
        '<tool_result name="get_time" id="b">12:00</tool_result>'
    )
    assert plan.conversions[:2] == (
        "history: 2 assistant tool call(s) -> text",
        "history: 2 tool result(s) -> user text",
    )
