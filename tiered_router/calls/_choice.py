"""What a turn's ``tool_choice`` allows: which tools its calls may name, whether one is due.

OpenAI's Chat Completions ``tool_choice`` is ``"none"``, ``"auto"``, ``"required"``, a named
function (``{"type": "function", "function": {"name": ...}}``) or an allowed set
(``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}``,
each tool ``{"type": "function", "function": {"name": ...}}``). The lifting rules and the
gate's ``tool_arguments`` read it here, so both agree. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["allowed_names", "describe_choice", "outside_choice", "requires_call"]


def _name(tool: Any) -> str | None:
    if not isinstance(tool, Mapping):
        return None
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")  # Responses' shape
    return name if isinstance(name, str) else None


def _allowed(choice: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if choice.get("type") != "allowed_tools":
        return None
    allowed = choice.get("allowed_tools")
    return allowed if isinstance(allowed, Mapping) else {}


def allowed_names(choice: Any) -> frozenset[str] | None:
    """The tool names ``choice`` lets calls name; ``None`` when it does not narrow them.

    An allowed set whose entries cannot be read allows none of them (it fails closed).
    """
    if not isinstance(choice, Mapping):
        return None
    allowed = _allowed(choice)
    if allowed is not None:
        tools = allowed.get("tools")
        names = (_name(t) for t in (tools if isinstance(tools, list | tuple) else ()))
        return frozenset(n for n in names if n is not None)
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return frozenset({name}) if isinstance(name, str) else None


def outside_choice(choice: Any, names: Iterable[str]) -> list[str]:
    """The ``names`` a named function or an ``allowed_tools`` set leaves out, sorted, once."""
    allowed = allowed_names(choice)
    if allowed is None:
        return []
    return sorted({n for n in names if n not in allowed})


def requires_call(choice: Any) -> bool:
    """Whether ``choice`` asks for a call: ``"required"``, named, or ``allowed_tools`` required."""
    if choice == "required":
        return True
    if not isinstance(choice, Mapping):
        return False
    allowed = _allowed(choice)
    if allowed is not None:
        return allowed.get("mode") == "required"
    return allowed_names(choice) is not None


def describe_choice(choice: Any) -> str:
    """How reasons name ``choice``'s limit: ``tool_choice names 'x'`` or ``... allows 'x', 'y'``."""
    names = allowed_names(choice) or frozenset()
    if isinstance(choice, Mapping) and _allowed(choice) is not None:
        listed = ", ".join(repr(n) for n in sorted(names)) or "no tool"
        return f"tool_choice allowed_tools allows {listed}"
    return f"tool_choice names {', '.join(repr(n) for n in sorted(names))}"
