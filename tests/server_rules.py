"""Servers' request rules, as tables, where their request code cannot load here.

One table per server; each rule names the file and lines it comes from and is a predicate
on the JSON body as it left over HTTP: ``True`` means the server refuses it with a 400 (or,
for ``IGNORED`` tables, silently does not do what was asked). :func:`refusals` runs a body
through a table and returns the rules it breaks.

- vLLM 0.34.0 (its request model imports torch through ``vllm.config``): read from the wheel
  ``vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl``. Its diffusion rules are 0.33.0's,
  moved by a few lines; what changed is ``tools: []`` (below).
- SGLang 0.5.23's DiffusionGemma rules (``Gemma4Renoise.validate_request`` imports torch):
  applied to the sampling parameters SGLang's own ``ChatCompletionRequest.to_sampling_params``
  builds (loaded by ``sglang_kit``), so only the last step is a table.
- Diffulex (SJTU-DENG-Lab/Diffulex at commit 184ba97, no wheel on the package index):
  ``diffulex/server/api_server.py``.
- Mercury 2 (a hosted service with no published request model): the documented facts in
  PROVIDERS.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Rule = tuple[str, str, Callable[[Mapping[str, Any]], bool]]
"""(source: file and lines, what it refuses, predicate on the body)."""

_JSON_MODES = ("json_object", "json_schema")


def _format(body: Mapping[str, Any]) -> str | None:
    value = body.get("response_format")
    return value.get("type") if isinstance(value, Mapping) else None


def _forced_tool(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return bool(body.get("tools")) and (choice == "required" or isinstance(choice, Mapping))


def _xargs(body: Mapping[str, Any]) -> Mapping[str, Any]:
    value = body.get("vllm_xargs")
    return value if isinstance(value, Mapping) else {}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _roles(body: Mapping[str, Any]) -> set[Any]:
    return {m.get("role") for m in body.get("messages") or ()}


VLLM: list[Rule] = [
    (
        "vllm/sampling_params.py:1202-1222 (_validate_diffusion); default temperature 1.0 "
        "from vllm/entrypoints/openai/chat_completion/protocol.py:707-715",
        "temperature other than 1.0",
        lambda b: b.get("temperature", 1.0) != 1.0,
    ),
    (
        "vllm/sampling_params.py:1202-1222",
        "min_p, seed, min_tokens, logit_bias, bad_words, allowed_token_ids",
        lambda b: bool(
            (b.get("min_p") or 0) > 0
            or b.get("seed") is not None
            or (b.get("min_tokens") or 0) > 0
            or b.get("logit_bias")
            or b.get("bad_words")
            or b.get("allowed_token_ids")
        ),
    ),
    (
        "vllm/sampling_params.py:1224-1244 (_validate_structured_outputs); response_format "
        "becomes structured outputs in chat_completion/protocol.py:742-747",
        "response_format json_object / json_schema",
        lambda b: _format(b) in _JSON_MODES,
    ),
    (
        "vllm/entrypoints/openai/chat_completion/protocol.py:976-1006 (check_tool_usage): "
        "tools [] is dropped and tool_choice auto / required becomes none (lines 982-988, "
        "new in 0.34, for every model); tool_choice without tools stays a 400",
        "tool_choice auto / required without tools",
        lambda b: b.get("tool_choice") in ("auto", "required") and b.get("tools") is None,
    ),
    (
        "vllm/entrypoints/openai/chat_completion/protocol.py:1020-1064 (check_tool_usage): a "
        "named tool_choice keeps tools [] (line 985), so no tool matches",
        "a named tool_choice that names no tool sent (tools [] included)",
        lambda b: (
            isinstance(b.get("tool_choice"), Mapping)
            and not any(
                isinstance(t, Mapping)
                and (t.get("function") or {}).get("name")
                == (b["tool_choice"].get("function") or {}).get("name")
                for t in b.get("tools") or ()
            )
        ),
    ),
    (
        "vllm/entrypoints/openai/chat_completion/protocol.py:535-541 (vllm_xargs values)",
        "vllm_xargs not an object of strings, numbers or lists",
        lambda b: "vllm_xargs" in b and not isinstance(b["vllm_xargs"], Mapping),
    ),
    (
        "vllm/utils/diffusion.py:28-38, 74-80",
        "diffusion_canvas_length / diffusion_max_steps not a positive integer",
        lambda b: any(
            k in _xargs(b) and not _positive_int(_xargs(b)[k])
            for k in ("diffusion_canvas_length", "diffusion_max_steps")
        ),
    ),
    (
        "vllm/utils/diffusion.py:58-72, 82-104",
        "diffusion_pinned without a seed canvas; read_only / constrained not 0 or 1",
        lambda b: (
            ("diffusion_pinned" in _xargs(b) and "diffusion_seed_canvas" not in _xargs(b))
            or any(
                k in _xargs(b) and _xargs(b)[k] not in (0, 1)
                for k in ("diffusion_read_only", "diffusion_constrained")
            )
        ),
    ),
]
"""vLLM 0.34.0 serving DiffusionGemma: what it answers 400 to."""

VLLM_IGNORED: list[Rule] = [
    (
        "vllm/utils/diffusion.py:28-104 (the keys read from vllm_xargs)",
        "vllm_xargs keys other than the six diffusion_* ones",
        lambda b: any(
            k
            not in {
                "diffusion_canvas_length",
                "diffusion_seed_canvas",
                "diffusion_pinned",
                "diffusion_max_steps",
                "diffusion_read_only",
                "diffusion_constrained",
            }
            for k in _xargs(b)
        ),
    ),
]
"""What vLLM silently ignores."""


def sglang_gemma(sampling: Mapping[str, Any], body: Mapping[str, Any]) -> list[str]:
    """SGLang's Gemma4Renoise.validate_request on SGLang's own sampling parameters.

    ``sampling`` is what ``ChatCompletionRequest.to_sampling_params`` returned for ``body``;
    the names and defaults are those of sglang/srt/dllm/algorithm/gemma4_renoise.py:124-164;
    ``return_logprob`` / ``top_logprobs_num`` come from the body as
    sglang/srt/entrypoints/openai/serving_chat.py:1372-1374 sets them, and a forced tool
    choice becomes a json_schema constraint there (serving_chat.py:1910-1923).
    """
    out = []
    for name, default in (
        ("frequency_penalty", 0.0),
        ("presence_penalty", 0.0),
        ("repetition_penalty", 1.0),
        ("min_new_tokens", 0),
        ("min_p", 0.0),
        ("sampling_seed", None),
    ):
        value = sampling.get(name)
        if value is not None and value != default:
            out.append(name)
    if sampling.get("logit_bias"):
        out.append("logit_bias")
    out += [k for k in ("json_schema", "regex", "ebnf", "structural_tag") if sampling.get(k)]
    if _forced_tool(body):
        out.append("json_schema (forced tool choice)")
    if body.get("logprobs"):
        out.append("return_logprob")
    if body.get("top_logprobs"):
        out.append("top_logprobs_num")
    return out


SGLANG_GREEDY_IGNORED: list[Rule] = [
    (
        "sglang/srt/dllm/algorithm/low_confidence.py:35, joint_threshold.py:58 (argmax)",
        "temperature / top_p / top_k (LLaDA2 and SDAR decode greedily)",
        lambda b: any(k in b for k in ("temperature", "top_p", "top_k")),
    ),
    (
        "PROVIDERS.md (SGLang 0.5.23, LLaDA2/SDAR): JSON modes and forced tool choice "
        "are not enforced",
        "response_format JSON modes / a forced tool choice",
        lambda b: _format(b) in _JSON_MODES or _forced_tool(b),
    ),
]
"""What SGLang's LLaDA2 and SDAR accept and ignore."""

