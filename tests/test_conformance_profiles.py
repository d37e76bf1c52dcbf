"""Every profile's requests, checked against its server's own code (or a cited rule table).

Each of the 15 agent-turn shapes (``agent_shapes``) is sent, completing and streaming, through
a backend built from the profile's preset to the scripted server; the body as it left over
HTTP is then checked:

- SGLang 0.5.23 (LLaDA2/SDAR and DiffusionGemma): its own ``ChatCompletionRequest``; for
  DiffusionGemma, its own ``to_sampling_params`` and then Gemma4Renoise's rules (a table);
- LMDeploy 0.18.0: its own request model and ``check_request``;
- dfastllm 0.0.4: its own request model;
- ollada 0.3.0: its own request model (and its real app below, over HTTP);
- vLLM 0.34.0, Diffulex, Mercury 2: the rule tables of ``server_rules`` (file and lines cited);
- the generic ``openai`` profile (OpenAI's API itself, and servers that take its fields as
  they are): the openai SDK's own request type, ``CompletionCreateParams`` (its streaming and
  non-streaming ``TypedDict``), validated by pydantic, with no key it does not declare;
- dlmserve: ``test_conformance_dlmserve.py``.

Each server also gets its negative control: the same shapes sent unshaped (the generic
``openai`` profile) are refused, or silently not honoured, by the same checks.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import server_rules as rules
from agent_shapes import SHAPES, USER, WEATHER, request
from server_kits import dfastllm_refusal, lmdeploy_refusal, serve_ollada
from sglang_kit import load_protocol as load_sglang
from sglang_kit import validate as sglang_validate

from tiered_router import Router, Turn
from tiered_router.backends import CompletionRequest, OpenAICompatBackend
from tiered_router.backends._dialect import OPENAI_FIELDS, TOOL_FIELDS, DialectProfile
from tiered_router.backends._profiles import DIALECTS
from tiered_router.backends.presets import PRESETS
from tiered_router.backends.registry import build_backend
from tiered_router.policy import BackendConfig
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import assemble

KEY = "sk-test-0123456789"
_open: list[OpenAICompatBackend] = []


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def make(preset: str, base_url: str, **fields: Any) -> OpenAICompatBackend:
    fields.setdefault("model", "mercury-2" if preset == "mercury-2" else "served-model")
    # the openai-api profile is the openai preset's; the generic openai profile is that of
    # an endpoint no preset knows
    name = {"openai-api": "openai", "openai": None}.get(preset, preset)
    backend = build_backend(
        "b",
        BackendConfig(preset=name, base_url=base_url, **fields),
        env={"INCEPTION_API_KEY": KEY, "OPENAI_API_KEY": KEY},
    )
    assert isinstance(backend, OpenAICompatBackend)
    _open.append(backend)
    return backend


def sent(server: ScriptedServer, backend: OpenAICompatBackend, shape: Any, stream: bool) -> Any:
    server.script([Reply.text("ok", chunks=1)])
    if stream:
        done = assemble(list(backend.stream(request(shape))))
    else:
        done = backend.complete(request(shape))
    assert done.text == "ok"
    return server.requests[-1].body


# -- what each server says about a body ('' or [] when it takes it) ----------------------------


def _sglang(body: dict[str, Any]) -> list[str]:
    sglang_validate(body)  # raises on anything its request model refuses
    return rules.refusals(rules.SGLANG_GREEDY_IGNORED, body)


def _sglang_gemma(body: dict[str, Any]) -> list[str]:
    parsed = sglang_validate(body)
    stop = parsed.stop if isinstance(parsed.stop, list) else [parsed.stop] if parsed.stop else []
    with warnings.catch_warnings():
        # SGLang's own code reads its deprecated max_tokens field
        warnings.simplefilter("ignore", DeprecationWarning)
        sampling = parsed.to_sampling_params(stop, {})
    return rules.sglang_gemma(sampling, body)


def _ollada(body: dict[str, Any]) -> list[str]:
    from server_kits import package_dir

    package_dir("ollada")
    from ollada.server import OpenAIChatRequest

    OpenAIChatRequest.model_validate(body)
    # everything but model, messages and options is ignored (ollada/server.py:37-40)
    return sorted(set(body) - {"model", "messages", "options"})


def _materialised(value: Any) -> Any:
    """``value`` with pydantic's lazy ``ValidatorIterator``s (``Iterable[...]`` fields) run."""
    if isinstance(value, Iterator):  # pydantic's lazy validator of an Iterable[...] field
        return [_materialised(v) for v in value]
    if isinstance(value, dict):
        return {k: _materialised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialised(v) for v in value]
    return value


