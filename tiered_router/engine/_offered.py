"""What the caller may receive as tool calls: only offered tools, with JSON-object arguments.

Whichever tier wrote a draft and however its calls were made (a native server's
``tool_calls``, calls lifted from text by the gate or by a prompted-tools dialect), the
engine checks the calls it is about to return: each must name a tool the turn offers (and
its ``tool_choice`` allows: not under ``"none"``, the named one, one of an ``allowed_tools``
set) and
carry arguments that parse as a JSON object (strict JSON: no ``NaN``, no number beyond a
float's range such as ``1e400``, no key given twice, no lone surrogate; an empty string,
which servers send for a call without arguments, counts as ``{}``). A draft with any other
call fails the gate (``tool_arguments``), even where the policy's gate would not have
checked it, and is never returned with those calls: ``when_frontier_fails_gate: raise``
raises ``GateFailed``, ``return`` returns its text without the calls (``finish_reason``
``stop``; the attempt's conversions say so). Pure.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from tiered_router.calls._choice import describe_choice, outside_choice
from tiered_router.gate._schema import parse_strict_json
from tiered_router.gate._verdict import CheckFailure, Verdict
from tiered_router.turn import Completion, CompletionChunk, ToolCall, ToolCallDelta, Turn

__all__ = [
    "DROPPED_CALLS",
    "CallHold",
    "call_problems",
    "checked_verdict",
    "unconfirmed",
    "whole_calls",
    "without_calls",
]

DROPPED_CALLS = "tool calls to tools not offered, or with arguments not JSON, dropped"
"""The conversion recorded when a returned draft's calls were taken off."""

_CHECK = "tool_arguments"


def call_problems(completion: Completion, turn: Turn) -> tuple[str, ...]:
    """Why ``completion``'s tool calls may not reach the caller (empty when they may).

    A tool the turn's ``tool_choice`` leaves out (``"none"``, a named function, an
    ``allowed_tools`` set) was not offered for this turn either.
    """
    if not completion.tool_calls:
        return ()
    offered = {tool.name for tool in turn.tools or ()}
    choice = turn.params.get("tool_choice")
    if choice == "none":
        return ("tool_calls: tool_choice is 'none' but the draft called a tool",)
    left_out = outside_choice(choice, (call.name for call in completion.tool_calls))
    problems = (
        _call_problem(i, call, offered, left_out, choice)
        for i, call in enumerate(completion.tool_calls)
    )
    return tuple(p for p in problems if p is not None)


def _call_problem(
    i: int, call: ToolCall, offered: set[str], left_out: Collection[str], choice: object
) -> str | None:
    """Why tool call ``i`` may not reach the caller, or ``None``."""
    if call.name not in offered:
        known = ", ".join(sorted(offered)) or "none"
        return f"tool_calls[{i}]: {call.name!r} is not an offered tool ({known})"
    if call.name in left_out:
        return f"tool_calls[{i}]: {call.name!r} is outside {describe_choice(choice)}"
    if not call.arguments.strip():
        return None
    try:
        args = parse_strict_json(call.arguments)
    except ValueError as exc:
        return f"tool_calls[{i}] ({call.name}): arguments are not JSON: {exc}"
    if not isinstance(args, dict):
        return f"tool_calls[{i}] ({call.name}): arguments are not a JSON object"
    return None


def checked_verdict(verdict: Verdict | None, problems: tuple[str, ...]) -> Verdict | None:
    """``verdict``, failed for ``problems`` when it did not fail on the calls already."""
    if not problems or (verdict is not None and _CHECK in verdict.failed_checks):
        return verdict
    failures = tuple(CheckFailure(check=_CHECK, reason=p) for p in problems)
    if verdict is None:
        return Verdict(passed=False, failures=failures, checks=(_CHECK,))
    checks = verdict.checks if _CHECK in verdict.checks else (*verdict.checks, _CHECK)
    return Verdict(passed=False, failures=(*verdict.failures, *failures), checks=checks)


def unconfirmed(verdict: Verdict | None, why: str) -> Verdict:
    """``verdict`` failed on the check ``panel``: the panel did not confirm the draft.

    A draft kept when the panel's drafts disagree (or its deferral model defers) is never
    returned as verified: ``when_frontier_fails_gate: raise`` raises ``GateFailed``.
    """
    failure = CheckFailure(check="panel", reason=why)
    if verdict is None:
        return Verdict(passed=False, failures=(failure,), checks=("panel",))
    return Verdict(
        passed=False, failures=(*verdict.failures, failure), checks=(*verdict.checks, "panel")
    )


def without_calls(completion: Completion) -> Completion:
    """``completion`` with its tool calls taken off: its text is what the caller gets."""
    return replace(
        completion,
        tool_calls=(),
        finish_reason="stop",
        conversions=(*completion.conversions, DROPPED_CALLS),
    )


def whole_calls(
    chunks: list[CompletionChunk], completion: Completion
) -> list[CompletionChunk] | None:
    """``chunks`` with their tool-call fragments replaced by ``completion``'s checked calls.

    The calls go out whole, one delta each (index, id, name and arguments), where the first
    fragment was: whatever fragments a server sent (a name in two pieces, a repeated name,
    sparse indexes), the caller can rebuild only the calls that were checked. ``None`` when
    ``completion`` has calls and ``chunks`` no fragment to put them in place of.
    """
    calls = tuple(
        ToolCallDelta(index=i, id=c.id, name=c.name, arguments=c.arguments)
        for i, c in enumerate(completion.tool_calls)
    )
    out = []
    for chunk in chunks:
        if chunk.tool_calls:
            chunk, calls = replace(chunk, tool_calls=calls), ()
            if not (chunk.tool_calls or chunk.text or chunk.finish_reason or chunk.usage):
                if not (chunk.reasoning or chunk.refusal or chunk.conversions):
                    continue
        out.append(chunk)
    return None if calls else out


class CallHold:
    """Holds a live stream's chunks from its first tool-call fragment on.

    Text streams straight through; tool calls reach the caller only once the whole draft
    is known, and only when :func:`call_problems` finds nothing wrong with them. Servers
    write calls at the end of a reply, so little is held.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[CompletionChunk] | None = None

    def feed(self, chunk: CompletionChunk) -> list[CompletionChunk]:
        """The chunks to send now for ``chunk`` (none once holding)."""
        if self._held is None and not chunk.tool_calls:
            return [chunk]
        if self._held is None:
            self._held = []
        self._held.append(chunk)
        return []

    def release(self, problems: tuple[str, ...], checked: Completion) -> list[CompletionChunk]:
        """The held chunks: with ``checked``'s calls whole, or without calls for ``problems``."""
        held, self._held = self._held or [], None
        whole = None if problems else whole_calls(held, checked)
        if whole is not None:
            return whole
        out = []
        for chunk in held:
            finish = "stop" if chunk.finish_reason == "tool_calls" else chunk.finish_reason
            chunk = replace(chunk, tool_calls=(), finish_reason=finish)
            if chunk.text or chunk.finish_reason or chunk.usage or chunk.reasoning:
                out.append(chunk)
        return out
