"""Tool calls read back from a prompted-tools reply: the tolerant entry point of the reader.

Servers without native tool calling get the tools in the prompt (the prompted-tools dialect,
:mod:`tiered_router.calls._protocol`) and answer with calls written as text. The reply is read
by the one reader of :mod:`tiered_router.calls._text`, under the same lifting rules as the
gate's strict entry point (the whole answer, offered tools, ``tool_choice``, arguments that
validate), with tolerance in syntax only: single-quoted (Python literal) call objects and a
last ``<tool_call>`` tag left unclosed are read too. A reply that is not only calls, or whose
calls break a rule, stays text, and the gate judges it as text (``tool_call_in_text`` fails
call syntax it could not lift). Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from typing import Any

from tiered_router.calls._text import ToolsLike, Validate, lifted, read_calls
from tiered_router.turn import Completion, ToolCall

__all__ = ["lift_prompted_calls", "read_tool_calls", "split_tool_calls"]


def split_tool_calls(
    text: str,
    tools: ToolsLike,
    *,
    id_prefix: str = "call_",
    tool_choice: Any = None,
    parallel_tool_calls: Any = None,
    validate: Validate | None = None,
) -> tuple[str, list[ToolCall]]:
    """Read the tool calls a reply is made of; return the remaining text and the calls.

    Args:
        text: The model's reply.
        tools: The offered tools (specs, OpenAI tool dicts or names).
        id_prefix: Call ids are ``id_prefix`` followed by the call's index; pass a prefix
            unique to the reply so that ids do not repeat across an agent's turns.
        tool_choice: The request's ``tool_choice``.
        parallel_tool_calls: The request's ``parallel_tool_calls``.
        validate: Checks a call's arguments against its tool's schema.

    Returns:
        ``("", calls)`` when the reply is only calls that may be lifted; ``(text, [])``
        otherwise.
    """
    done = lift_prompted_calls(
        Completion(text=text),
        tools,
        id_prefix=id_prefix,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        validate=validate,
    )
    return ("", list(done.tool_calls)) if done.tool_calls else (text, [])


def read_tool_calls(text: str, tools: ToolsLike) -> list[ToolCall]:
    """Return the tool calls :func:`split_tool_calls` reads in ``text`` (ids ``call_0``...).

    A reply with no readable call gives ``[]``.
    """
    return split_tool_calls(text, tools)[1]


def lift_prompted_calls(
    completion: Completion,
    tools: ToolsLike,
    *,
    id_prefix: str,
    tool_choice: Any = None,
    parallel_tool_calls: Any = None,
    validate: Validate | None = None,
) -> Completion:
    """``completion`` with the calls its reply is made of as tool calls (see the module).

    A leading ``<think>`` block becomes the reasoning (unless the completion has one); a
    reply that is not only liftable calls comes back unchanged (the same object).
    """
    if completion.tool_calls or not completion.text:
        return completion
    reading = read_calls(
        completion.text,
        tools,
        tolerant=True,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        validate=validate,
    )
    return lifted(completion, reading, id_prefix=id_prefix) if reading.calls else completion
