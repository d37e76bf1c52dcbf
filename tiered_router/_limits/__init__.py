"""Limits and shape checks on what comes from outside (a caller's request, upstream answers).

The same limits hold for a caller's own request, whichever face it came through (the proxy,
the drop-in client, :class:`~tiered_router.Turn` in process): the turn is the one boundary
where every caller field is checked, once, when it is built (:mod:`._request` for its
options and schemas, :mod:`._messages` for its messages and ``tool_choice``). A request the
router could not send is refused as :class:`~tiered_router.InvalidRequest` before any
attempt, never retried as a backend failure and never counted by a breaker.

Untrusted JSON and model text are read within bounds (:mod:`._data`): nesting, digits,
finite numbers.
"""

from __future__ import annotations

from tiered_router._limits._data import (
    MAX_JSON_DEPTH,
    MAX_NUMBER_DIGITS,
    JSONTooDeep,
    bounded,
    brackets,
    check_depth,
    kind,
    loads,
    read_float,
    read_int,
)
from tiered_router._limits._messages import ROLES, check_message, check_params, check_tool_choice
from tiered_router._limits._request import (
    MAX_SCHEMA_BYTES,
    MAX_STOP,
    check_finite,
    check_n,
    check_object,
    check_schema,
    check_stop,
    check_turn_options,
    response_format_of,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NUMBER_DIGITS",
    "MAX_SCHEMA_BYTES",
    "MAX_STOP",
    "ROLES",
    "JSONTooDeep",
    "bounded",
    "brackets",
    "check_depth",
    "check_finite",
    "check_message",
    "check_n",
    "check_object",
    "check_params",
    "check_schema",
    "check_stop",
    "check_tool_choice",
    "check_turn_options",
    "kind",
    "loads",
    "read_float",
    "read_int",
    "response_format_of",
]
