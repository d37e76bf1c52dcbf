"""The gate's side of the lifting rules: calls written as text, validated by their schema.

The reader and its rules live in :mod:`tiered_router.calls._text`; the gate gives it the one
rule that needs a schema validator (a call's arguments must validate against its tool's
``parameters``, with the process-wide :class:`~tiered_router.gate.SchemaCache`). The
prompted-tools dialect of the backends reads replies with the same validator, so whichever
tier wrote a call as text, it is lifted under the same rules.
"""

from __future__ import annotations

from typing import Any

from tiered_router.calls._text import lift_text_tool_calls as _lift
from tiered_router.calls._text import read_turn_calls
from tiered_router.gate._schema import default_schema_cache
from tiered_router.turn import Completion, ToolSpec, Turn

__all__ = ["argument_problem", "lift_text_tool_calls", "unliftable_calls"]

_MAX_ERRORS = 3


def argument_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not validate against ``spec.parameters``, or ``None``."""
    if not spec.parameters:
        return None
    validator = default_schema_cache().validator(spec.parameters)
    errors = validator.errors(arguments, limit=_MAX_ERRORS)
    return "; ".join(errors) if errors else None


def lift_text_tool_calls(completion: Completion, turn: Turn) -> Completion:
    """Return ``completion`` with the calls its text holds as real tool calls.

    A draft that made no call, for a turn that offers tools, whose whole answer is calls
    under the lifting rules (see :mod:`tiered_router.calls._text`: no prose around them,
    not in reasoning or a Markdown fence, offered tools only, ``tool_choice`` honoured,
    arguments that validate against the tool's schema) comes back with those calls, no text
    and ``finish_reason="tool_calls"``; a leading ``<think>...</think>`` block becomes its
    ``reasoning``. Any other draft comes back unchanged (the same object).
    """
    return _lift(completion, turn, validate=argument_problem)


def unliftable_calls(completion: Completion, turn: Turn) -> str | None:
    """Why a draft whose whole answer is calls written as text cannot have them lifted.

    ``None`` when the draft made calls, holds no such text, or its calls may be lifted.
    """
    return read_turn_calls(completion, turn, validate=argument_problem).refused
