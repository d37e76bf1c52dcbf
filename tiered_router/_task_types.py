"""A task's two contracts: the router it needs and the totals it reports.

:class:`TaskHost` is what :class:`~tiered_router.task.Task` asks of its router;
:class:`TaskSummary` is what it reports. :mod:`tiered_router.task` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tiered_router.state import StateStore
from tiered_router.turn import Turn, Usage

if TYPE_CHECKING:
    from tiered_router.engine._latency import LatencyTracker
    from tiered_router.policy._schema import BackendConfig, LatencyModel, Policy

__all__ = ["TaskHost", "TaskSummary", "default_latency"]


def default_latency() -> LatencyModel:
    # imported here: the policy schema (pydantic) stays off the `import Router` path
    from tiered_router.policy._schema import LatencyModel

    return LatencyModel()


class TaskHost(Protocol):
    """What a task needs from its router: the policy, the clock, capabilities, the store."""

    @property
    def policy(self) -> Policy:
        """The routing policy."""
        ...

    @property
    def state(self) -> StateStore:
        """Where the task's totals live."""
        ...

    def now(self) -> float:
        """The router's clock, seconds."""
        ...

    def backend_config(self, backend: str) -> BackendConfig | None:
        """Backend ``backend``'s policy config (preset applied), if it has one."""
        ...

    def capability_gap(self, backend: str, turn: Turn) -> tuple[str, str] | None:
        """``(what, why)`` when backend ``backend`` cannot take ``turn`` at all, else ``None``."""
        ...

    @property
    def latency(self) -> LatencyTracker:
        """Measured latency per backend, replacing latency models in estimates."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSummary:
    """Totals of a task.

    Attributes:
        task_id: The task's id.
        steps: Turns routed in the task.
        cost: Total cost, US dollars.
        latency_s: Model time: the sum of the turns' latencies.
        elapsed_s: Wall time since the task started (model time plus tool time).
        fast_share: Share of turns whose answer came from the fast tier.
        escalations: Turns escalated from the fast tier.
        gate_failures: Drafts that failed the gate.
        stalls: Turns on which a stall was detected.
        task_rules: How often each ``task.*`` rule decided a turn.
        locked: Whether the task is locked to the frontier tier now.
        over_budget: Budgets the task went past (``cost``, ``latency``).
        usage: Total token usage.

    """

    task_id: str
    steps: int
    cost: float
    latency_s: float
    elapsed_s: float
    fast_share: float
    escalations: int
    gate_failures: int
    stalls: int
    task_rules: dict[str, int] = field(default_factory=dict)
    locked: bool = False
    over_budget: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "task_id": self.task_id,
            "steps": self.steps,
            "cost": self.cost,
            "latency_s": round(self.latency_s, 6),
            "elapsed_s": round(self.elapsed_s, 6),
            "fast_share": round(self.fast_share, 6),
            "escalations": self.escalations,
            "gate_failures": self.gate_failures,
            "stalls": self.stalls,
            "task_rules": dict(self.task_rules),
            "locked": self.locked,
            "over_budget": list(self.over_budget),
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
        }
