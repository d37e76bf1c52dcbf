"""pydantic-ai: a ``Model`` that routes every request through a :class:`Router`.

Install with ``pip install ".[pydantic-ai]"`` from a checkout.

Example:
    ```python
    from pydantic_ai import Agent
    from tiered_router.integrations.pydantic_ai import TieredPydanticAIModel

    agent = Agent(TieredPydanticAIModel(router), output_type=Forecast, tools=[get_weather])
    result = await agent.run("Weather in Oslo?")
    result.response.provider_details["tiered_router"]   # {"tier": "fast", ...}
    ```

Function tools and output tools become tool specs, a native output becomes a
``response_format``, so the gate checks tool arguments and output schemas inside the
agent's own run, and a failing fast draft is escalated before pydantic-ai sees it (and
before it spends one of its retries). Agent signals ride in the model settings:
``agent.run(..., model_settings={"extra_body": {"tiered_router": {"final": True}}})``.

"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from tiered_router.engine._streaming import AsyncRoutedStream
from tiered_router.integrations._common import METADATA_KEY, decision_metadata, signals_of
from tiered_router.router import RoutedResult, Router
from tiered_router.turn import Completion, Turn, Usage

try:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        ModelResponsePart,
        ModelResponseStreamEvent,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.profiles import ModelProfile
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RequestUsage
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from tiered_router.integrations._common import missing

    raise missing("pydantic-ai", "pydantic-ai-slim", exc) from exc

__all__ = ["TieredPydanticAIModel"]

_FinishReason = Literal["stop", "length", "content_filter", "tool_call", "error"]
_FINISH: dict[str, _FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
}
_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "stop_sequences": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "parallel_tool_calls": "parallel_tool_calls",
}
_PROVIDER = "tiered-router"


class TieredPydanticAIModel(Model):
    """A pydantic-ai model backed by a :class:`~tiered_router.Router`.

    Args:
        router: The router every request goes through.
        name: The model name reported to pydantic-ai.
        settings: Default model settings.
        profile: A model profile overriding the default one (tools, JSON schema and JSON
            object output supported).

    """

    _announces_lookalike_notes = False

    def __init__(
        self,
        router: Router,
        *,
        name: str = "tiered-router",
        settings: ModelSettings | None = None,
        profile: ModelProfile | None = None,
    ) -> None:
        self.router = router
        self._name = name
        super().__init__(
            settings=settings,
            profile=profile
            or ModelProfile(
                supports_tools=True,
                supports_json_schema_output=True,
                supports_json_object_output=True,
            ),
        )

    @property
    def model_name(self) -> str:
        """The model name."""
        return self._name

    @property
    def system(self) -> str:
        """The provider name reported to pydantic-ai."""
        return _PROVIDER

    def __repr__(self) -> str:
        return f"TieredPydanticAIModel({self.router!r})"

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Route one request and return pydantic-ai's ``ModelResponse``."""
        settings, params = self.prepare_request(model_settings, model_request_parameters)
        routed = await self.router.acomplete(_turn(messages, settings, params))
        return _response(routed)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """Route one request as a stream."""
        settings, params = self.prepare_request(model_settings, model_request_parameters)
        stream = self.router.astream(_turn(messages, settings, params))
        await stream.start()
        yield _TieredStreamedResponse(
            model_request_parameters=params, _name=self._name, _stream=stream
        )


@dataclass
class _TieredStreamedResponse(StreamedResponse):
    _name: str
    _stream: AsyncRoutedStream
    _timestamp: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        async for piece in self._stream:
            if piece.text:
                for event in self._parts_manager.handle_text_delta(
                    vendor_part_id="content", content=piece.text
                ):
                    yield event
            for delta in piece.tool_calls:
                for event in self._parts_manager.handle_tool_call_delta_events(
                    vendor_part_id=delta.index,
                    tool_name=delta.name,
                    args=delta.arguments or None,
                    tool_call_id=delta.id,
                ):
                    yield event
            if piece.usage is not None:
                self._usage = _usage(piece.usage)
            if piece.finish_reason is not None:
                self.finish_reason = _FINISH.get(piece.finish_reason)
        result = self._stream.result
        self.provider_details = {METADATA_KEY: decision_metadata(result)}

    async def close_stream(self) -> None:
        """Nothing to close: the router's stream ends with its iteration."""

    @property
    def model_name(self) -> str:
        """The model name."""
        return self._name

    @property
    def provider_name(self) -> str:
        """The provider name."""
        return _PROVIDER

    @property
    def provider_url(self) -> None:
        """No single URL: the router picks the backend."""
        return None

    @property
    def timestamp(self) -> datetime:
        """When the stream started."""
        return self._timestamp


