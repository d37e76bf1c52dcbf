"""OpenAI Agents SDK: a ``Model`` and a ``ModelProvider`` that route through a :class:`Router`.

Install with ``pip install ".[openai-agents]"`` from a checkout.

Example:
    ```python
    from agents import Agent, RunConfig, Runner
    from tiered_router.integrations.openai_agents import TieredModelProvider

    provider = TieredModelProvider(router)
    result = await Runner.run(agent, "...", run_config=RunConfig(model_provider=provider))
    ```

Or give one agent the model: ``Agent(name=..., model=TieredAgentsModel(router))``.

The SDK's Responses-shaped input items, function tools, handoffs and output schema are
turned into a chat turn with the SDK's own Chat Completions converter, so the gate checks
tool arguments and the final output's JSON schema inside ``Runner.run``. Agent signals ride
in ``ModelSettings(extra_body={"tiered_router": {"final": True}})``. The routing decision
lands in each output item's ``provider_data["tiered_router"]`` (``get_response``) and in the
streamed response's ``metadata`` (``stream_response``).

"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tiered_router.integrations._common import METADATA_KEY, decision_metadata, signals_of
from tiered_router.router import Router
from tiered_router.turn import Completion, CompletionChunk, Turn

try:
    from agents.agent_output import AgentOutputSchemaBase
    from agents.handoffs import Handoff
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.model_settings import ModelSettings
    from agents.models.chatcmpl_converter import Converter
    from agents.models.chatcmpl_stream_handler import ChatCmplStreamHandler
    from agents.models.fake_id import FAKE_RESPONSES_ID
    from agents.models.interface import Model, ModelProvider, ModelTracing
    from agents.tool import Tool
    from agents.usage import Usage as AgentsUsage
    from openai import AsyncStream
    from openai.types.chat import (
        ChatCompletionChunk,
        ChatCompletionMessage,
        ChatCompletionMessageFunctionToolCall,
    )
    from openai.types.chat.chat_completion_chunk import (
        Choice,
        ChoiceDelta,
        ChoiceDeltaToolCall,
        ChoiceDeltaToolCallFunction,
    )
    from openai.types.chat.chat_completion_message_function_tool_call import Function
    from openai.types.completion_usage import CompletionUsage
    from openai.types.responses import Response
    from openai.types.responses.response_prompt_param import ResponsePromptParam
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from tiered_router.integrations._common import missing

    raise missing("openai-agents", "openai-agents", exc) from exc

__all__ = ["TieredAgentsModel", "TieredModelProvider"]

_SETTINGS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "max_tokens")
_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


class TieredAgentsModel(Model):
    """An Agents SDK model whose every call goes through a :class:`~tiered_router.Router`.

    Args:
        router: The router.
        name: The model name reported to the SDK (traces, logs).

    """

    def __init__(self, router: Router, *, name: str = "tiered-router") -> None:
        self.router = router
        self.name = name

    def __repr__(self) -> str:
        return f"TieredAgentsModel({self.router!r})"

    def _turn(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
    ) -> Turn:
        messages: list[Any] = list(Converter.items_to_messages(input))
        if system_instructions:
            messages.insert(0, {"role": "system", "content": system_instructions})
        specs: list[Any] = [Converter.tool_to_openai(t) for t in tools]
        specs += [Converter.convert_handoff_tool(h) for h in handoffs]
        params: dict[str, Any] = {}
        for key in _SETTINGS:
            value = getattr(model_settings, key)
            if value is not None:
                params[key] = value
        choice = Converter.convert_tool_choice(model_settings.tool_choice)
        if specs and isinstance(choice, (str, Mapping)):
            params["tool_choice"] = choice
        if specs and model_settings.parallel_tool_calls is not None:
            params["parallel_tool_calls"] = model_settings.parallel_tool_calls
        body = model_settings.extra_body
        extra: dict[str, Any] = dict(body) if isinstance(body, Mapping) else {}
        signals = signals_of(extra.pop(METADATA_KEY, None))
        if extra:
            params["extra_body"] = extra
        params.update(model_settings.extra_args or {})
        response_format = Converter.convert_response_format(output_schema)
        metadata = dict(signals.get("metadata") or {})
        if signals.get("task_id") is not None:
            metadata.setdefault("task_id", signals["task_id"])
        return Turn(
            messages,
            tools=specs or None,
            response_format=response_format if isinstance(response_format, Mapping) else None,
            final=bool(signals.get("final", False)),
            step=signals.get("step"),
            metadata=metadata,
            params=params,
        )

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
    ) -> ModelResponse:
        """Route one model call and return it as the SDK's ``ModelResponse``."""
        turn = self._turn(
            system_instructions, input, model_settings, tools, output_schema, handoffs
        )
        routed = await self.router.acomplete(turn)
        completion = routed.completion
        provider_data = {"model": completion.model, METADATA_KEY: decision_metadata(routed)}
        items = Converter.message_to_output_items(_message(completion), provider_data=provider_data)
        usage = completion.usage
        return ModelResponse(
            output=items,
            usage=AgentsUsage(
                requests=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
            ),
            response_id=None,
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Route one model call as a stream of the SDK's Responses events."""
        turn = self._turn(
            system_instructions, input, model_settings, tools, output_schema, handoffs
        )
        stream = self.router.astream(turn)
        await stream.start()
        response = Response(
            id=FAKE_RESPONSES_ID,
            created_at=time.time(),
            model=self.name,
            object="response",
            output=[],
            tool_choice="auto",
            top_p=model_settings.top_p,
            temperature=model_settings.temperature,
            tools=[],
            parallel_tool_calls=bool(model_settings.parallel_tool_calls),
            metadata={
                "tiered_router_tier": stream.tier or stream.decision.tier,
                "tiered_router_rule": stream.decision.rule or "",
                "tiered_router_score": f"{stream.decision.score:.4f}",
            },
        )
        chat_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        async def chunks() -> AsyncIterator[ChatCompletionChunk]:
            async for piece in stream:
                yield _chat_chunk(piece, chat_id)

        events = ChatCmplStreamHandler.handle_stream(
            response, _as_stream(chunks()), model=self.name
        )
        async for event in events:
            if event.type == "response.completed":
                result = stream.result
                event.response.metadata = {
                    **(event.response.metadata or {}),
                    "tiered_router_tier": result.tier,
                    "tiered_router_escalated": str(result.escalated).lower(),
                    "tiered_router_backend": result.trace.backend or "",
                }
            yield event


class TieredModelProvider(ModelProvider):
    """A ``ModelProvider`` that serves every model name with a :class:`TieredAgentsModel`.

    Example:
        ```python
        run_config = RunConfig(model_provider=TieredModelProvider(router))
        ```

    Args:
        router: The router.

    """

    def __init__(self, router: Router) -> None:
        self.router = router

    def get_model(self, model_name: str | None) -> Model:
        """Return the routed model (the name is only reported, routing is the policy's)."""
        return TieredAgentsModel(self.router, name=model_name or "tiered-router")


def _message(completion: Completion) -> ChatCompletionMessage:
    calls: list[Any] = [
        ChatCompletionMessageFunctionToolCall(
            id=c.id, type="function", function=Function(name=c.name, arguments=c.arguments)
        )
        for c in completion.tool_calls
    ]
    return ChatCompletionMessage(
        role="assistant",
        content=completion.text or None,
        refusal=completion.refusal,
        tool_calls=calls or None,
    )


def _chat_chunk(piece: CompletionChunk, chat_id: str) -> ChatCompletionChunk:
    calls = [
        ChoiceDeltaToolCall(
            index=d.index,
            id=d.id,
            type="function" if d.id else None,
            function=ChoiceDeltaToolCallFunction(name=d.name, arguments=d.arguments),
        )
        for d in piece.tool_calls
    ]
    finish = piece.finish_reason if piece.finish_reason in _FINISH else None
    usage = None
    if piece.usage is not None:
        usage = CompletionUsage(
            prompt_tokens=piece.usage.input_tokens,
            completion_tokens=piece.usage.output_tokens,
            total_tokens=piece.usage.total_tokens,
        )
    return ChatCompletionChunk(
        id=chat_id,
        object="chat.completion.chunk",
        created=int(time.time()),
        model=piece.model or "tiered-router",
        choices=[
            Choice(
                index=0,
                delta=ChoiceDelta(content=piece.text or None, tool_calls=calls or None),
                finish_reason=finish,  # type: ignore[arg-type]  # checked against _FINISH
            )
        ],
        usage=usage,
    )


def _as_stream(chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncStream[ChatCompletionChunk]:
    # the handler only iterates its stream; an async iterator of chunks is all it reads
    return chunks  # type: ignore[return-value]
