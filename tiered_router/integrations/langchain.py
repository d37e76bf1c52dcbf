"""LangChain / LangGraph: a ``BaseChatModel`` that routes every call through a :class:`Router`.

Install with ``pip install ".[langchain]"`` from a checkout.

Example:
    ```python
    from langgraph.prebuilt import ToolNode, tools_condition
    from tiered_router import Router
    from tiered_router.integrations.langchain import TieredChatModel

    model = TieredChatModel(router=Router.from_yaml("policy.yaml"))
    reply = model.bind_tools([get_weather]).invoke("Weather in Oslo?")
    reply.response_metadata["tiered_router"]    # {"tier": "fast", "rule": None, ...}
    ```

Tools bound with :meth:`TieredChatModel.bind_tools` reach the router as tool specs and
``with_structured_output`` as a ``response_format``, so the quality gate checks tool
arguments and output schemas inside the agent's own loop, and a failing fast draft is
escalated before LangGraph ever sees it. Agent signals ride in the ``tiered_router``
keyword: ``model.invoke(messages, tiered_router={"final": True})`` or
``model.bind(tiered_router={"final": True})``; inside ``router.task()`` the task numbers the
steps.

"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, Literal, cast

from tiered_router.integrations._common import (
    METADATA_KEY,
    decision_metadata,
    missing,
    parse_arguments,
    signals_of,
)
from tiered_router.router import RoutedResult, Router
from tiered_router.turn import Completion, CompletionChunk, Turn, Usage

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForLLMRun,
        CallbackManagerForLLMRun,
    )
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        BaseMessage,
        InvalidToolCall,
        ToolCall,
        ToolCallChunk,
        convert_to_openai_messages,
    )
    from langchain_core.messages.ai import UsageMetadata
    from langchain_core.messages.tool import invalid_tool_call
    from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
    from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import BaseModel, ConfigDict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing("langchain", "langchain-core", exc) from exc

__all__ = ["TieredChatModel"]

# keyword arguments LangChain passes that are not chat.completions parameters
_DROP = frozenset({"ls_structured_output_format", "stream", "run_manager"})


class TieredChatModel(BaseChatModel):
    """A LangChain chat model backed by a :class:`~tiered_router.Router`.

    Supports ``invoke`` / ``ainvoke`` / ``stream`` / ``astream`` / ``batch``,
    :meth:`bind_tools`, :meth:`with_structured_output` and usage metadata. Each returned
    ``AIMessage`` carries the routing decision and its outcome in
    ``response_metadata["tiered_router"]`` (tier, rule, score, escalated, cost, ...).

    Example:
        ```python
        model = TieredChatModel(router=router)
        agent = create_react_agent(model, [search, calculator])
        with router.task("research-1") as task:
            agent.invoke({"messages": [("user", "...")]})
        ```

    Attributes:
        router: The router every call goes through.
        final: Mark every call of this model as the agent's final answer.

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    router: Router
    final: bool = False

    @property
    def _llm_type(self) -> str:
        return "tiered-router"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        tiers = self.router.policy.tiers
        return {"fast": tiers.fast, "frontier": tiers.frontier}

    # -- conversion ---------------------------------------------------------------------------

    def _turn(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: Any) -> Turn:
        options = dict(kwargs)
        signals = signals_of(options.pop(METADATA_KEY, None))
        tools = options.pop("tools", None)
        response_format = options.pop("response_format", None)
        params = {k: v for k, v in options.items() if k not in _DROP and v is not None}
        if stop:
            params["stop"] = stop
        metadata = dict(signals.get("metadata") or {})
        if signals.get("task_id") is not None:
            metadata.setdefault("task_id", signals["task_id"])
        converted = convert_to_openai_messages(messages)
        return Turn(
            converted if isinstance(converted, list) else [converted],
            tools=tools or None,
            response_format=response_format,
            final=bool(signals.get("final", self.final)),
            step=signals.get("step"),
            metadata=metadata,
            params=params,
        )

    @staticmethod
    def _tool_calls(completion: Completion) -> tuple[list[ToolCall], list[InvalidToolCall]]:
        valid: list[ToolCall] = []
        invalid: list[InvalidToolCall] = []
        for call in completion.tool_calls:
            args, error = parse_arguments(call)
            if args is None:
                invalid.append(
                    invalid_tool_call(name=call.name, args=call.arguments, id=call.id, error=error)
                )
            else:
                valid.append(ToolCall(name=call.name, args=args, id=call.id, type="tool_call"))
        return valid, invalid

    @staticmethod
    def _usage(usage: Usage) -> UsageMetadata:
        # the token details are NotRequired, but some langchain-core releases' stubs make
        # mypy ask for them; a cast states the shape without sending empty details
        return cast(
            "UsageMetadata",
            {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
            },
        )

    def _result(self, routed: RoutedResult) -> ChatResult:
        completion = routed.completion
        valid, invalid = self._tool_calls(completion)
        metadata: dict[str, Any] = {
            "model_name": completion.model,
            "finish_reason": completion.finish_reason,
            METADATA_KEY: decision_metadata(routed),
        }
        message = AIMessage(
            content=completion.text,
            tool_calls=valid,
            invalid_tool_calls=invalid,
            usage_metadata=self._usage(completion.usage),
            response_metadata=metadata,
        )
        return ChatResult(
            generations=[
                ChatGeneration(
                    message=message, generation_info={"finish_reason": completion.finish_reason}
                )
            ],
            llm_output={"model_name": completion.model, METADATA_KEY: metadata[METADATA_KEY]},
        )

    @staticmethod
    def _chunk(chunk: CompletionChunk) -> ChatGenerationChunk:
        calls = [
            ToolCallChunk(
                name=d.name, args=d.arguments, id=d.id, index=d.index, type="tool_call_chunk"
            )
            for d in chunk.tool_calls
        ]
        return ChatGenerationChunk(
            message=AIMessageChunk(content=chunk.text, tool_call_chunks=calls)
        )

    def _last_chunk(self, routed: RoutedResult) -> ChatGenerationChunk:
        completion = routed.completion
        return ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=self._usage(completion.usage),
                response_metadata={
                    "model_name": completion.model,
                    "finish_reason": completion.finish_reason,
                    METADATA_KEY: decision_metadata(routed),
                },
                chunk_position="last",
            ),
            generation_info={"finish_reason": completion.finish_reason},
        )

    # -- BaseChatModel ------------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(self.router.complete(self._turn(messages, stop, kwargs)))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(await self.router.acomplete(self._turn(messages, stop, kwargs)))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        stream = self.router.stream(self._turn(messages, stop, kwargs))
        for piece in stream:
            if not (piece.text or piece.tool_calls):
                continue
            chunk = self._chunk(piece)
            if run_manager is not None:
                run_manager.on_llm_new_token(piece.text, chunk=chunk)
            yield chunk
        yield self._last_chunk(stream.result)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        stream = self.router.astream(self._turn(messages, stop, kwargs))
        async for piece in stream:
            if not (piece.text or piece.tool_calls):
                continue
            chunk = self._chunk(piece)
            if run_manager is not None:
                await run_manager.on_llm_new_token(piece.text, chunk=chunk)
            yield chunk
        yield self._last_chunk(stream.result)

    # -- tools and structured output ----------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | bool | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (LangChain tools, functions, pydantic models or OpenAI tool dicts).

        Args:
            tools: The tools.
            tool_choice: ``"auto"``, ``"none"``, ``"required"`` / ``"any"`` / ``True``, a tool
                name, or an OpenAI ``tool_choice`` dict.
            **kwargs: Other arguments bound with the tools (``parallel_tool_calls``, ...).

        """
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        choice = _tool_choice(tool_choice)
        if choice is not None:
            kwargs["tool_choice"] = choice
        return self.bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        include_raw: bool = False,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """Return a runnable whose output follows ``schema`` (pydantic class, TypedDict or dict).

        Args:
            schema: The output schema.
            include_raw: Return ``{"raw", "parsed", "parsing_error"}`` instead.
            method: ``json_schema`` (a ``response_format`` the gate validates, the default),
                ``function_calling`` (a forced tool call) or ``json_mode``.
            strict: OpenAI's ``strict`` flag for ``json_schema``.
            **kwargs: Not supported; present for signature compatibility.

        """
        if kwargs:
            raise ValueError(f"unsupported arguments: {sorted(kwargs)}")
        if method == "function_calling":
            return super().with_structured_output(schema, include_raw=include_raw)
        fn = convert_to_openai_tool(schema)["function"]
        if method == "json_mode":
            response_format: dict[str, Any] = {"type": "json_object"}
        else:
            spec: dict[str, Any] = {"name": fn["name"], "schema": fn.get("parameters", {})}
            if fn.get("description"):
                spec["description"] = fn["description"]
            if strict is not None:
                spec["strict"] = strict
            response_format = {"type": "json_schema", "json_schema": spec}
        llm = self.bind(
            response_format=response_format,
            ls_structured_output_format={"kwargs": {"method": method}, "schema": schema},
        )
        parser: Runnable[Any, Any]
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            parser = PydanticOutputParser(pydantic_object=schema)
        else:
            parser = JsonOutputParser()
        if not include_raw:
            return llm | parser
        with_parsed = RunnablePassthrough.assign(
            parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
        )
        without = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | with_parsed.with_fallbacks(
            [without], exception_key="parsing_error"
        )


def _tool_choice(choice: str | bool | Mapping[str, Any] | None) -> Any:
    if choice is None or choice is False:
        return None
    if choice is True or choice in ("any", "required"):
        return "required"
    if choice in ("auto", "none"):
        return choice
    if isinstance(choice, str):
        return {"type": "function", "function": {"name": choice}}
    return dict(choice)