# -- conversion ---------------------------------------------------------------------------------


def _turn(
    messages: list[ModelMessage],
    settings: ModelSettings | None,
    params: ModelRequestParameters,
) -> Turn:
    chat = _messages(messages, params)
    tools = [_tool(t) for t in (*params.declared_function_tools, *params.output_tools)]
    options: dict[str, Any] = dict(settings or {})
    extra = dict(options.get("extra_body") or {})
    signals = signals_of(extra.pop(METADATA_KEY, None))
    call_params: dict[str, Any] = {}
    for key, name in _SETTINGS.items():
        if options.get(key) is not None and (key != "parallel_tool_calls" or tools):
            call_params[name] = options[key]
    if extra:
        call_params["extra_body"] = extra
    if tools and not params.allow_text_output:
        call_params["tool_choice"] = "required"
    response_format: dict[str, Any] | None = None
    if params.output_mode == "native" and params.output_object is not None:
        o = params.output_object
        spec: dict[str, Any] = {"name": o.name or "final_result", "schema": o.json_schema}
        if o.description:
            spec["description"] = o.description
        if o.strict is not None:
            spec["strict"] = o.strict
        response_format = {"type": "json_schema", "json_schema": spec}
    elif params.output_mode == "prompted":
        response_format = {"type": "json_object"}
    metadata = dict(signals.get("metadata") or {})
    if signals.get("task_id") is not None:
        metadata.setdefault("task_id", signals["task_id"])
    return Turn(
        chat,
        tools=tools or None,
        response_format=response_format,
        final=bool(signals.get("final", False)),
        step=signals.get("step"),
        metadata=metadata,
        params=call_params,
    )


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    fn: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description or "",
        "parameters": tool.parameters_json_schema,
    }
    if tool.strict is not None:
        fn["strict"] = tool.strict
    return {"type": "function", "function": fn}


def _instructions(messages: list[ModelMessage], params: ModelRequestParameters) -> str | None:
    if params.instruction_parts is not None:
        text = "\n\n".join(p.content for p in params.instruction_parts if p.content)
        return text or None
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            return message.instructions
    return None


def _messages(messages: list[ModelMessage], params: ModelRequestParameters) -> list[Any]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            out.extend(_request_messages(message))
        elif isinstance(message, ModelResponse):
            mapped = _response_message(message)
            if mapped is not None:
                out.append(mapped)
    instructions = _instructions(messages, params)
    if instructions:
        lead = 0
        while lead < len(out) and out[lead]["role"] == "system":
            lead += 1
        out.insert(lead, {"role": "system", "content": instructions})
    return out


def _request_messages(message: ModelRequest) -> Iterator[dict[str, Any]]:
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            yield {"role": "system", "content": part.content}
        elif isinstance(part, UserPromptPart):
            yield {"role": "user", "content": _user_content(part.content)}
        elif isinstance(part, ToolReturnPart):
            yield {
                "role": "tool",
                "tool_call_id": part.tool_call_id,
                "content": part.model_response_str(),
            }
        # other parts (settings deltas, files a text-only router cannot send) carry no text


def _user_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [item if isinstance(item, str) else getattr(item, "content", None) for item in content]
    return "\n".join(t for t in texts if isinstance(t, str))


def _response_message(message: ModelResponse) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": part.tool_call_id,
                    "type": "function",
                    "function": {"name": part.tool_name, "arguments": part.args_as_json_str()},
                }
            )
    if not texts and not calls:
        return None
    out: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def _usage(usage: Usage) -> RequestUsage:
    return RequestUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)


def _response(routed: RoutedResult) -> ModelResponse:
    completion: Completion = routed.completion
    parts: list[ModelResponsePart] = []
    if completion.text:
        parts.append(TextPart(content=completion.text))
    for call in completion.tool_calls:
        parts.append(ToolCallPart(tool_name=call.name, args=call.arguments, tool_call_id=call.id))
    details: dict[str, Any] = {METADATA_KEY: decision_metadata(routed)}
    if completion.finish_reason is not None:
        details["finish_reason"] = completion.finish_reason
    return ModelResponse(
        parts=parts,
        usage=_usage(completion.usage),
        model_name=completion.model or None,
        provider_name=_PROVIDER,
        provider_details=details,
        finish_reason=_FINISH.get(completion.finish_reason or ""),
    )