def _openai(body: dict[str, Any]) -> list[str]:
    """The openai SDK's request type for ``body``: raises on a wrong value, names unknown keys.

    A ``TypedDict`` lets unknown keys through pydantic, so they are named here; the ones the
    API would take are only those the SDK's type declares (``extra_body`` aside, which is the
    caller's own business and no shape uses).
    """
    import typing

    from openai.types import chat
    from openai.types.chat import completion_create_params as params
    from pydantic import TypeAdapter

    kind = params.CompletionCreateParamsStreaming
    if not body.get("stream"):
        kind = params.CompletionCreateParamsNonStreaming  # type: ignore[assignment]
    # each message against the SDK's type for its role: pydantic-core 2.x panics on the
    # lazy content-part iterables inside the ChatCompletionMessageParam union
    by_role: dict[str, Any] = {
        "system": chat.ChatCompletionSystemMessageParam,
        "developer": chat.ChatCompletionDeveloperMessageParam,
        "user": chat.ChatCompletionUserMessageParam,
        "assistant": chat.ChatCompletionAssistantMessageParam,
        "tool": chat.ChatCompletionToolMessageParam,
    }
    for message in body["messages"]:
        _materialised(TypeAdapter(by_role[message["role"]]).validate_python(message))
    _materialised(TypeAdapter(kind).validate_python({**body, "messages": []}))
    return sorted(set(body) - set(typing.get_type_hints(kind)))


def _openai_vendor(body: dict[str, Any]) -> list[str]:
    """The generic profile sends a caller's vendor fields on purpose (unknown server)."""
    return [k for k in _openai(body) if k in OPENAI_FIELDS]


CHECKS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "openai-api": _openai,
    "openai": _openai_vendor,
    "vllm": lambda b: rules.refusals(rules.VLLM + rules.VLLM_IGNORED, b),
    "sglang": _sglang,
    "sglang-gemma": _sglang_gemma,
    "lmdeploy": lmdeploy_refusal,
    "diffulex": lambda b: rules.refusals(rules.DIFFULEX + rules.DIFFULEX_IGNORED, b),
    "ollada": _ollada,
    "dfastllm": dfastllm_refusal,
    "mercury-2": lambda b: rules.refusals(rules.MERCURY + rules.MERCURY_IGNORED, b),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("profile", sorted(CHECKS))
def test_every_shaped_request_is_taken_by_the_server(
    server: ScriptedServer, profile: str, shape: Any, stream: bool
) -> None:
    if profile == "sglang" or profile == "sglang-gemma":
        load_sglang()  # skips when SGLang is not installed
    body = sent(server, make(profile, server.base_url), shape, stream)
    assert not CHECKS[profile](body), body


# -- the negative controls: the same shapes, unshaped ------------------------------------------

REFUSED_RAW = {
    # shapes the server refuses (or silently does not honour) when sent as OpenAI sends them
    "vllm": {"stop", "json_object", "json_schema", "openai_extras", "named_messages"},
    "sglang": {"stop", "json_object", "tool_choice_required", "named_messages"},
    "sglang-gemma": {"json_object", "json_schema", "tool_choice_required", "openai_extras"},
    "lmdeploy": {"tools", "tool_history", "openai_extras"},
    "diffulex": {"content_parts", "json_object", "tools", "stop"},
    "ollada": {"stop", "tools", "json_object", "openai_extras"},
    "dfastllm": {"content_parts", "developer"},
    "mercury-2": {"developer", "stop", "tool_choice_named", "openai_extras"},
}


