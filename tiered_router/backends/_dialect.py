"""Dialect profiles: what each server accepts, and the conversion of a request to it.

OpenAI-compatible servers differ in what they take. dlmserve, for one, validates requests
with a strict model: roles system, user and assistant only, content a string, and ``tools``,
``tool_choice``, ``top_p``, ``stop``, ``response_format``, ``stream_options`` (any unknown
field) refused with a 400. Sent as is, most agent turns would fail there and escalate.

A :class:`DialectProfile` states what one server accepts; :func:`shape` converts a request
body to it before any call and lists every conversion made (the trace records them on the
attempt):

- ``developer`` becomes ``system`` where the role is not accepted;
- assistant tool calls and tool results in the history become text in the prompted-tools
  protocol (:mod:`tiered_router.backends._prompted_tools`) where tools are not native;
- content parts are joined into one string where content must be a string;
- tools are described in the system prompt where they are prompted, and the reply is parsed
  back into tool calls (:meth:`Plan.finish`);
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

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

from tiered_router.backends import _prompted_tools as _pt
from tiered_router.exceptions import CapabilityError
from tiered_router.policy import LatencyModel
from tiered_router.turn import Completion, CompletionChunk, ToolCallDelta, ToolSpec, assemble

__all__ = [
    "DIALECTS",
    "ContentShape",
    "DialectProfile",
    "FormatMode",
    "Plan",
    "ToolMode",
    "capability_gap",
    "resolve_dialect",
    "shape",
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
_TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
_JSON_ONLY = "Reply with only a JSON object: no prose, no code fence."


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
_GENERIC_DIFFUSION = frozenset(
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
            diffusion_params=_GENERIC_DIFFUSION,
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


# -- the plan for the reply --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What was converted in a request, and what must be done to its reply.

    Attributes:
        conversions: Every conversion made, human-readable, in order.
        stop: Stop sequences to apply to the reply (the server could not take them).
        tools: Tools to parse prompted calls against (empty when tools are native).

    """

    conversions: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    tools: tuple[ToolSpec, ...] = ()

    @property
    def buffers(self) -> bool:
        """Whether a stream must be read whole before its reply can be finished."""
        return bool(self.stop or self.tools)

    def finish(self, completion: Completion) -> Completion:
        """Apply client-side stop and parse prompted tool calls; attach the conversions."""
        if not (self.stop or self.tools or self.conversions):
            return completion
        text, finish_reason = completion.text, completion.finish_reason
        if self.stop and text:
            cut = min((i for i in (text.find(s) for s in self.stop if s) if i >= 0), default=-1)
            if cut >= 0:
                text, finish_reason = text[:cut], "stop"
        calls = completion.tool_calls
        if self.tools and not calls and text:
            prefix = f"call_{uuid.uuid4().hex[:12]}_"
            rest, parsed = _pt.split_tool_calls(text, self.tools, id_prefix=prefix)
            if parsed:
                text, calls, finish_reason = rest, tuple(parsed), "tool_calls"
        return replace(
            completion,
            text=text,
            tool_calls=calls,
            finish_reason=finish_reason,
            conversions=self.conversions,
        )

    def finish_chunks(self, chunks: Sequence[CompletionChunk], *, backend: str) -> CompletionChunk:
        """Fold a buffered stream into one finished chunk (text, calls, finish, usage)."""
        done = self.finish(assemble(chunks, backend=backend))
        return CompletionChunk(
            text=done.text,
            tool_calls=tuple(
                ToolCallDelta(index=i, id=c.id, name=c.name, arguments=c.arguments)
                for i, c in enumerate(done.tool_calls)
            ),
            finish_reason=done.finish_reason,
            usage=done.usage,
            model=done.model,
            reasoning=done.reasoning,
            refusal=done.refusal,
            conversions=done.conversions,
        )

    def mark(self, chunk: CompletionChunk) -> CompletionChunk:
        """Attach the conversions to the first chunk of a stream passed straight through."""
        return replace(chunk, conversions=self.conversions) if self.conversions else chunk


# -- shaping a request -------------------------------------------------------------------------


