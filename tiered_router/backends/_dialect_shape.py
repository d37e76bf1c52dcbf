"""Shaping a request to a server's dialect, and the plan for reading its reply.

:func:`shape` converts a chat-completions body to a dialect profile
(:class:`~tiered_router.backends._dialect.DialectProfile`) and returns the :class:`Plan`
that turns the reply back into what the caller asked for (prompted tool calls parsed,
``stop`` applied). :mod:`tiered_router.backends._dialect` re-exports both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tiered_router.backends._dialect import (
    JSON_ONLY,
    TOOL_FIELDS,
    DialectProfile,
    capability_gap,
)
from tiered_router.calls import _protocol as _pt
from tiered_router.calls._prompted import lift_prompted_calls
from tiered_router.exceptions import CapabilityError
from tiered_router.gate._lifting import argument_problem
from tiered_router.turn import Completion, CompletionChunk, ToolCallDelta, ToolSpec, assemble

__all__ = ["Plan", "shape"]


# -- the plan for the reply --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What was converted in a request, and what must be done to its reply.

    Attributes:
        conversions: Every conversion made, human-readable, in order.
        stop: Stop sequences to apply to the reply (the server could not take them).
        tools: Tools to parse prompted calls against (empty when tools are native).
        tool_choice: The request's ``tool_choice``, which prompted calls must honour.
        parallel_tool_calls: The request's ``parallel_tool_calls`` (``False``: one call).

    """

    conversions: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None

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
        done = replace(
            completion, text=text, finish_reason=finish_reason, conversions=self.conversions
        )
        if not self.tools:
            return done
        # the lifting rules of the calls wing: a reply made only of calls to offered tools,
        # honouring tool_choice, with arguments that validate; anything else stays text
        return lift_prompted_calls(
            done,
            self.tools,
            id_prefix=f"call_{uuid.uuid4().hex[:12]}_",
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
            validate=argument_problem,
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
        for call in _calls(message):
            fn = _function(call)
            if isinstance(call.get("id"), str) and isinstance(fn.get("name"), str):
                names[call["id"]] = fn["name"]
    return names


def _calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's tool calls that are objects (a turn's were checked when it was built)."""
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = call.get("function")
    return fn if isinstance(fn, Mapping) else {}


def _arguments(call: Mapping[str, Any]) -> str | Mapping[str, Any] | None:
    args = _function(call).get("arguments")
    return args if isinstance(args, (str, Mapping)) else None


def _history_as_text(messages: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """Assistant tool calls and tool results become protocol text the model can read."""
    names = _tool_names(messages)
    out: list[dict[str, Any]] = []
    calls_done = results_done = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant" and _calls(message):
            rendered = [
                _pt.render_tool_call(str(_function(c).get("name", "")), _arguments(c))
                for c in _calls(message)
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
        return JSON_ONLY
    return f"{JSON_ONLY} It must validate against this JSON Schema: {json.dumps(schema)}"


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


def _stop_sequences(value: Any) -> tuple[str, ...]:
    """The sequences of a ``stop`` to apply to the reply; never raises.

    A turn's ``stop`` was checked when the turn was built (``InvalidRequest`` for anything
    but a string or a list of strings); what else a request built by hand holds is not a
    stop sequence and is left out.
    """
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, (list, tuple)):
        return tuple(s for s in value if isinstance(s, str) and s)
    return ()


def shape(
    profile: DialectProfile,
    body: Mapping[str, Any],
    *,
    backend: str = "?",
    output_tokens: int | None = None,
) -> tuple[dict[str, Any], Plan]:
    """Convert a chat-completions request body to ``profile``'s dialect.

    Args:
        profile: The server's dialect.
        body: The flat request body (``model``, ``messages``, ``tools``, every parameter
            and provider field); it is not changed.
        backend: The backend's name, for errors.
        output_tokens: The turn's expected output tokens: the ``max_tokens`` sent to a
            server that needs one (``default_max_tokens``) when the body has none.

    Returns:
        The body to send, and the :class:`Plan` for its reply.

    Raises:
        CapabilityError: The request needs something the dialect cannot express (before any
            call is made); the message says what and where.

    """
    out = dict(body)
    notes: list[str] = []
    if not profile.named_tool_choice and profile.tools == "native":
        _simple_tool_choice(out, notes)
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
    choice = out.get("tool_choice")
    parallel = out.get("parallel_tool_calls")
    if profile.tools == "prompted" and any(k in out for k in TOOL_FIELDS):
        for key in TOOL_FIELDS:
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
        stop = _stop_sequences(out.pop("stop"))
        notes.append(f"stop: {len(stop)} sequence(s) applied to the reply")
    elif profile.max_stop is not None and isinstance(out.get("stop"), (list, tuple)):
        given, most = list(out["stop"]), profile.max_stop
        if len(given) > most:
            # the rest are cut from the reply, so text after them never reaches the caller
            out["stop"], stop = given[:most], _stop_sequences(given[most:])
            notes.append(
                f"stop: sent the first {most} of {len(given)}, the rest applied to the reply"
            )
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
    _shape_fields(profile, out, notes, tool_turn=bool(tools), output_tokens=output_tokens)
    dropped = sorted(k for k in out if not profile.accepts(k))
    for key in dropped:
        out.pop(key)
    if dropped:
        notes.append(f"dropped (not accepted): {', '.join(dropped)}")
    _nest(profile, out, notes)
    return out, Plan(
        conversions=tuple(notes),
        stop=stop,
        tools=parse_against,
        tool_choice=choice if parse_against else None,
        parallel_tool_calls=parallel if parse_against and isinstance(parallel, bool) else None,
    )


def _simple_tool_choice(out: dict[str, Any], notes: list[str]) -> None:
    """A named ``tool_choice`` as ``required`` with only that tool; ``none`` as no tools."""
    choice = out.get("tool_choice")
    tools = list(out.get("tools") or ())
    if not tools or choice in (None, "auto", "required"):
        return
    if choice == "none":
        tools = []
    elif isinstance(choice, Mapping):
        name = _function(choice).get("name")
        only = [t for t in tools if isinstance(t, Mapping) and _function(t).get("name") == name]
        if name and only:
            tools, out["tool_choice"] = only, "required"
    notes.append(
        f"tool_choice {json.dumps(choice)} -> {len(tools)} tool(s)"
        + (", tool_choice required" if out.get("tool_choice") == "required" else "")
    )
    if tools:
        out["tools"] = tools
    else:  # OpenAI-style servers refuse tool_choice without tools
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            out.pop(key, None)


_SAMPLING = ("temperature", "top_p", "top_k")
_LOW_EFFORT = frozenset({"instant", "none", "minimal"})


def _shape_fields(
    profile: DialectProfile,
    out: dict[str, Any],
    notes: list[str],
    *,
    tool_turn: bool,
    output_tokens: int | None,
) -> None:
    """Field values as the server's code takes them: greedy, ranges, efforts, forced fields."""
    if profile.greedy:
        ignored = [k for k in _SAMPLING if k in out]
        for key in ignored:
            out.pop(key)
        if ignored:
            notes.append(f"{', '.join(ignored)} not sent: the server decodes greedily")
    for key, (low, high) in profile.ranges.items():
        value = out.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not low <= value <= high:
                clamped = min(max(value, low), high)
                if isinstance(low, int) and isinstance(high, int):
                    clamped = int(clamped)
                out[key] = clamped
                notes.append(f"{key}: {value!r} -> {clamped!r} (the server accepts {low}..{high})")
    if (
        tool_turn
        and profile.tool_turn_effort is not None
        and out.get("reasoning_effort") in _LOW_EFFORT
    ):
        old = out["reasoning_effort"]
        out["reasoning_effort"] = profile.tool_turn_effort
        notes.append(
            f"reasoning_effort {old} -> {profile.tool_turn_effort} on a tool turn "
            f"({old} has no tool calls)"
        )
    if profile.default_max_tokens is not None and out.get("max_tokens") is None:
        out["max_tokens"] = output_tokens or profile.default_max_tokens
        notes.append(f"max_tokens: not given -> {out['max_tokens']} (the turn's estimate)")
    for key, value in profile.forced.items():
        if key in out and out[key] != value:
            notes.append(f"{key}: {out[key]!r} -> {value!r} (forced by the {profile.name} dialect)")
        out[key] = value
    if not profile.streams and "stream" in out:
        # the backend reads the JSON answer and hands it out as chunks
        out.pop("stream")


