"""Agent-aware signals read from the conversation itself: pure functions of a :class:`Turn`.

An agent re-sends its whole conversation on every model call, so much of what it knows is
visible to the router without the caller saying it: how many steps it has taken since the
user spoke, whether the model is about to read a tool result, whether it is looping (the
same tool call again and again, or tool error after tool error), and what kind of call this
is: planning, acting, observing a result, or answering.

Only the *window* is read: the messages after the last user message, where the current
request's agent loop lives. Nothing here keeps state or reads a clock; a task
(:mod:`tiered_router.task`) adds the memory across turns.

Example:
    ```python
    signals = agent_signals(turn)
    if signals.stalled:
        print(signals.stall_reason)   # "tool call search({'q': 'x'}) repeated 3 times"
    turn = annotate(turn)             # the same signals in turn.metadata, for rules and traces
    ```

"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tiered_router import _limits
from tiered_router._types import Message
from tiered_router.turn import Turn, message_text

__all__ = [
    "AgentSignals",
    "TurnRole",
    "agent_signals",
    "annotate",
    "is_tool_error",
    "tool_call_signature",
    "window_start",
]

TurnRole = Literal["plan", "act", "observe", "answer"]
"""What a model call does in an agent loop.

``plan``: the first call after the user spoke, with tools to choose from. ``act``: a later
call that is expected to call tools. ``observe``: the call right after tool results, which
reads them and decides what next. ``answer``: the call that produces the final answer
(``final=True``, or no tools to call).
"""

# metadata keys written by :func:`annotate` (never overwriting a key the caller set)
ROLE_KEY = "agent_role"
STEP_KEY = "agent_step"
AFTER_TOOL_KEY = "agent_after_tool_result"
STALL_KEY = "agent_stall"
REPEATS_KEY = "agent_repeated_calls"
ERRORS_KEY = "agent_tool_errors"

_ERROR_HEAD = re.compile(
    r"^\W{0,3}(error|exception|traceback|fail(?:ed|ure)?|invalid|unknown tool|not found|"
    r"an error occurred|tool .{0,40} failed)\b",
    re.IGNORECASE,
)
_ERROR_PHRASES = (
    "traceback (most recent call last)",
    "fix the errors and try again",
    "an error occurred while running the tool",
)
_SCAN_CHARS = 400


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSignals:
    """What the conversation says about the agent loop at this turn.

    Attributes:
        step: Model calls the agent made since the user last spoke (0 for the first).
        after_tool_result: The last message is a tool result.
        tool_results: Tool results among the trailing messages (0 when the last message is
            not a tool result).
        repeated_calls: How often the most repeated tool call of the latest assistant
            message was made in the window (0 when it called no tools).
        repeated_call: That call as ``name(arguments)``, when ``repeated_calls >= 2``.
        tool_errors: Tool results that read as errors, in a row, at the end of the window.
        stalled: The agent is looping: ``repeated_calls`` or ``tool_errors`` reached its limit.
        stall_reason: Why it counts as stalled (``""`` when it does not).
        role: The inferred role of this call, or ``None`` when it cannot be inferred.

    """

    step: int = 0
    after_tool_result: bool = False
    tool_results: int = 0
    repeated_calls: int = 0
    repeated_call: str | None = None
    tool_errors: int = 0
    stalled: bool = False
    stall_reason: str = ""
    role: TurnRole | None = None

    def to_metadata(self) -> dict[str, Any]:
        """Return the signals as the metadata keys :func:`annotate` writes."""
        out: dict[str, Any] = {
            STEP_KEY: self.step,
            AFTER_TOOL_KEY: self.after_tool_result,
            STALL_KEY: self.stalled,
            REPEATS_KEY: self.repeated_calls,
            ERRORS_KEY: self.tool_errors,
        }
        if self.role is not None:
            out[ROLE_KEY] = self.role
        return out


def window_start(messages: Sequence[Message]) -> int:
    """Return the index of the first message after the last user message (0 when none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i + 1
    return 0


def is_tool_error(message: Message) -> bool:
    """Tell whether a tool-result message reads as an error.

    Frameworks report a failed tool as a tool message whose text starts with ``Error``
    (LangGraph's ``ToolNode``), ``An error occurred while running the tool`` (OpenAI
    Agents SDK) or asks to ``Fix the errors and try again`` (pydantic-ai); a JSON object
    with a non-null top-level ``error`` counts too.

    Args:
        message: An OpenAI-shaped message.

    Returns:
        ``True`` for a ``tool`` message whose content reads as an error.

    """
    if message.get("role") != "tool":
        return False
    text = message_text(message).strip()
    if not text:
        return False
    if text.startswith("{") and len(text) < 10_000:
        try:
            value = _limits.loads(text)
        except ValueError:
            pass
        else:
            return isinstance(value, Mapping) and value.get("error") not in (None, "", False)
    head = text[:_SCAN_CHARS]
    if _ERROR_HEAD.match(head):
        return True
    lowered = head.lower()
    return any(phrase in lowered for phrase in _ERROR_PHRASES)


def tool_call_signature(call: Mapping[str, Any]) -> str:
    """Return ``name(arguments)`` of an OpenAI-shaped tool call, arguments canonicalised.

    JSON arguments are re-encoded with sorted keys, so ``{"a": 1, "b": 2}`` and
    ``{"b":2,"a":1}`` are the same call; arguments that are not JSON are compared as text.
    """
    fn = call.get("function", call)
    name = str(fn.get("name", "")) if isinstance(fn, Mapping) else ""
    raw = fn.get("arguments", "") if isinstance(fn, Mapping) else ""
    if not isinstance(raw, str):
        raw = json.dumps(raw, sort_keys=True, default=str)
    try:
        args = json.dumps(_limits.loads(raw), sort_keys=True, separators=(",", ":"))
    except ValueError:
        args = raw.strip()
    return f"{name}({args})"


def _calls(message: Message) -> list[Mapping[str, Any]]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, Mapping)]