def _refused(profile: str, body: dict[str, Any]) -> bool:
    from pydantic import ValidationError

    try:
        return bool(CHECKS[profile](body))
    except ValidationError:
        return True


@pytest.mark.parametrize("profile", sorted(REFUSED_RAW))
def test_the_unshaped_requests_are_refused(server: ScriptedServer, profile: str) -> None:
    if profile.startswith("sglang"):
        load_sglang()
    raw = OpenAICompatBackend("raw", model="served-model", base_url=server.base_url, api_key=KEY)
    _open.append(raw)
    refused = set()
    for shape in SHAPES:
        if _refused(profile, sent(server, raw, shape, False)):
            refused.add(shape[0])
    assert REFUSED_RAW[profile] <= refused, sorted(refused)


# -- every profile declares what it sends ------------------------------------------------------


def _declared(profile: DialectProfile) -> set[str]:
    allowed = {"model", "messages", "stream", *profile.params, *profile.forced}
    allowed |= {profile.diffusion_container or "", profile.options_field or ""}
    if profile.diffusion_container is None and profile.options_field is None:
        allowed |= profile.diffusion_params
    if profile.tools == "native":
        allowed |= {"tools", "tool_choice"}
    if profile.response_format in ("json_schema", "json_object"):
        allowed.add("response_format")
    if profile.stop:
        allowed.add("stop")
    if profile.stream_options:
        allowed.add("stream_options")
    return allowed - {""}


@pytest.mark.parametrize("name", sorted(set(DIALECTS) - {"openai"}))
def test_no_profile_sends_a_field_it_does_not_list(name: str) -> None:
    from tiered_router.backends._dialect_shape import shape

    profile = DIALECTS[name]
    assert profile.params, f"{name} declares no allowlist"
    extras = {"num_denoising_steps": 8, "diffusion_max_steps": 8, "mystery": 1, "top_k": 5}
    for case in SHAPES:
        _, messages, tools, response_format, params = case
        body = {"model": "m", "messages": messages, "stream": True, **params, **extras}
        if tools:
            body["tools"] = tools
        if response_format:
            body["response_format"] = response_format
        out, plan = shape(profile, body)
        assert set(out) <= _declared(profile), (name, case[0], set(out) - _declared(profile))
        gone = set(body) - set(out) - set(TOOL_FIELDS) - {"response_format", "stop"}
        nested = set(out.get(profile.diffusion_container or "") or {})
        nested |= set(out.get(profile.options_field or "") or {})
        for key in gone - nested - {"max_completion_tokens", "stream", "n"}:
            assert any(key in note for note in plan.conversions), (name, key, plan.conversions)


# -- field rules the servers' code makes ------------------------------------------------------


def test_vllm_pins_temperature_nests_diffusion_fields_and_keeps_images(
    server: ScriptedServer,
) -> None:
    backend = make("vllm", server.base_url, diffusion={"diffusion_max_steps": 16})
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
    server.script([Reply.text("ok")])
    done = backend.complete(
        CompletionRequest(
            messages=[{"role": "user", "content": [{"type": "text", "text": "?"}, image]}],
            params={"temperature": 0, "seed": 3, "vllm_xargs": {"steps": 4}},
            timeout_s=5,
        )
    )
    body = server.requests[-1].body
    assert body["temperature"] == 1.0 and "seed" not in body
    assert body["vllm_xargs"] == {"diffusion_max_steps": 16}
    assert body["messages"][0]["content"][1] == image  # DiffusionGemma takes images
    assert "temperature: 0 -> 1.0 (the server accepts 1.0..1.0)" in done.conversions
    assert "vllm_xargs: dropped steps (the server ignores them)" in done.conversions
    from tiered_router.exceptions import PolicyError

    with pytest.raises(PolicyError, match="known: diffusion_canvas_length"):
        make("vllm", server.base_url, diffusion={"steps": 8})
    with pytest.raises(PolicyError, match="response_format cannot be changed"):
        make(
            "vllm",
            server.base_url,
            options={"dialect": {"profile": "vllm", "response_format": "json_schema"}},
        )