DIFFULEX: list[Rule] = [
    (
        "diffulex/server/api_server.py:38-40 (ChatMessage: role str, content str)",
        "a message content that is not a string",
        lambda b: any(not isinstance(m.get("content"), str) for m in b.get("messages") or ()),
    ),
    (
        "diffulex/server/api_server.py:43-53 (ChatCompletionRequest field types)",
        "max_tokens / temperature / max_nfe of the wrong type",
        lambda b: (
            any(
                k in b and (isinstance(b[k], bool) or not isinstance(b[k], (int, float)))
                for k in ("max_tokens", "temperature")
            )
            or ("max_nfe" in b and not isinstance(b["max_nfe"], int))
        ),
    ),
    (
        "diffulex/server/api_server.py:51 (stream_mode: block_append | denoise)",
        "an unknown stream_mode",
        lambda b: b.get("stream_mode", "denoise") not in ("block_append", "denoise"),
    ),
    (
        "diffulex/server/api_server.py:170-171",
        "no messages",
        lambda b: not b.get("messages"),
    ),
]
"""Diffulex: what its pydantic model refuses (422) or its route refuses (400)."""

DIFFULEX_IGNORED: list[Rule] = [
    (
        "diffulex/server/api_server.py:43-53 (no other field is read; pydantic ignores them)",
        "tools, tool_choice, response_format, stop, top_p, seed, n and OpenAI's other fields",
        lambda b: any(
            k
            not in {
                "messages",
                "model",
                "max_tokens",
                "temperature",
                "max_nfe",
                "max_repetition_run",
                "ignore_eos",
                "stream",
                "stream_mode",
                "user",
            }
            for k in b
        ),
    ),
    (
        "diffulex/server/api_server.py:225-226 (stream_mode denoise: snapshot events)",
        "a stream in the default denoise mode (events that are not chat.completion.chunk)",
        lambda b: b.get("stream") is True and b.get("stream_mode", "denoise") == "denoise",
    ),
]
"""What Diffulex accepts and does not do."""

