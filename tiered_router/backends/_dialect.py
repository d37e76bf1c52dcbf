"""Dialect profiles: what each server accepts, and the conversion of a request to it.

OpenAI-compatible servers differ in what they take. dlmserve, for one, validates requests
with a strict model: roles system, user and assistant only, content a string, and ``tools``,
``tool_choice``, ``top_p``, ``stop``, ``response_format``, ``stream_options`` (any unknown
field) refused with a 400. Sent as is, most agent turns would fail there and escalate.

A :class:`DialectProfile` states what one server accepts; ``shape`` (in
:mod:`tiered_router.backends._dialect_shape`) converts a request body to it before any call
and lists every conversion made (the trace records them on the attempt):

- ``developer`` becomes ``system`` where the role is not accepted;
- assistant tool calls and tool results in the history become text in the prompted-tools
  protocol (:mod:`tiered_router.calls._protocol`) where tools are not native;
- content parts are joined into one string where content must be a string;
- tools are described in the system prompt where they are prompted, and the reply is parsed
  back into tool calls (``Plan.finish`` in :mod:`tiered_router.backends._dialect_shape`);
- ``stop`` is applied to the returned text where the server cannot take it;
- ``response_format`` becomes an instruction where it is prompted (the gate validates the
  result as usual);
- other fields the server does not accept are dropped.

What cannot be expressed (an image for a text-only server, tools for ``tools: none``,
``n > 1``) raises :class:`~tiered_router.CapabilityError` before any call; the router
checks the same thing when it decides (:func:`capability_gap`) and sends such turns to the
frontier tier, as it does tool turns for a ``tools: false`` backend.

Example:
    ```yaml
    backends:
      local: {preset: dlmserve, diffusion: {num_denoising_steps: 32, block_length: 64}}
      gemma:
        preset: vllm
        model: ${VLLM_MODEL}
        options: {dialect: {profile: vllm, tools: native}}   # started with a tool parser
    ```

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

from tiered_router.policy._schema import LatencyModel

__all__ = [
    "DIALECTS",
    "ContentShape",
    "DialectProfile",
    "GENERIC_DIFFUSION",
    "FormatMode",
    "JSON_ONLY",
    "TOOL_FIELDS",
    "ToolMode",
    "capability_gap",
    "resolve_dialect",
]

ToolMode = Literal["native", "prompted", "none"]
"""How tools reach the model: the server's ``tools`` field, the system prompt, or not at all."""
FormatMode = Literal["json_schema", "json_object", "prompted", "none"]
"""``response_format`` support: both JSON modes, ``json_object`` only, an instruction, none."""
ContentShape = Literal["parts", "text"]
"""Message content: OpenAI's list of parts, or a string only."""