def test_openai_api_drops_a_vendor_field_its_api_would_refuse(server: ScriptedServer) -> None:
    """A caller's field for another tier never reaches api.openai.com to fail the frontier.

    The openai preset's profile (``openai-api``) sends only what the SDK's request type
    declares; an endpoint no preset knows (the generic ``openai`` profile) still gets a
    caller's vendor fields, as the SDK's ``extra_body`` would send them.
    """
    params = {"temperature": 0.2, "num_denoising_steps": 16, "top_k": 5}
    bodies, conversions = {}, {}
    for profile in ("openai-api", "openai"):
        server.script([Reply.text("ok")])
        done = make(profile, server.base_url).complete(
            CompletionRequest(messages=[USER], params=params, timeout_s=5)
        )
        bodies[profile], conversions[profile] = server.requests[-1].body, done.conversions
    assert _openai(bodies["openai-api"]) == []
    assert bodies["openai-api"]["temperature"] == 0.2
    assert any("num_denoising_steps" in c and "top_k" in c for c in conversions["openai-api"])
    assert _openai(bodies["openai"]) == ["num_denoising_steps", "top_k"]  # sent on purpose
    assert PRESETS["openai"].dialect == "openai-api"
    # the escape hatch backends.md gives for a field newer than the SDK: the generic profile
    server.script([Reply.text("ok")])
    make("openai-api", server.base_url, options={"dialect": "openai"}).complete(
        CompletionRequest(messages=[USER], params={"brand_new_field": 1}, timeout_s=5)
    )
    assert server.requests[-1].body["brand_new_field"] == 1


def test_openai_fields_are_the_sdks_request_fields() -> None:
    """OPENAI_FIELDS is what the installed SDK's request type declares, frame aside."""
    import typing

    from openai.types.chat import completion_create_params as params

    declared = set(typing.get_type_hints(params.CompletionCreateParamsStreaming))
    assert declared - {"model", "messages", "stream"} == set(OPENAI_FIELDS)


def test_the_openai_sdk_check_refuses_what_the_sdk_type_refuses() -> None:
    """The negative control of the openai checks: a wrong value raises, an unknown key is named."""
    from pydantic import ValidationError

    good = {"model": "m", "messages": [USER]}
    assert _openai(good) == []
    assert _openai({**good, "num_keep": 4}) == ["num_keep"]
    with pytest.raises(ValidationError):
        _openai({**good, "messages": [{"role": "user", "content": 3}]})
    with pytest.raises(ValidationError):
        _openai({**good, "tool_choice": {"type": "function"}})


def test_sglang_declares_greedy_decoding_and_one_slot(server: ScriptedServer) -> None:
    profile = DIALECTS["sglang"]
    assert profile.greedy and profile.max_concurrency == 1
    assert not DIALECTS["sglang-gemma"].greedy and DIALECTS["sglang-gemma"].canvas_tokens == 256
    backend = make("sglang", server.base_url)
    server.script([Reply.text("ok")])
    done = backend.complete(
        CompletionRequest(messages=[USER], params={"temperature": 0.2, "top_p": 0.9}, timeout_s=5)
    )
    assert "temperature" not in server.requests[-1].body
    assert "temperature, top_p not sent: the server decodes greedily" in done.conversions


