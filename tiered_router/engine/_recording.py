"""Opt-in recording of a turn's request and each attempt's output into its trace.

With ``Router(policy, record=True)`` every trace carries a ``record``: the request (messages,
tools, response format, agent signals) and, per attempt, the draft it produced (text, tool
calls, finish reason; ``None`` for a failed call). ``tiered-router dataset from-traces``
turns such traces into an evaluation dataset, so a team's own traffic feeds ``calibrate``.

``record`` may instead be a redaction hook: a callable that receives the record (a plain
JSON-ready dict) and returns what to keep, or ``None`` to record nothing for that turn. A
hook that raises records nothing (never the unredacted record) and logs one warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from tiered_router.turn import Completion, Turn

__all__ = ["Redactor", "RecordOption", "build_record"]

logger = logging.getLogger(__name__)

Redactor = Callable[[dict[str, Any]], Mapping[str, Any] | None]
"""A redaction hook: the record in, what to keep out (``None``: keep nothing)."""

RecordOption = bool | Redactor
"""``Router(record=...)``: ``False`` (default), ``True``, or a redaction hook."""


def _output(completion: Completion | None) -> dict[str, Any] | None:
    if completion is None:
        return None
    return {
        "text": completion.text,
        "tool_calls": [c.to_openai() for c in completion.tool_calls] or None,
        "finish_reason": completion.finish_reason,
    }


def build_record(
    option: RecordOption, turn: Turn, drafts: Mapping[int, Completion], attempts: int
) -> Mapping[str, Any] | None:
    """Return the record of one turn under ``option`` (``None`` when not recording).

    Args:
        option: ``Router(record=...)``.
        turn: The turn.
        drafts: The draft of each attempt that produced one, by attempt index.
        attempts: How many attempts were made.

    """
    if option is False:
        return None
    record: dict[str, Any] = {
        "request": {
            "messages": [dict(m) for m in turn.messages],
            "tools": [t.to_openai() for t in turn.tools] if turn.tools else None,
            "response_format": (
                dict(turn.response_format) if turn.response_format is not None else None
            ),
            "final": turn.final,
            "step": turn.step,
        },
        "outputs": [_output(drafts.get(i)) for i in range(attempts)],
    }
    if option is True:
        return record
    try:
        kept = option(record)
    except Exception as exc:  # a broken hook must never leak the unredacted record
        logger.warning("the record redaction hook failed (%s): turn %s not recorded", exc, turn.id)
        return None
    return dict(kept) if kept is not None else None
