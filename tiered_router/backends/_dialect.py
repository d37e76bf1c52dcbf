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
- ``stop`` is applied to the returned text where the server cannot take it (or the sequences
  past the most it takes: Mercury 2's four);
- a named ``tool_choice`` is sent as ``required`` with only that tool, and ``none`` as no
  tools, where the server takes only ``auto`` and ``required`` (Mercury 2);
- ``response_format`` becomes an instruction where it is prompted (the gate validates the
  result as usual);
- fields outside the profile's allowlist are dropped, values outside its ranges clamped,
  forced fields set, and parameters moved where the server reads them (``options{}``,
  ``vllm_xargs``).

The profiles themselves, each with the sources of its rules, are in
:mod:`tiered_router.backends._profiles`.

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
        diffusion: {diffusion_max_steps: 32}                  # sent in vllm_xargs
        options: {dialect: {profile: vllm, tools: native}}   # started with a tool parser
    ```

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from tiered_router.policy._schema import LatencyModel

__all__ = [
    "CHAT_ROLES",
    "ContentShape",
    "DialectProfile",
    "FormatMode",
    "JSON_ONLY",
    "OPENAI_FIELDS",
    "TOOL_FIELDS",
    "ToolMode",
    "capability_gap",
]

ToolMode = Literal["native", "prompted", "none"]
"""How tools reach the model: the server's ``tools`` field, the system prompt, or not at all."""
FormatMode = Literal["json_schema", "json_object", "prompted", "none"]
"""``response_format`` support: both JSON modes, ``json_object`` only, an instruction, none."""
ContentShape = Literal["parts", "text"]
"""Message content: OpenAI's list of parts, or a string only."""

_ALL_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
CHAT_ROLES = frozenset({"system", "user", "assistant"})
"""The roles every chat template takes."""
_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
# fields every profile accepts: the body's frame
_FRAME = frozenset({"model", "messages", "stream"})
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
JSON_ONLY = "Reply with only a JSON object: no prose, no code fence."


@dataclass(frozen=True, slots=True, kw_only=True)
class DialectProfile:
    """What one server accepts in a chat-completions request.

    Every profile lists the fields it sends (``params``, ``diffusion_params``): a field not
    listed is dropped before the call and the drop is recorded, never passed through on the
    chance that the server takes it.

    Attributes:
        name: The profile's name (``openai``, ``mercury-2``, ``dlmserve``, ``sglang``,
            ``sglang-gemma``, ``vllm``, ``lmdeploy``, ``diffulex``, ``ollada``,
            ``dfastllm``, ``local-diffusion``).
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
        max_stop: Most ``stop`` sequences the server takes (Mercury 2: 4); the first
            ``max_stop`` are sent and the rest applied to the reply. ``None``: no limit.
        stream_options: Whether the server takes ``stream_options``.
        params: The request fields sent beyond ``model``, ``messages`` and ``stream``
            (the allowlist); every other field is dropped and the drop recorded. ``tools``
            and ``tool_choice``, ``response_format``, ``stop`` and ``stream_options`` follow
            their own settings above.
        named_tool_choice: Whether a named ``tool_choice`` (and ``none``) can be sent;
            ``False`` (Mercury 2 answers 400) sends a named one as ``required`` with only
            that tool, and ``none`` as no tools: the same meaning in the values it takes.
        multiple_choices: Whether ``n > 1`` can be sent.
        diffusion_params: Per-request diffusion fields the server takes (a policy's
            ``diffusion:`` is checked against them).
        diffusion_container: The body field the diffusion fields are sent under
            (vLLM's ``vllm_xargs``); ``None`` sends them at the top level.
        greedy: The server decodes greedily: ``temperature``, ``top_p`` and ``top_k`` are
            accepted and ignored there (SGLang's LLaDA2 and SDAR), so they are not sent and
            a draft panel gets one answer per backend, not k samples.
        ranges: Allowed values of numeric fields, inclusive; a value outside is clamped into
            range and the change recorded, never refused (vLLM's DiffusionGemma:
            ``temperature`` 1.0 only; Mercury 2: ``temperature`` 0.5..1.0).
        forced: Fields always sent with these values, whatever the request says (Diffulex's
            ``stream_mode: block_append``: its default streams non-OpenAI snapshots).
        options_field: Send the parameters inside this object (ollada's ``options``).
        options_names: Parameter renames inside ``options_field`` (``max_tokens`` ->
            ``gen_length``).
        streams: Whether the server streams; ``False`` makes a stream a JSON call whose
            answer is handed out as chunks (ollada answers JSON to ``stream: true``).
        unfinished_streams: Whether a stream that ends without a ``finish_reason`` is read
            as finished (some small servers send the whole answer in one chunk and stop);
            ``False`` reads it as a cut connection.
        default_max_tokens: ``max_tokens`` sent when the request has none and the router
            gave no estimate (the request's ``output_tokens``): dlmserve answers 128 tokens
            without one.
        tool_turn_effort: On a turn with tools, a ``reasoning_effort`` of ``instant`` or
            ``none`` is raised to this value (Mercury 2's instant mode has no tool calls).
        fixed: Profile fields a policy may not override (``{profile: vllm,
            response_format: json_schema}`` is refused when the policy loads).
        max_concurrency: Requests the server runs at once (SGLang in dLLM mode: 1);
            ``None`` when not known. Queue-aware latency estimates and the ``capacity.*``
            rule use it.
        canvas_tokens: Tokens one denoising canvas holds: a reply costs whole canvases
            (DiffusionGemma: 256); ``None`` when output is billed by the token.
        vendor_fields: Send fields outside OpenAI's set unchanged (vendor extensions the
            caller adds, as the openai SDK's ``extra_body`` does); only the generic
            ``openai`` profile, for an endpoint whose server is not known, sets it.
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
    max_stop: int | None = None
    stream_options: bool = True
    params: frozenset[str] = frozenset()
    named_tool_choice: bool = True
    multiple_choices: bool = True
    diffusion_params: frozenset[str] = frozenset()
    diffusion_container: str | None = None
    greedy: bool = False
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=lambda: _EMPTY)
    forced: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    options_field: str | None = None
    options_names: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    streams: bool = True
    unfinished_streams: bool = False
    default_max_tokens: int | None = None
    tool_turn_effort: str | None = None
    fixed: frozenset[str] = frozenset()
    max_concurrency: int | None = None
    canvas_tokens: int | None = None
    vendor_fields: bool = False
    latency: LatencyModel = field(default_factory=LatencyModel)
    checked: str = ""

    def accepts_diffusion(self, key: str) -> bool:
        """Whether a policy's ``diffusion:`` may set ``key``."""
        return key in self.diffusion_params

    def accepts(self, key: str) -> bool:
        """Whether a body field may be sent (the frame, a listed field, a diffusion field)."""
        if key in _FRAME or key in self.forced:
            return True
        # fields a mode governs: sent where the mode is native, whatever params lists
        if key in ("tools", "tool_choice"):
            return self.tools == "native"
        if key == "parallel_tool_calls":
            return self.tools == "native" and key in self.params
        if key == "response_format":
            return self.response_format in ("json_schema", "json_object")
        if key == "stop":
            return self.stop
        if key == "stream_options":
            return self.stream_options
        if key in self.params:
            return True
        # diffusion fields are moved into diffusion_container (if any) after the check
        if key in (self.options_field, self.diffusion_container) or key in self.diffusion_params:
            return True
        return self.vendor_fields and key not in OPENAI_FIELDS


_EMPTY: Mapping[str, Any] = MappingProxyType({})

OPENAI_FIELDS = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
"""OpenAI's chat-completions request fields beyond the frame (the openai SDK's ``create``,
``openai/types/chat/completion_create_params.py`` of openai 3.57; a test compares the two)."""


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
