"""The :class:`Check` protocol: what the gate runs on every draft."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tiered_router.turn import Completion, Turn

__all__ = ["Check", "CheckFactory", "CheckResult", "check_name"]

CheckResult = str | Iterable[str] | None
"""What a check returns: ``None`` (or an empty iterable) when the draft passes, one reason
string when it fails, or an iterable of reason strings when it found several failures."""


class Check(Protocol):
    """One deterministic test of a draft.

    A check is any callable ``check(completion, turn)``. It must be pure (no I/O, no clock,
    no randomness) and should be fast: it runs on every draft.

    It returns ``None`` when the draft passes; a ``str`` (the reason) when it fails; or,
    when it can find several failures at once, an iterable of reasons (an empty iterable
    is a pass). Reasons say where, when there is a where: ``$.answer: 'answer' is a required
    property``. A check never raises to say "fail"; if it raises anyway, the gate reports
    the exception as a failure of that check.

    A check may carry a ``name`` attribute; otherwise the gate uses its ``__name__`` (or
    the name it was registered under, see :func:`register_check`).

    A check may also have a ``needs_whole_draft(turn) -> bool`` method: ``False`` when it
    can judge a draft that was streamed straight through to the caller (``non_empty``,
    ``not_truncated``...), so routed streams need not buffer the draft for it. Without the
    method a check needs the whole draft.

    Example:
        ```python
        def no_todo(completion: Completion, turn: Turn) -> str | None:
            return "draft contains TODO" if "TODO" in completion.text else None

        gate = QualityGate(["non_empty", no_todo])
        ```
    """

    def __call__(self, completion: Completion, turn: Turn, /) -> CheckResult:
        """Return ``None`` on pass, else the reason(s) the draft failed."""
        ...


CheckFactory = Callable[..., Check]
"""Builds a :class:`Check` from the options of the policy's ``{name: {options}}`` form."""


def check_name(check: Any) -> str:
    """Return the display name of a check object: its ``name``, ``__name__`` or class name."""
    name = getattr(check, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(check, "__name__", None)
    if isinstance(name, str) and name and name != "<lambda>":
        return name
    return type(check).__name__
