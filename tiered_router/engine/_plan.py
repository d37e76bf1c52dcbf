"""Planning a turn: its first tier (task signals, scorer and rules, capability, pin) and deadline.

Pure: :func:`decide_turn` and :func:`plan_turn` call no backend; the driver then runs the
:class:`~tiered_router.engine._machine.TurnRun` they return.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tiered_router.engine._machine import TurnRun
from tiered_router.engine.resilience import Deadline
from tiered_router.routing import Decision, decide

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.engine._context import TaskHooks
    from tiered_router.engine._machine import EnginePorts
    from tiered_router.turn import Turn

__all__ = ["decide_turn", "plan_turn"]


def decide_turn(
    ports: EnginePorts, turn: Turn, *, tier: Tier | None = None, task: TaskHooks | None = None
) -> tuple[Turn, Decision]:
    """Decide a turn's first tier (pure): task signals, scorer and rules, capability, pin.

    Args:
        ports: The engine's surroundings.
        turn: The turn.
        tier: Pin the first tier (rule ``pinned``); task rules then do not apply.
        task: The task the turn belongs to, if any.

    Returns:
        The turn (with the task's signals filled in) and its decision.
    """
    policy = ports.policy
    if task is not None:
        turn = task.prepare(turn)
    decision = decide(turn, ports.score(turn), policy)
    if tier is not None:
        decision = replace(
            decision,
            tier=tier,
            backend=policy.backend_for(tier),
            rule="pinned",
            reasons=(f"pinned to the {tier} tier by the caller", *decision.reasons),
        )
    gap = ports.capability_gap(decision.backend, turn) if decision.tier == "fast" else None
    if gap is not None:
        decision = replace(
            decision,
            tier="frontier",
            backend=policy.backend_for("frontier"),
            rule=f"capability.{gap[0]}",
            reasons=(f"fast {gap[1]}", *decision.reasons),
        )
    if task is not None and tier is None:
        decision = task.adjust(turn, decision)
    return turn, decision


def plan_turn(
    ports: EnginePorts,
    turn: Turn,
    *,
    deadline_s: float | None,
    tier: Tier | None = None,
    task: TaskHooks | None = None,
) -> TurnRun:
    """Start a turn: decide it and set its deadline.

    Args:
        ports: The engine's surroundings.
        turn: The turn.
        deadline_s: Seconds for the whole turn, ``None`` for no deadline.
        tier: Pin the first tier (see :func:`decide_turn`).
        task: The task the turn belongs to; it observes the trace when the turn ends.
    """
    now = ports.now()
    turn, decision = decide_turn(ports, turn, tier=tier, task=task)
    deadline = Deadline(None if deadline_s is None else now + deadline_s)
    return TurnRun(ports, turn, decision, deadline, started=now, task=task)
