"""The shape checks of a caller's messages and ``tool_choice``, once, when a turn is built.

Every face (the proxy, the drop-in client, :class:`~tiered_router.Turn` in process) builds a
turn, and the turn checks its messages here: what OpenAI's Chat Completions API refuses is
refused as :class:`~tiered_router.InvalidRequest` (400 through the proxy) before any attempt,
so no dialect ever shapes a request it cannot read and no breaker ever counts a caller's
mistake. A message:

- has a ``role`` among :data:`ROLES` (``function``, the deprecated function-calling result,
  is refused with what to send instead: no built-in dialect takes it, and it cannot be turned
  into a ``tool`` message without the call id it lacks);
- has ``content`` that is a string, null, or a list of parts, each a string or an object
  whose ``type`` (when given) is a string and whose ``text`` (for a ``text`` part) is one;
- carries ``tool_calls`` only as an assistant, each an object whose ``function`` is an
  object with a non-empty string ``name`` and a string ``arguments`` (``id`` a string and
  ``type`` ``"function"`` when given), and ``function_call`` only in that shape too;
- has ``name`` and ``tool_call_id`` as strings when it has them;
- holds no ``NaN`` or infinite number.

``tool_choice`` is ``"none"``, ``"auto"``, ``"required"``, a named function
(``{"type": "function", "function": {"name": ...}}``) or an allowed set
(``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools":
[...]}}``, each tool a named function).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tiered_router._limits._data import kind
from tiered_router._limits._request import check_finite
from tiered_router.exceptions import InvalidRequest

__all__ = ["ROLES", "check_message", "check_params", "check_tool_choice"]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
"""The message roles a turn takes (OpenAI's chat roles but the deprecated ``function``)."""
_CHOICES = ("none", "auto", "required")
_MODES = ("auto", "required")


def _refuse(where: str, what: str, code: str = "invalid_type") -> InvalidRequest:
    return InvalidRequest(f"{where}: {what}", param=where, code=code)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) and len(value) <= 40 else kind(value)


def check_message(message: Mapping[str, Any], index: int) -> None:
    """Refuse a message OpenAI's API refuses (see the module docstring).

    Raises:
        InvalidRequest: Naming where (``messages[i].role``, ``messages[i].content[j].text``,
            ``messages[i].tool_calls[j].function.arguments``...).

    """
    at = f"messages[{index}]"
    role = message.get("role")
    if role == "function":
        raise _refuse(
            f"{at}.role",
            "'function' (the deprecated function-calling result) is not accepted: send the "
            "result as a 'tool' message with the tool_call_id of the assistant's call",
            "invalid_value",
        )
    if role not in ROLES:
        raise _refuse(
            f"{at}.role",
            f"{_shown(role)} is not a role; one of {', '.join(sorted(ROLES))}",
            "invalid_value",
        )
    _check_content(message.get("content"), f"{at}.content")
    for field in ("name", "tool_call_id"):
        value = message.get(field)
        if value is not None and not isinstance(value, str):
            raise _refuse(f"{at}.{field}", f"must be a string, got {kind(value)}")
    calls = message.get("tool_calls")
    if calls is not None:
        _check_calls(calls, role, f"{at}.tool_calls")
    legacy = message.get("function_call")
    if legacy is not None:
        _check_function(legacy, f"{at}.function_call")
    check_finite(message, at)


def _check_content(content: Any, where: str) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _refuse(where, f"must be a string or a list of content parts, got {kind(content)}")
    for j, part in enumerate(content):
        if isinstance(part, str):
            continue
        if not isinstance(part, dict):
            raise _refuse(f"{where}[{j}]", f"must be a content part object, got {kind(part)}")
        part_type = part.get("type")
        if part_type is not None and not isinstance(part_type, str):
            raise _refuse(f"{where}[{j}].type", f"must be a string, got {kind(part_type)}")
        text = part.get("text")
        if part_type in (None, "text") and not isinstance(text, str):
            raise _refuse(f"{where}[{j}].text", f"must be a string, got {kind(text)}")


def _check_calls(calls: Any, role: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise _refuse(where, f"must be a list of tool calls, got {kind(calls)}")
    if calls and role != "assistant":
        raise _refuse(where, f"only an assistant message carries tool calls, not {role!r}")
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise _refuse(at, f"must be a tool call object, got {kind(call)}")
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise _refuse(f"{at}.id", f"must be a string, got {kind(call_id)}")
        call_type = call.get("type")
        if call_type is not None and call_type != "function":
            raise _refuse(f"{at}.type", f"must be 'function', got {_shown(call_type)}")
        _check_function(call.get("function"), f"{at}.function")


def _check_function(fn: Any, where: str) -> None:
    if not isinstance(fn, dict):
        raise _refuse(where, f"must be an object with a name and arguments, got {kind(fn)}")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise _refuse(f"{where}.name", f"must be a non-empty string, got {_shown(name)}")
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        raise _refuse(f"{where}.arguments", f"must be a string (JSON text), got {kind(arguments)}")


def check_params(params: Mapping[str, Any] | None) -> None:
    """Check a turn's ``tool_choice`` (and one given in ``extra_body``).

    Raises:
        InvalidRequest: See :func:`check_tool_choice`.

    """
    if not params:
        return
    check_tool_choice(params.get("tool_choice"))
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        check_tool_choice(extra.get("tool_choice"), "extra_body.tool_choice")


def check_tool_choice(choice: Any, param: str = "tool_choice") -> None:
    """Refuse a ``tool_choice`` OpenAI's API refuses (see the module docstring).

    Raises:
        InvalidRequest: Naming ``param`` or the part of it at fault.

    """
    if choice is None or choice in _CHOICES:
        return
    if isinstance(choice, str):
        raise _refuse(
            param, f"{_shown(choice)} is not one of {', '.join(_CHOICES)}", "invalid_value"
        )
    if not isinstance(choice, dict):
        raise _refuse(param, f"must be a string or an object, got {kind(choice)}")
    kind_of = choice.get("type")
    if kind_of == "function":
        _named(choice, param)
        return
    if kind_of != "allowed_tools":
        raise _refuse(
            f"{param}.type",
            f"{_shown(kind_of)} is not a tool_choice type; 'function' or 'allowed_tools'",
            "invalid_value",
        )
    allowed = choice.get("allowed_tools")
    where = f"{param}.allowed_tools"
    if not isinstance(allowed, dict):
        raise _refuse(where, f"must be an object, got {kind(allowed)}")
    if allowed.get("mode") not in _MODES:
        raise _refuse(
            f"{where}.mode", f"must be 'auto' or 'required', got {_shown(allowed.get('mode'))}"
        )
    tools = allowed.get("tools")
    if not isinstance(tools, list):
        raise _refuse(f"{where}.tools", f"must be a list of tools, got {kind(tools)}")
    for j, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _refuse(f"{where}.tools[{j}]", f"must be a tool object, got {kind(tool)}")
        if isinstance(tool.get("name"), str) and "function" not in tool:  # Responses' shape
            continue
        _named(tool, f"{where}.tools[{j}]")


def _named(choice: dict[str, Any], where: str) -> None:
    fn = choice.get("function")
    if not isinstance(fn, dict):
        raise _refuse(f"{where}.function", f"must be an object with a name, got {kind(fn)}")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise _refuse(f"{where}.function.name", f"must be a non-empty string, got {_shown(name)}")