_ALL_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_CHAT_ROLES = frozenset({"system", "user", "assistant"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
# fields every profile accepts: the body's frame
_FRAME = frozenset({"model", "messages", "stream"})
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
JSON_ONLY = "Reply with only a JSON object: no prose, no code fence."


@dataclass(frozen=True, slots=True, kw_only=True)
class DialectProfile:
    """What one server accepts in a chat-completions request.

    Attributes:
        name: The profile's name (``dlmserve``, ``sglang``, ``vllm``, ``mercury-2``,
            ``local-diffusion``, ``openai``).
        roles: Message roles the server accepts; ``developer`` is sent as ``system`` and
            tool results as user text when theirs is missing.
        content: ``parts`` (OpenAI's list of parts) or ``text`` (a string only: parts joined).
        images: Whether image, audio and file parts can be sent (``False``: text only).
        plain_messages: Send each message as exactly ``{role, content}`` (drop ``name`` and
            other keys).
        tools: ``native``, ``prompted`` (described in the system prompt, parsed from the
            reply) or ``none`` (a tool turn cannot be sent).
        response_format: ``json_schema`` (both JSON modes), ``json_object`` (a schema
            becomes an instruction), ``prompted`` (an instruction) or ``none``.
        stop: Whether the server takes ``stop``; otherwise it is applied to the reply.
        stream_options: Whether the server takes ``stream_options``.
        params: Request fields accepted beyond ``model``, ``messages`` and ``stream``;
            ``None`` passes every field through (lenient).
        multiple_choices: Whether ``n > 1`` can be sent.
        greedy: Whether the server decodes greedily whatever the sampling fields say
            (SGLang's LLaDA2 / SDAR diffusion models ignore ``temperature``): the same
            prompt then always gives the same draft, so a same-prompt draft panel is refused.
        diffusion_params: Per-request diffusion fields the server takes (a policy's
            ``diffusion:`` is checked against them); empty with ``params=None`` accepts any.
        latency: Default time to first token and throughput, until measured.
        checked: How conformance with the server was checked (shown in the docs).

    """

    name: str
    roles: frozenset[str] = _ALL_ROLES
    content: ContentShape = "parts"
    images: bool = True
    plain_messages: bool = False
    tools: ToolMode = "native"
    response_format: FormatMode = "json_schema"
    stop: bool = True
    stream_options: bool = True
    params: frozenset[str] | None = None
    multiple_choices: bool = True
    greedy: bool = False
    diffusion_params: frozenset[str] = frozenset()
    latency: LatencyModel = field(default_factory=LatencyModel)
    checked: str = ""

    def accepts_diffusion(self, key: str) -> bool:
        """Whether a policy's ``diffusion:`` may set ``key``."""
        return key in self.diffusion_params if self.diffusion_params else self.params is None

    def accepts(self, key: str) -> bool:
        """Whether a body field may be sent."""
        if key in _FRAME or key in self.diffusion_params:
            return True
        return self.params is None or key in self.params


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
GENERIC_DIFFUSION = frozenset(
    {
        "num_denoising_steps",
        "block_length",
        "confidence_threshold",
        "gen_length",
        "steps",
        "threshold",
        "remasking",
        "vllm_xargs",
    }
)
"""Diffusion fields a generic local diffusion server (vLLM, SGLang, Fast-dLLM) takes in the
body; the ``local_diffusion`` quirks move them from parameters into ``extra_body``."""

DIALECTS: Mapping[str, DialectProfile] = MappingProxyType(
    {
        "openai": DialectProfile(
            name="openai",
            latency=LatencyModel(ttft_s=0.5, tokens_per_s=100.0),
            checked="the openai SDK's own request types",
        ),
        "mercury-2": DialectProfile(
            name="mercury-2",
            roles=_ALL_ROLES - {"developer"},
            images=False,
            latency=LatencyModel(ttft_s=0.35, tokens_per_s=1000.0),
            checked="documented facts (PROVIDERS.md): developer rejected, text only",
        ),
        "dlmserve": DialectProfile(
            name="dlmserve",
            roles=_CHAT_ROLES,
            content="text",
            images=False,
            plain_messages=True,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            params=frozenset({"temperature", "seed", "max_tokens"}),
            multiple_choices=False,
            diffusion_params=_DLMSERVE_DIFFUSION,
            # LLaDA-8B-Instruct, INT4, batch 1 (dlmserve 0.1.1 README: 32.9 tok/s; 146.8 at
            # batch 8 with LocalLeap). The whole canvas arrives at once: ttft is the total.
            latency=LatencyModel(ttft_s=0.05, tokens_per_s=33.0),
            checked="dlmserve 0.1.1's own ChatCompletionRequest and its FastAPI app",
        ),
        "sglang": DialectProfile(
            name="sglang",
            # SGLang's model takes developer, but a diffusion model's chat template may not
            roles=_ALL_ROLES - {"developer"},
            images=False,
            tools="prompted",
            response_format="prompted",
            # SGLang's diffusion models (LLaDA2, SDAR) decode greedily: temperature is ignored
            greedy=True,
            # block-diffusion models (LLaDA2.0-mini): whole blocks per step
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=400.0),
            checked="SGLang's own ChatCompletionRequest (sglang/srt/entrypoints/openai)",
        ),
        "vllm": DialectProfile(
            name="vllm",
            roles=_ALL_ROLES - {"developer"},
            images=False,
            tools="prompted",
            response_format="prompted",
            diffusion_params=frozenset({"vllm_xargs"}),
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=400.0),
            checked="documented facts (PROVIDERS.md): diffusion fields in vllm_xargs",
        ),
        "local-diffusion": DialectProfile(
            name="local-diffusion",
            roles=_CHAT_ROLES,
            content="text",
            images=False,
            tools="prompted",
            response_format="prompted",
            stop=False,
            stream_options=False,
            diffusion_params=GENERIC_DIFFUSION,
            latency=LatencyModel(ttft_s=0.2, tokens_per_s=100.0),
            checked="lenient generic profile: unknown fields pass through",
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
        ValueError: An unknown profile name, field or value; the message lists the known ones.

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
    for key, allowed in (
        ("tools", ToolMode),
        ("response_format", FormatMode),
        ("content", ContentShape),
    ):
        if key in changes and changes[key] not in get_args(allowed):
            raise ValueError(f"dialect {key}: {changes[key]!r} is not one of {get_args(allowed)}")
    for key in ("roles", "params", "diffusion_params"):
        if key in changes and changes[key] is not None:
            changes[key] = frozenset(changes[key])
    return replace(base, name=f"{base_name}*", **changes)


# -- checks ------------------------------------------------------------------------------------


def _part_type(part: Any) -> str:
    if isinstance(part, str):
        return "text"
    if isinstance(part, Mapping):
        kind = part.get("type")
        return kind if isinstance(kind, str) else "text"
    return type(part).__name__


def _has_format(response_format: Mapping[str, Any] | None) -> bool:
    return bool(response_format) and (response_format or {}).get("type") != "text"


def capability_gap(
    profile: DialectProfile,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    response_format: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[str, str] | None:
    """Return ``(what, why)`` when the request asks for something the profile cannot express.

    ``what`` is a short key (``images``, ``tools``, ``response_format``, ``n``) used in the
    rule name ``capability.<what>``; ``why`` says what and where. Pure.
    """
    if not profile.images:
        for i, message in enumerate(messages):
            content = message.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    kind = _part_type(part)
                    if kind not in _TEXT_PARTS:
                        return (
                            "images",
                            f"messages[{i}].content[{j}] is a {kind!r} part and the "
                            f"{profile.name} dialect is text only",
                        )
    if tools and profile.tools == "none":
        return "tools", f"the turn has tools and the {profile.name} dialect has tools: none"
    if _has_format(response_format) and profile.response_format == "none":
        return (
            "response_format",
            f"the turn has a response_format and the {profile.name} dialect cannot express one",
        )
    n = (params or {}).get("n")
    if isinstance(n, int) and n > 1 and not profile.multiple_choices:
        return "n", f"n={n} choices asked and the {profile.name} dialect returns one"
    return None