MERCURY: list[Rule] = [
    (
        "PROVIDERS.md: the developer role is rejected with 400",
        "developer role",
        lambda b: "developer" in _roles(b),
    ),
    (
        "PROVIDERS.md: temperature 0.5 to 1.0",
        "temperature outside 0.5..1.0",
        lambda b: "temperature" in b and not 0.5 <= b["temperature"] <= 1.0,
    ),
    (
        "PROVIDERS.md: stop at most 4 sequences",
        "more than 4 stop sequences",
        lambda b: isinstance(b.get("stop"), list) and len(b["stop"]) > 4,
    ),
    (
        "PROVIDERS.md: max_tokens 1 to 50,000",
        "max_tokens outside 1..50000",
        lambda b: "max_tokens" in b and not 1 <= b["max_tokens"] <= 50_000,
    ),
    (
        "PROVIDERS.md: a named tool_choice gets 400",
        "a named tool_choice",
        lambda b: isinstance(b.get("tool_choice"), Mapping),
    ),
    (
        "PROVIDERS.md: text only",
        "image parts",
        lambda b: any(
            isinstance(m.get("content"), list)
            and any(isinstance(p, Mapping) and p.get("type") == "image_url" for p in m["content"])
            for m in b.get("messages") or ()
        ),
    ),
    (
        "PROVIDERS.md: instant mode does not support tool calls",
        "reasoning_effort instant with tools",
        lambda b: bool(b.get("tools")) and b.get("reasoning_effort") == "instant",
    ),
]
"""Mercury 2: what Inception documents it refuses."""

MERCURY_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
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
        "diffusing",
    }
)
"""Mercury 2's documented and SDK-typed request fields (PROVIDERS.md)."""

MERCURY_IGNORED: list[Rule] = [
    (
        "PROVIDERS.md: not in the documented or SDK-typed field set",
        "n, top_p, seed, logprobs, "
        "penalties, parallel_tool_calls, user and other undocumented fields",
        lambda b: any(k not in MERCURY_FIELDS for k in b),
    ),
]
"""What Mercury 2 does not document (may be refused or ignored)."""


def refusals(rules: list[Rule], body: Mapping[str, Any]) -> list[str]:
    """The rules ``body`` breaks, as ``"what (source)"``."""
    return [f"{what} ({source})" for source, what, refused in rules if refused(body)]