def test_mercury_raises_instant_effort_on_tool_turns_only(server: ScriptedServer) -> None:
    backend = make("mercury-2", server.base_url)
    server.script([Reply.text("ok"), Reply.text("ok")])
    done = backend.complete(
        CompletionRequest(
            messages=[USER],
            tools=[WEATHER],
            params={"reasoning_effort": "instant", "n": 1, "top_p": 0.5, "user": "u"},
            timeout_s=5,
        )
    )
    body = server.requests[-1].body
    assert body["reasoning_effort"] == "low"
    assert not {"n", "top_p", "user"} & set(body)
    assert "reasoning_effort instant -> low on a tool turn (instant has no tool calls)" in (
        done.conversions
    )
    backend.complete(
        CompletionRequest(messages=[USER], params={"reasoning_effort": "instant"}, timeout_s=5)
    )
    assert server.requests[-1].body["reasoning_effort"] == "instant"
    assert DIALECTS["mercury-2"].multiple_choices is False


def test_dlmserve_always_gets_max_tokens(server: ScriptedServer) -> None:
    backend = make("dlmserve", server.base_url)
    server.script([Reply.text("ok")])
    done = backend.complete(CompletionRequest(messages=[USER], timeout_s=5))
    assert server.requests[-1].body["max_tokens"] == 256
    assert "max_tokens: not given -> 256 (the turn's estimate)" in done.conversions


def test_dlmserve_gets_the_turns_estimate_through_the_router(server: ScriptedServer) -> None:
    policy = {
        "version": 1,
        "backends": {
            "llada": {"preset": "dlmserve", "base_url": server.base_url},
            "big": {"base_url": server.base_url, "model": "big", "api_key": KEY},
        },
        "tiers": {"fast": "llada", "frontier": "big"},
        "scoring": {"threshold": 1.0},
        "task": {"expected_output_tokens": 96},
    }
    server.script([Reply.text("ok"), Reply.text("ok")])
    with Router(policy) as router:
        result = router.complete(Turn(messages=[USER]))
        router.complete(Turn(messages=[USER], params={"max_tokens": 40}))
    assert result.tier == "fast"
    assert [r.body["max_tokens"] for r in server.requests] == [96, 40]
    assert "max_tokens: not given -> 96 (the turn's estimate)" in (
        result.trace.attempts[0].conversions
    )


def test_diffulex_streams_in_block_append_mode(server: ScriptedServer) -> None:
    backend = make("diffulex", server.base_url, diffusion={"max_nfe": 64})
    server.script([Reply.text("ok", chunks=2)])
    done = assemble(
        list(backend.stream(CompletionRequest(messages=[USER], params={"stream_mode": "denoise"})))
    )
    body = server.requests[-1].body
    assert body["stream_mode"] == "block_append" and body["max_nfe"] == 64
    assert "stream_mode: 'denoise' -> 'block_append' (forced by the diffulex dialect)" in (
        done.conversions
    )


# -- streams the router did not expect ---------------------------------------------------------


