"""Context shared between the router and an active task (see ``tiered_router.task``)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tiered_router.routing import Decision
    from tiered_router.trace import Trace
    from tiered_router.turn import Turn

__all__ = ["CURRENT_TASK", "TaskHooks"]


class TaskHooks(Protocol):
    """What the router asks of the task a turn belongs to."""

    def prepare(self, turn: Turn) -> Turn:
        """Return the turn with task signals filled in (step, task id)."""
        ...

    def adjust(self, turn: Turn, decision: Decision) -> Decision:
        """Return the decision, changed by task state (stall, lock, budgets) when needed."""
        ...

    def observe(self, trace: Trace) -> None:
        """Take the finished turn's trace into the task's totals."""
        ...

    async def aobserve(self, trace: Trace) -> None:
        """Async twin of :meth:`observe`."""
        ...

    def charge(self, trace: Trace) -> None:
        """Add a background call's spend (a shadow call) to the task's budgets, not a turn."""
        ...

    async def acharge(self, trace: Trace) -> None:
        """Async twin of :meth:`charge`."""
        ...

    def refresh(self) -> None:
        """Read the task's shared totals again (a turn is about to be decided)."""
        ...

    async def arefresh(self) -> None:
        """Async twin of :meth:`refresh`."""
        ...


CURRENT_TASK: ContextVar[TaskHooks | None] = ContextVar("tiered_router_task", default=None)
"""The task whose turns are being routed in this context, if any."""