def _join(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                value = part.get("text", part.get("refusal"))
                if isinstance(value, str):
                    texts.append(value)
        return "\n".join(texts)
    return str(content)


def _tool_names(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            if isinstance(call.get("id"), str) and isinstance(fn.get("name"), str):
                names[call["id"]] = fn["name"]
    return names


def _history_as_text(messages: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """Assistant tool calls and tool results become protocol text the model can read."""
    names = _tool_names(messages)
    out: list[dict[str, Any]] = []
    calls_done = results_done = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            rendered = [
                _pt.render_tool_call(
                    str((c.get("function") or {}).get("name", "")),
                    (c.get("function") or {}).get("arguments"),
                )
                for c in message["tool_calls"]
            ]
            text = _join(message.get("content"))
            new = {k: v for k, v in message.items() if k != "tool_calls"}
            new["content"] = "\n".join([text, *rendered] if text else rendered)
            out.append(new)
            calls_done += len(rendered)
        elif role in ("tool", "function"):
            call_id = message.get("tool_call_id")
            name = message.get("name") or (names.get(call_id) if isinstance(call_id, str) else None)
            text = _pt.render_tool_result(
                _join(message.get("content")),
                name=name if isinstance(name, str) else None,
                call_id=call_id if isinstance(call_id, str) else None,
            )
            results_done += 1
            if out and out[-1].get("_tool_results"):
                # consecutive results (parallel calls) share one user message
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text, "_tool_results": True})
        else:
            out.append(message)
    for message in out:
        message.pop("_tool_results", None)
    if calls_done:
        notes.append(f"history: {calls_done} assistant tool call(s) -> text")
    if results_done:
        notes.append(f"history: {results_done} tool result(s) -> user text")
    return out


def _instruct(messages: list[dict[str, Any]], text: str, profile: DialectProfile) -> None:
    """Append ``text`` to the leading system message (or add one)."""
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        current = _join(first.get("content"))
        first["content"] = f"{current}\n\n{text}" if current else text
    elif "system" in profile.roles:
        messages.insert(0, {"role": "system", "content": text})
    else:  # pragma: no cover - every shipped profile has system
        messages.insert(0, {"role": "user", "content": text})


def _format_instruction(response_format: Mapping[str, Any]) -> str:
    schema = None
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if schema is None:
        return _JSON_ONLY
    return f"{_JSON_ONLY} It must validate against this JSON Schema: {json.dumps(schema)}"


def _messages(
    profile: DialectProfile, messages: Sequence[Mapping[str, Any]], notes: list[str]
) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    if profile.tools != "native":
        out = _history_as_text(out, notes)
    if "developer" not in profile.roles:
        moved = [i for i, m in enumerate(out) if m.get("role") == "developer"]
        for i in moved:
            out[i]["role"] = "system"
        if moved:
            notes.append(f"messages{moved}: developer -> system")
    if profile.content == "text":
        joined = []
        for i, m in enumerate(out):
            content = m.get("content")
            if not isinstance(content, str):
                if isinstance(content, list):
                    joined.append(i)
                m["content"] = _join(content)
        if joined:
            notes.append(f"messages{joined}: content parts joined into text")
    for i, m in enumerate(out):
        if m.get("role") not in profile.roles:
            raise ValueError(f"messages[{i}]: role {m.get('role')!r}")
    if profile.plain_messages:
        extra = sorted({k for m in out for k in m} - {"role", "content"})
        out = [{"role": m["role"], "content": m.get("content")} for m in out]
        if extra:
            notes.append(f"message fields dropped: {', '.join(extra)}")
    return out


def shape(
    profile: DialectProfile, body: Mapping[str, Any], *, backend: str = "?"
) -> tuple[dict[str, Any], Plan]:
    """Convert a chat-completions request body to ``profile``'s dialect.

    Args:
        profile: The server's dialect.
        body: The flat request body (``model``, ``messages``, ``tools``, every parameter
            and provider field); it is not changed.
        backend: The backend's name, for errors.

    Returns:
        The body to send, and the :class:`Plan` for its reply.

    Raises:
        CapabilityError: The request needs something the dialect cannot express (before any
            call is made); the message says what and where.

    """
    out = dict(body)
    notes: list[str] = []
    tools = list(out.get("tools") or ())
    response_format = out.get("response_format")
    gap = capability_gap(
        profile,
        messages=out.get("messages") or (),
        tools=tools,
        response_format=response_format,
        params=out,
    )
    if gap is not None:
        raise CapabilityError(gap[1], backend=backend)
    try:
        messages = _messages(profile, out.get("messages") or (), notes)
    except ValueError as exc:
        raise CapabilityError(
            f"{exc} is not accepted by the {profile.name} dialect "
            f"(roles: {', '.join(sorted(profile.roles))})",
            backend=backend,
        ) from None
    instructions: list[str] = []
    parse_against: tuple[ToolSpec, ...] = ()
    if profile.tools == "prompted" and any(k in out for k in _TOOL_FIELDS):
        choice = out.get("tool_choice")
        parallel = out.get("parallel_tool_calls")
        for key in _TOOL_FIELDS:
            out.pop(key, None)
        if tools and choice != "none":
            specs = tuple(ToolSpec.from_openai(t) for t in tools)
            instructions.append(
                _pt.render_tool_prompt(specs, tool_choice=choice, parallel_tool_calls=parallel)
            )
            parse_against = specs
            notes.append(f"tools: {len(specs)} described in the system prompt (prompted)")
            if choice not in (None, "auto"):
                notes.append(f"tool_choice {json.dumps(choice)} -> instruction")
        elif tools:
            notes.append("tools: not described (tool_choice none)")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, Mapping) else None
        if kind == "text" or kind is None:
            out.pop("response_format")
        elif profile.response_format == "prompted":
            out.pop("response_format")
            instructions.append(_format_instruction(response_format))
            notes.append(f"response_format {kind} -> instruction")
        elif profile.response_format == "json_object" and kind == "json_schema":
            out["response_format"] = {"type": "json_object"}
            instructions.append(_format_instruction(response_format))
            notes.append("response_format json_schema -> json_object + schema instruction")
    if instructions:
        _instruct(messages, "\n\n".join(instructions), profile)
    out["messages"] = messages
    stop: tuple[str, ...] = ()
    if not profile.stop and out.get("stop") is not None:
        value = out.pop("stop")
        stop = (value,) if isinstance(value, str) else tuple(s for s in value if s)
        notes.append(f"stop: {len(stop)} sequence(s) applied to the reply")
    if not profile.stream_options and "stream_options" in out:
        out.pop("stream_options")
        notes.append("stream_options dropped")
    if (
        "max_completion_tokens" in out
        and not profile.accepts("max_completion_tokens")
        and profile.accepts("max_tokens")
    ):
        out.setdefault("max_tokens", out.pop("max_completion_tokens"))
        notes.append("max_completion_tokens -> max_tokens")
    if out.get("n") == 1 and not profile.multiple_choices:
        out.pop("n")
    dropped = sorted(k for k in out if not profile.accepts(k))
    for key in dropped:
        out.pop(key)
    if dropped:
        notes.append(f"dropped (not accepted): {', '.join(dropped)}")
    return out, Plan(conversions=tuple(notes), stop=stop, tools=parse_against)
