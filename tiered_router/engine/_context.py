"""What the engine asks of its surroundings: the router's ports and a turn's task.

:class:`EnginePorts` is what the machine and the planning read from the router (the policy,
the gate, the scorer, the clock, capability lookups; no I/O behind it); the router hands
them :class:`~tiered_router.engine._ports.RouterPorts`. :class:`TaskHooks` is what they ask
of the task a turn belongs to (``tiered_router.task``), found through :data:`CURRENT_TASK`.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tiered_router.engine._recording import RecordOption
    from tiered_router.gate import QualityGate
    from tiered_router.policy._schema import BackendConfig, Policy
    from tiered_router.routing import Decision
    from tiered_router.scoring import Score
    from tiered_router.scoring.deferral import DeferralModel
    from tiered_router.trace import Trace
    from tiered_router.turn import Turn

__all__ = ["CURRENT_TASK", "EnginePorts", "TaskHooks"]


class EnginePorts(Protocol):
    """What the engine needs from its surroundings (the router provides it)."""

    @property
    def policy(self) -> Policy:
        """The routing policy."""
        ...

    @property
    def gate(self) -> QualityGate:
        """The quality gate drafts are checked with."""
        ...

    def score(self, turn: Turn) -> Score:
        """Score a turn (pure)."""
        ...

    def now(self) -> float:
        """The router's clock, seconds."""
        ...

    def capability_gap(self, backend: str, turn: Turn) -> tuple[str, str] | None:
        """``(what, why)`` when backend ``backend`` cannot take ``turn`` at all, else ``None``."""
        ...

    def multiple_choices(self, backend: str) -> bool:
        """Whether backend ``backend``'s server samples ``n`` choices in one request."""
        ...

    @property
    def deferral(self) -> DeferralModel | None:
        """The panels' deferral model (``drafts.deferral``), ``None`` without one."""
        ...

    @property
    def record(self) -> RecordOption:
        """Whether (and how) traces record the turn's request and outputs."""
        ...

    def backend_config(self, backend: str) -> BackendConfig | None:
        """Backend ``backend``'s policy config (preset applied), if it has one."""
        ...


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

    @property
    def may_hedge(self) -> bool:
        """Whether the task allows hedged frontier calls (``task.hedge``)."""
        ...

    @property
    def max_latency_s(self) -> float | None:
        """The task's latency budget, seconds (``None``: none)."""
        ...

    @property
    def elapsed_s(self) -> float:
        """Seconds since the task started."""
        ...


CURRENT_TASK: ContextVar[TaskHooks | None] = ContextVar("tiered_router_task", default=None)
"""The task whose turns are being routed in this context, if any."""
