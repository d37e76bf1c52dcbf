"""The dialect profiles of the servers tiered_router knows, each rule with its source.

A profile (:class:`~tiered_router.backends._dialect.DialectProfile`) is written from the
server's own code where it is published: the file and lines beside each rule are those of
the release named (read from its wheel, or from its repository at the commit named). The
conformance tests (``tests/test_conformance_*.py``) send every shaped request to the
server's own request model where it loads without a GPU, and through a table of these
rules where it does not.

Example:
    ```python
    from tiered_router.backends._profiles import resolve_dialect

    resolve_dialect({"profile": "vllm", "tools": "native"})   # started with a tool parser
    ```

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from types import MappingProxyType
from typing import Any, get_args

from tiered_router.backends._dialect import (
    _ALL_ROLES,
    CHAT_ROLES,
    OPENAI_FIELDS,
    ContentShape,
    DialectProfile,
    FormatMode,
    ToolMode,
)
from tiered_router.policy._schema import LatencyModel

__all__ = [
    "DIALECTS",
    "OPENAI_PARAMS",
    "VLLM_XARGS",
    "resolve_dialect",
]

OPENAI_PARAMS = OPENAI_FIELDS
"""OpenAI's chat-completions request fields (the openai SDK's ``create`` arguments)."""

VLLM_XARGS = frozenset(
    {
        # vllm 0.34.0 vllm/utils/diffusion.py lines 28, 41, 58, 74, 82, 96: the keys read
        # from vllm_xargs; any other key is silently ignored
        "diffusion_canvas_length",
        "diffusion_seed_canvas",
        "diffusion_pinned",
        "diffusion_max_steps",
        "diffusion_read_only",
        "diffusion_constrained",
    }
)
"""The per-request diffusion fields vLLM 0.34 (as 0.33) reads from ``vllm_xargs``."""

_BASIC = frozenset({"max_tokens", "max_completion_tokens", "stop", "stream_options"})

_DLMSERVE_DIFFUSION = frozenset(
    {
        "num_denoising_steps",
        "block_length",
        "block_schedule",
        "confidence_metric",
        "target_length",
        "attention_backend",
        "force_single_batch",
        "use_local_leap",
        "local_leap_anchor_threshold",
        "local_leap_neighbor_threshold",
        "local_leap_radius",
    }
)

_MERCURY = frozenset(
    {
        # Inception's documented and SDK-typed fields (PROVIDERS.md): no n, top_p, seed,
        # logprobs, penalties, parallel_tool_calls or user
        "max_tokens",
        "temperature",
        "stop",
        "stream_options",
        "tools",
        "tool_choice",
        "response_format",
        "reasoning_effort",
        "reasoning_summary",
        "reasoning_summary_wait",
        "realtime",
    }
)

_SGLANG_GEMMA = frozenset(
    {
        # sglang 0.5.23 sglang/srt/dllm/algorithm/gemma4_renoise.py lines 124-164 refuse
        # penalties, min_new_tokens, min_p, a sampling seed, logit_bias, JSON/regex/EBNF
        # constraints and every logprob option with a 400; these are not among them
        *_BASIC,
        "temperature",
        "top_p",
        "top_k",
    }
)

_VLLM = frozenset(
    {
        # vllm 0.34.0 vllm/sampling_params.py lines 1202-1222 refuse temperature != 1.0,
        # min_p, seed, min_tokens, logit_bias, bad_words, allowed_token_ids; lines
        # 1224-1244 refuse structured outputs (response_format JSON modes); penalties are
        # ignored by the diffusion sampler (line 1208), so not sent either (the rules of
        # 0.33.0, a few lines down)
        *_BASIC,
        "temperature",
        "top_p",
        "top_k",
    }
)

_LMDEPLOY = frozenset(
    {
        # lmdeploy 0.18.0 lmdeploy/serve/openai/protocol.py lines 171-257 (the request);
        # chat_completions/validation.py lines 12-115 (the checks). logprobs need a
        # server flag (lines 20-34), so they are not sent.
        *_BASIC,
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    }
)

_DFASTLLM = frozenset(
    {
        # dfastllm 0.0.4 dfastllm/entrypoints/openai/protocol.py lines 163-190
        "max_tokens",
        "stop",
        "temperature",
        "top_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
    }
)

_GENERIC = DialectProfile(
    name="openai",
    params=OPENAI_PARAMS,
    vendor_fields=True,
    latency=LatencyModel(ttft_s=0.5, tokens_per_s=100.0),
    checked="the openai SDK's own request types",
)

# Every local server's profile reads a stream that stops without a finish_reason as finished
# (unfinished_streams): some small servers send the whole answer in one chunk and stop.
DIALECTS: Mapping[str, DialectProfile] = MappingProxyType(
    {
        "openai": _GENERIC,
        # OpenAI's own API answers 400 "Unrecognized request argument supplied: <name>" to
        # any field outside its set (open-webui/open-webui#14520: num_keep;
        # xlinx/sd-webui-decadetw-auto-prompt-llm#29: top_k; coroot/coroot#698), so a vendor
        # field a caller adds for another tier (a diffusion server's num_denoising_steps) is
        # dropped and recorded, never sent to fail the frontier
        "openai-api": replace(
            _GENERIC,
            name="openai-api",
            vendor_fields=False,
            checked="the openai SDK's own request types, with no field they do not declare",
        ),
        "mercury-2": DialectProfile(
            name="mercury-2",
            roles=_ALL_ROLES - {"developer"},
            images=False,
            params=_MERCURY,
            # PROVIDERS.md: temperature 0.5..1.0, max_tokens 1..50,000, at most 4 stop
            # sequences, a named tool_choice answered with a 400
            ranges=MappingProxyType({"temperature": (0.5, 1.0), "max_tokens": (1, 50_000)}),
            max_stop=4,
            named_tool_choice=False,
            multiple_choices=False,
            tool_turn_effort="low",
            latency=LatencyModel(ttft_s=0.35, tokens_per_s=1000.0),
            checked="Inception's documented and SDK-typed field set (PROVIDERS.md): "
            "developer rejected, text only, instant mode has no tool calls",
        ),
        "dlmserve": DialectProfile(
            name="dlmserve",
            unfinished_streams=True,
            roles=CHAT_ROLES,
            content="text",
            images=False,
            plain_messages=True,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            params=frozenset({"temperature", "seed", "max_tokens"}),
            ranges=MappingProxyType({"temperature": (0.0, 2.0)}),
            multiple_choices=False,
            diffusion_params=_DLMSERVE_DIFFUSION,
            # the request model's default is 128 tokens; the turn's estimate (the policy's
            # task.expected_output_tokens) is sent instead, 256 without one
            default_max_tokens=256,
            max_concurrency=8,
            # LLaDA-8B-Instruct, INT4, batch 1 (dlmserve 0.1.1 README: 32.9 tok/s; 146.8 at
            # batch 8 with LocalLeap). The whole canvas arrives at once: ttft is the total.
            latency=LatencyModel(ttft_s=0.05, tokens_per_s=33.0),
            checked="dlmserve 0.1.1's own ChatCompletionRequest and its FastAPI app",
        ),
        "sglang": DialectProfile(
            # LLaDA2.x and SDAR (sglang 0.5.23 sglang/srt/dllm/config.py lines 52-61)
            name="sglang",
            unfinished_streams=True,
            # SGLang's model takes developer, but a diffusion model's chat template may not
            roles=_ALL_ROLES - {"developer"},
            images=False,
            tools="prompted",
            response_format="prompted",
            # greedy: dllm/algorithm/low_confidence.py line 35 and joint_threshold.py line
            # 58 take the argmax; temperature, top_p and top_k are accepted and ignored
            greedy=True,
            params=_BASIC,
            multiple_choices=False,
            fixed=frozenset({"greedy"}),
            # dllm/config.py lines 134-135: one running request unless the server says more
            max_concurrency=1,
            # block-diffusion models (LLaDA2.0-mini): whole blocks per step
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=400.0),
            checked="SGLang 0.5.23's own ChatCompletionRequest, and its dLLM rules "
            "(sglang/srt/dllm) in a table",
        ),
        "sglang-gemma": DialectProfile(
            # DiffusionGemma on SGLang (dllm/config.py lines 56-60: canvas 256, Gemma4Renoise)
            name="sglang-gemma",
            unfinished_streams=True,
            roles=_ALL_ROLES - {"developer"},
            tools="prompted",
            response_format="prompted",
            params=_SGLANG_GEMMA,
            multiple_choices=False,
            fixed=frozenset({"response_format"}),
            max_concurrency=1,
            canvas_tokens=256,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=158.0),
            checked="SGLang 0.5.23's own ChatCompletionRequest, and Gemma4Renoise's "
            "validate_request in a table",
        ),
        "vllm": DialectProfile(
            # vLLM 0.34 (as 0.33) serves one diffusion family, DiffusionGemma; its `tools: []`
            # (accepted since 0.34) is never sent: a turn without tools sends no tools key
            name="vllm",
            unfinished_streams=True,
            roles=_ALL_ROLES - {"developer"},
            tools="prompted",
            response_format="prompted",
            params=_VLLM,
            ranges=MappingProxyType({"temperature": (1.0, 1.0)}),
            multiple_choices=False,
            diffusion_params=VLLM_XARGS,
            diffusion_container="vllm_xargs",
            fixed=frozenset({"response_format", "ranges", "diffusion_params"}),
            # at most 8 sequences at once; a short reply costs a whole 256-token canvas
            # (PROVIDERS.md: about 16 tok/s for short replies, 158 for long ones)
            max_concurrency=8,
            canvas_tokens=256,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=158.0),
            checked="vLLM 0.34.0's diffusion and tool rules (vllm/sampling_params.py, "
            "vllm/utils/diffusion.py, chat_completion/protocol.py) in a table",
        ),
        "lmdeploy": DialectProfile(
            # SDAR on LMDeploy: OpenAI's surface; tools native only with --tool-call-parser
            name="lmdeploy",
            unfinished_streams=True,
            roles=_ALL_ROLES - {"developer"},
            content="text",
            images=False,
            tools="prompted",
            response_format="prompted",
            params=_LMDEPLOY,
            ranges=MappingProxyType({"temperature": (0.0, 2.0), "top_p": (1e-9, 1.0)}),
            multiple_choices=False,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=200.0),
            checked="LMDeploy 0.18.0's own ChatCompletionRequest and check_request",
        ),
        "diffulex": DialectProfile(
            # Diffulex (SJTU-DENG-Lab/Diffulex at 184ba97) diffulex/server/api_server.py
            # lines 38-53: messages {role, content: str}, max_tokens, temperature, max_nfe,
            # max_repetition_run, ignore_eos, stream, stream_mode, user
            name="diffulex",
            unfinished_streams=True,
            roles=CHAT_ROLES,
            content="text",
            images=False,
            plain_messages=True,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            params=frozenset({"max_tokens", "temperature"}),
            multiple_choices=False,
            diffusion_params=frozenset({"max_nfe", "max_repetition_run", "ignore_eos"}),
            # lines 225-231: the default stream_mode "denoise" streams snapshot events that
            # are not chat.completion.chunk; block_append streams OpenAI chunks
            forced=MappingProxyType({"stream_mode": "block_append"}),
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=100.0),
            checked="Diffulex's api_server.py request model and stream modes in a table",
        ),
        "ollada": DialectProfile(
            # ollada 0.3.0 ollada/server.py lines 37-40 (model, messages, options) and
            # 101-116 (a JSON answer, whatever the request's stream says)
            name="ollada",
            unfinished_streams=True,
            roles=CHAT_ROLES,
            content="text",
            images=False,
            plain_messages=True,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            params=frozenset({"max_tokens", "temperature", "top_p"}),
            multiple_choices=False,
            # the adapters read these from options (adapters/sdar.py lines 988-995,
            # dream.py 50-53, diffcoder.py 88-95)
            diffusion_params=frozenset(
                {"steps", "denoising_steps", "block_length", "threshold", "remasking"}
                | {"confidence_threshold"}
            ),
            options_field="options",
            options_names=MappingProxyType({"max_tokens": "gen_length"}),
            streams=False,
            max_concurrency=1,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=30.0),
            checked="ollada 0.3.0's own FastAPI app (fake model manager)",
        ),
        "dfastllm": DialectProfile(
            name="dfastllm",
            unfinished_streams=True,
            roles=CHAT_ROLES,
            content="text",
            images=False,
            tools="prompted",
            response_format="prompted",
            stream_options=False,
            params=_DFASTLLM,
            # protocol.py lines 168-175: temperature 0..2, top_p 0..1, max_tokens 1..16384
            ranges=MappingProxyType(
                {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "max_tokens": (1, 16384)}
            ),
            multiple_choices=False,
            diffusion_params=frozenset({"parallel_decoding", "confidence_threshold"}),
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=100.0),
            checked="dfastllm 0.0.4's own ChatCompletionRequest",
        ),
        "local-diffusion": DialectProfile(
            # the fallback for a server with no profile: only what every OpenAI-shaped
            # server takes
            name="local-diffusion",
            unfinished_streams=True,
            roles=CHAT_ROLES,
            content="text",
            images=False,
            plain_messages=True,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            params=frozenset({"max_tokens", "temperature"}),
            multiple_choices=False,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=100.0),
            checked="fallback: model, messages (text), stream, max_tokens, temperature",
        ),
    }
)
"""Dialect profiles by name, as written in ``options.dialect``."""

_OVERRIDABLE = {
    f.name for f in fields(DialectProfile) if f.name not in ("name", "latency", "checked")
}


def resolve_dialect(value: DialectProfile | str | Mapping[str, Any]) -> DialectProfile:
    """Return the profile for a name, a profile, or ``{profile: NAME, field: value, ...}``.

    A mapping starts from the named profile (``openai`` by default) and replaces the fields
    it gives: ``{profile: vllm, tools: native}`` for a vLLM started with a tool parser.

    Raises:
        ValueError: An unknown profile name, field or value, or a field the server's code
            fixes (``{profile: vllm, response_format: json_schema}``: vLLM refuses JSON
            modes for diffusion models); the message lists the known ones.

    """
    if isinstance(value, DialectProfile):
        return value
    if isinstance(value, str):
        base_name, changes = value, {}
    elif isinstance(value, Mapping):
        changes = dict(value)
        base_name = str(changes.pop("profile", "openai"))
    else:
        raise ValueError(f"a dialect is a name or a mapping, got {type(value).__name__}")
    try:
        base = DIALECTS[base_name]
    except KeyError:
        raise ValueError(
            f"unknown dialect {base_name!r}; known: {', '.join(sorted(DIALECTS))}"
        ) from None
    if not changes:
        return base
    unknown = sorted(set(changes) - _OVERRIDABLE)
    if unknown:
        raise ValueError(f"unknown dialect fields {unknown}; known: {sorted(_OVERRIDABLE)}")
    refused = sorted(k for k in changes if k in base.fixed and changes[k] != getattr(base, k))
    if refused:
        raise ValueError(
            f"dialect {base_name}: {', '.join(refused)} cannot be changed: the server "
            f"refuses or ignores it (see docs/backends.md)"
        )
    for key, allowed in (
        ("tools", ToolMode),
        ("response_format", FormatMode),
        ("content", ContentShape),
    ):
        if key in changes and changes[key] not in get_args(allowed):
            raise ValueError(f"dialect {key}: {changes[key]!r} is not one of {get_args(allowed)}")
    for key in ("roles", "params", "diffusion_params", "fixed"):
        if key in changes:
            if changes[key] is None:
                raise ValueError(f"dialect {key}: give a list of names (an explicit allowlist)")
            changes[key] = frozenset(changes[key])
    for key in ("ranges", "forced", "options_names"):
        if key in changes:
            changes[key] = MappingProxyType(
                {k: tuple(v) if key == "ranges" else v for k, v in dict(changes[key]).items()}
            )
    return replace(base, name=f"{base_name}*", **changes)