def _sse(*events: Mapping[str, Any]) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def test_diffulex_denoise_snapshots_are_read_for_their_final_text(server: ScriptedServer) -> None:
    # diffulex/server/api_server.py:276-292: what a denoise-mode stream carries
    base = {"object": "diffulex.chat.completion.denoise", "id": "chatcmpl-1", "model": "m"}
    server.script(
        [
            Reply.raw(
                200,
                _sse(
                    {**base, "event": "buffer_snapshot", "text": "Th[M][M]", "token_ids": [1]},
                    {**base, "event": "append", "text": "The", "token_offset": 0},
                    {**base, "event": "final", "text": "The answer.", "finish_reason": "stop"},
                ),
                headers={"content-type": "text/event-stream"},
            )
        ]
    )
    backend = OpenAICompatBackend("d", model="m", base_url=server.base_url, dialect="diffulex")
    _open.append(backend)
    chunks = list(backend.stream(CompletionRequest(messages=[USER], timeout_s=5)))
    done = assemble(chunks)
    assert done.text == "The answer." and done.finish_reason == "stop"


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_ollada_through_its_own_app(streaming: bool) -> None:
    with serve_ollada("It is 18 C. END more") as app:
        backend = make("ollada", app.base_url, diffusion={"steps": 32})
        req = CompletionRequest(
            messages=[{"role": "developer", "content": "Be terse."}, USER],
            tools=[WEATHER],
            params={"max_tokens": 64, "temperature": 0.2, "stop": ["END"]},
            timeout_s=10,
        )
        if streaming:
            chunks = list(backend.stream(req))
            done = assemble(chunks)
        else:
            done = backend.complete(req)
    assert done.text == "It is 18 C. " and done.finish_reason == "stop"
    (call,) = app.manager.calls
    assert call["overrides"] == {"gen_length": 64, "temperature": 0.2, "steps": 32}
    assert [m["role"] for m in call["messages"]] == ["system", "user"]
    assert "# Tools" in call["messages"][0]["content"]
    assert "options{}: max_tokens -> gen_length, steps, temperature" in done.conversions


def test_a_canvas_sized_delta_passes_whole(server: ScriptedServer) -> None:
    canvas = " ".join(f"w{i}" for i in range(256))  # one delta of 256 tokens
    server.script([Reply.text(canvas, chunks=1)], model="gemma")
    server.script([Reply.text("big")], model="big")
    policy = {
        "version": 1,
        "backends": {
            "gemma": {"preset": "vllm", "base_url": server.base_url, "model": "gemma"},
            "big": {"base_url": server.base_url, "model": "big", "api_key": KEY},
        },
        "tiers": {"fast": "gemma", "frontier": "big"},
        "scoring": {"threshold": 1.0},
        "gate": {"checks": ["non_empty", "not_truncated", "repetition"]},
    }
    with Router(policy) as router:
        stream = router.stream(Turn(messages=[USER]))
        chunks = [c for c in stream if c.text]
    assert stream.result.tier == "fast" and "".join(c.text for c in chunks) == canvas
    assert len(chunks) == 1


# -- the policies of docs/backends.md ---------------------------------------------------------


def _doc_backends() -> list[tuple[str, dict[str, Any]]]:
    import re
    from pathlib import Path

    import yaml

    page = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()
    out = []
    for block in re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL):
        for name, config in yaml.safe_load(block)["backends"].items():
            out.append((name, config))
    return out


@pytest.mark.parametrize(("name", "config"), _doc_backends(), ids=[n for n, _ in _doc_backends()])
def test_every_policy_in_the_docs_sends_what_its_server_takes(
    server: ScriptedServer, name: str, config: dict[str, Any]
) -> None:
    fields = {k: v for k, v in config.items() if k not in ("api_key",)}
    if isinstance(fields.get("model"), str) and fields["model"].startswith("${"):
        fields["model"] = "gemma"
    fields["base_url"] = server.base_url
    backend = build_backend(name, BackendConfig(**fields), env={"INCEPTION_API_KEY": KEY})
    assert isinstance(backend, OpenAICompatBackend)
    _open.append(backend)
    base = backend.dialect.name.rstrip("*")
    if base.startswith("sglang"):
        load_sglang()
    server.script([Reply.text("ok", chunks=1)])
    turn = CompletionRequest(
        messages=[{"role": "developer", "content": "Be terse."}, USER],
        tools=[WEATHER],
        params={"temperature": 0, "stop": ["END"], "max_completion_tokens": 64},
        timeout_s=5,
    )
    list(backend.stream(turn))
    body = server.requests[-1].body
    if base in CHECKS:
        assert not CHECKS[base](body), body
    else:  # dlmserve: test_conformance_dlmserve.py checks it with its own model
        assert base == "dlmserve" and set(body) <= {
            "model",
            "messages",
            "stream",
            "max_tokens",
            "temperature",
            *backend.dialect.diffusion_params,
        }
