"""The shape checks of a caller's request options, run once when a turn is built.

:func:`check_schema` checks a turn's schemas, :func:`check_turn_options` its ``step``,
``metadata``, ``n``, ``stop``, ``extra_body`` and ``response_format``; :func:`check_finite`
refuses ``NaN`` and ``Infinity`` anywhere in what would be sent upstream (JSON has no such
numbers: a server would get ``null``). A request the router could not send is refused as
:class:`~tiered_router.InvalidRequest` before any attempt, never retried as a backend failure
and never counted by a breaker.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tiered_router._limits._data import JSONTooDeep, check_depth, kind
from tiered_router.exceptions import InvalidRequest

__all__ = [
    "MAX_SCHEMA_BYTES",
    "MAX_STOP",
    "check_finite",
    "check_n",
    "check_object",
    "check_schema",
    "check_stop",
    "check_turn_options",
    "response_format_of",
]

MAX_SCHEMA_BYTES = 256 * 1024
"""Largest schema (``response_format``, a tool's ``parameters``) a turn may carry, serialised."""
MAX_STOP = 16
"""Most ``stop`` sequences a turn may give (OpenAI takes 4; local servers more)."""


def check_object(value: Any, param: str) -> None:
    """Refuse a ``value`` that is neither ``None`` nor a mapping (``invalid_type``)."""
    if value is not None and not isinstance(value, Mapping):
        raise InvalidRequest(
            f"{param}: must be an object, got {kind(value)}", param=param, code="invalid_type"
        )


def check_turn_options(
    *, step: Any, metadata: Any, params: Mapping[str, Any] | None, response_format: Any
) -> None:
    """Check a turn's ``step``, ``metadata``, ``params["n"]`` and ``response_format``.

    Raises:
        InvalidRequest: ``step`` not a non-negative integer, ``metadata`` not an object, a
            malformed ``n`` (:func:`check_n`) or ``stop`` (:func:`check_stop`), an
            ``extra_body`` that is not an object, ``NaN`` or ``Infinity`` among the params
            (:func:`check_finite`), a ``response_format`` that is not an object or too deep
            or large (:func:`check_schema`).

    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise InvalidRequest(
            f"Turn.step: must be a non-negative integer, got {step!r}", param="step"
        )
    check_object(metadata, "metadata")
    if params is not None:
        if params.get("n") is not None:
            check_n(params["n"])
        check_stop(params.get("stop"), "stop")
        extra = params.get("extra_body")
        check_object(extra, "extra_body")
        if extra:
            check_stop(extra.get("stop"), "extra_body.stop")
        check_finite(params, "")
    if response_format is not None:
        check_schema(response_format, "response_format")


def check_schema(value: Any, param: str, *, max_bytes: int = MAX_SCHEMA_BYTES) -> None:
    """Refuse a schema that is not an object, too deep, or larger than ``max_bytes``.

    Raises:
        InvalidRequest: Not an object or not JSON (``invalid_type``), too deep
            (``schema_too_deep``), too large (``schema_too_large``).

    """
    check_object(value, param)
    try:
        check_depth(value)
    except JSONTooDeep as exc:
        raise InvalidRequest(f"{param}: {exc}", param=param, code="schema_too_deep") from None
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"{param}: must be JSON data ({exc})", param=param, code="invalid_type"
        ) from None
    if size > max_bytes:
        raise InvalidRequest(
            f"{param}: {size} bytes, larger than {max_bytes}", param=param, code="schema_too_large"
        )
    check_finite(value, param)


def check_stop(value: Any, param: str = "stop") -> None:
    """Refuse a ``stop`` that is not ``None``, a string or a list of at most :data:`MAX_STOP`.

    Raises:
        InvalidRequest: Naming ``param`` (or ``param[i]`` for an item that is no string).

    """
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)):
        raise InvalidRequest(
            f"{param}: must be a string or a list of strings, got {kind(value)}",
            param=param,
            code="invalid_type",
        )
    if len(value) > MAX_STOP:
        raise InvalidRequest(
            f"{param}: {len(value)} sequences given, at most {MAX_STOP} accepted",
            param=param,
            code="invalid_value",
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidRequest(
                f"{param}[{i}]: must be a string, got {kind(item)}",
                param=f"{param}[{i}]",
                code="invalid_type",
            )


def _non_finite(value: Any) -> bool:
    """Whether ``value`` holds a float that is ``NaN`` or infinite (iterative walk)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _where_non_finite(value: Any, path: str) -> str:
    """The path of the first non-finite number in ``value`` (one is known to be there)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "body"
        if isinstance(item, Mapping):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return path or "body"  # pragma: no cover - only called when one is there


def check_finite(value: Any, param: str) -> None:
    """Refuse ``NaN`` and ``Infinity`` anywhere in ``value`` (JSON has no such numbers).

    A body read by Python's JSON parser may hold them (it reads ``NaN``, ``Infinity`` and
    ``1e400``), and a caller in process may pass them; sent on, they would reach the server
    as ``null``. The walk is iterative and runs once per turn.

    Raises:
        InvalidRequest: Naming where the number is (``temperature``,
            ``messages[0].content[1].x``...), ``code="invalid_value"``.

    """
    if _non_finite(value):
        where = _where_non_finite(value, param)
        raise InvalidRequest(
            f"{where}: NaN and Infinity are not JSON numbers; send a finite number",
            param=where,
            code="invalid_value",
        )


def check_n(value: Any, *, one: bool = False) -> None:
    """Refuse an ``n`` that is not a positive integer (``"2"``, ``2.0``, ``true``, ``0``, ``-1``).

    Args:
        value: The ``n`` given.
        one: Refuse anything but 1 too (the router returns one choice).

    Raises:
        InvalidRequest: Naming ``n``.

    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(
            f"n: must be an integer, got {kind(value)}", param="n", code="invalid_type"
        )
    if value < 1:
        raise InvalidRequest(f"n: must be at least 1, got {value}", param="n", code="invalid_value")
    if one and value != 1:
        raise InvalidRequest(
            "n: the router returns one choice; only n=1 is supported",
            param="n",
            code="unsupported_value",
        )


def response_format_of(value: Any) -> Any:
    """``value``, or a pydantic class (or dataclass) as OpenAI's strict ``json_schema`` format.

    openai-python's ``parse`` sends a class that way; a class given to ``create`` is taken
    the same way instead of failing deep inside scoring.
    """
    if not isinstance(value, type):
        return value
    try:
        from openai.lib._parsing._completions import type_to_response_format_param
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "openai":
            raise
        from tiered_router.exceptions import install_command

        raise ImportError(  # a class given to create: not a failure deep inside scoring
            f"response_format: a class ({value.__name__}) is turned into OpenAI's strict JSON "
            f"schema by the openai SDK, from the openai extra: {install_command('openai')}; "
            'or pass {"type": "json_schema", ...} as a dict'
        ) from None

    try:
        return type_to_response_format_param(value)
    except TypeError as exc:
        raise InvalidRequest(f"response_format: {exc}", param="response_format") from None