def _infer_role(turn: Turn, *, step: int, after_tool: bool) -> TurnRole | None:
    if turn.final:
        return "answer"
    if after_tool:
        return "observe"
    if not turn.tools:
        last = turn.messages[-1].get("role")
        return "answer" if last in ("user", "tool", "system") else None
    choice = turn.params.get("tool_choice")
    if choice == "required" or isinstance(choice, Mapping):
        return "act"
    if choice == "none":
        return "answer"
    return "plan" if step == 0 else "act"


def agent_signals(
    turn: Turn, *, stall_repeated_calls: int = 2, stall_tool_errors: int = 2
) -> AgentSignals:
    """Read the agent signals of a turn from its conversation.

    Args:
        turn: The turn.
        stall_repeated_calls: The same tool call this many times in the window is a stall.
        stall_tool_errors: This many tool errors in a row at the end of the window is a stall.

    Returns:
        The signals. Pure: the same turn always gives the same signals.

    """
    messages = turn.messages
    start = window_start(messages)
    window = messages[start:]
    step = sum(1 for m in window if m.get("role") == "assistant")

    tool_results = 0
    for m in reversed(window):
        if m.get("role") != "tool":
            break
        tool_results += 1
    after_tool = tool_results > 0

    errors = 0
    for m in reversed(window):
        role = m.get("role")
        if role == "assistant":
            continue
        if role != "tool" or not is_tool_error(m):
            break
        errors += 1

    counts: dict[str, int] = {}
    latest: list[str] = []
    for m in window:
        if m.get("role") != "assistant":
            continue
        latest = [tool_call_signature(c) for c in _calls(m)]
        for sig in set(latest):
            counts[sig] = counts.get(sig, 0) + 1
    repeated, repeated_call = 0, None
    for sig in latest:
        if counts[sig] > repeated:
            repeated, repeated_call = counts[sig], sig

    reason = ""
    if repeated >= stall_repeated_calls:
        reason = f"tool call {_clip(repeated_call or '')} repeated {repeated} times"
    elif errors >= stall_tool_errors:
        reason = f"{errors} tool errors in a row"
    return AgentSignals(
        step=step,
        after_tool_result=after_tool,
        tool_results=tool_results,
        repeated_calls=repeated,
        repeated_call=repeated_call if repeated >= 2 else None,
        tool_errors=errors,
        stalled=bool(reason),
        stall_reason=reason,
        role=_infer_role(turn, step=step, after_tool=after_tool),
    )


def annotate(
    turn: Turn,
    *,
    step: int | None = None,
    signals: AgentSignals | None = None,
    stall_repeated_calls: int = 2,
    stall_tool_errors: int = 2,
) -> Turn:
    """Return the turn with its agent signals in ``metadata`` and its ``step`` filled.

    ``agent_step`` in the metadata is the turn's step: ``turn.step`` when set, else ``step``,
    else the step read from the conversation.

    Keys the caller already set are kept, and so is an explicit ``turn.step``, which makes
    ``annotate`` idempotent. The keys are ``agent_step``, ``agent_role``,
    ``agent_after_tool_result``, ``agent_stall``, ``agent_repeated_calls`` and
    ``agent_tool_errors``, so rules can match on them:
    ``{name: stalled, when: {metadata: {agent_stall: true}}, tier: frontier}``.

    Args:
        turn: The turn.
        step: The step index to use when ``turn.step`` is unset (default: the inferred one).
        signals: Signals already computed for this turn (default: computed here).
        stall_repeated_calls: As in :func:`agent_signals`.
        stall_tool_errors: As in :func:`agent_signals`.

    Returns:
        The annotated turn (same id).

    """
    if signals is None:
        signals = agent_signals(
            turn, stall_repeated_calls=stall_repeated_calls, stall_tool_errors=stall_tool_errors
        )
    metadata = dict(turn.metadata)
    new_step = turn.step if turn.step is not None else (signals.step if step is None else step)
    values = {**signals.to_metadata(), STEP_KEY: new_step}
    added = {k: v for k, v in values.items() if k not in metadata}
    if not added and new_step == turn.step:
        return turn
    metadata.update(added)
    return turn.with_updates(metadata=metadata, step=new_step)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