def _nest(profile: DialectProfile, out: dict[str, Any], notes: list[str]) -> None:
    """Move fields into the object the server reads them from (``vllm_xargs``, ``options``)."""
    container = profile.diffusion_container
    if container is not None:
        given = out.pop(container, None)
        nested = dict(given) if isinstance(given, Mapping) else {}
        unknown = sorted(k for k in nested if k not in profile.diffusion_params)
        for key in unknown:
            nested.pop(key)
        if unknown:
            notes.append(f"{container}: dropped {', '.join(unknown)} (the server ignores them)")
        moved = [k for k in profile.diffusion_params if k in out]
        for key in sorted(moved):
            nested[key] = out.pop(key)
        if nested:
            out[container] = nested
    if profile.options_field is not None:
        given = out.pop(profile.options_field, None)
        options = dict(given) if isinstance(given, Mapping) else {}
        moved = sorted(k for k in out if k in profile.params or k in profile.diffusion_params)
        for key in moved:
            options[profile.options_names.get(key, key)] = out.pop(key)
        if moved:
            renamed = [
                f"{k} -> {profile.options_names[k]}" if k in profile.options_names else k
                for k in moved
            ]
            notes.append(f"{profile.options_field}{{}}: {', '.join(renamed)}")
        if options:
            out[profile.options_field] = options
