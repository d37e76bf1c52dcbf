"""Task rules and deltas shared by the state-store tests (in-process and Redis)."""

from __future__ import annotations

from tiered_router.state import TaskDelta, TaskRules

RULES = TaskRules(lock_after_gate_failures=2, unlock_after_clean_turns=2, latency_window=3)

TASK_DELTAS = [
    TaskDelta(cost=0.001, latency_s=0.2, fast_decided=True, fast_served=True, clean=True,
              input_tokens=10, output_tokens=5, latencies=(("fast", 0.2, 5),)),
    TaskDelta(cost=0.01, latency_s=1.5, escalated=True, fast_decided=True, gate_failures=1,
              rule="task.budget.cost", latencies=(("frontier", 1.3, 40),)),
    TaskDelta(cost=0.02, latency_s=1.0, gate_failures=1, latencies=(("frontier", 1.0, 30),)),
    TaskDelta(cost=0.0, latency_s=0.1, stalled=True, rule="task.stall"),
    TaskDelta(cost=0.002, latency_s=0.3, clean=True, rule="task.locked",
              latencies=(("fast", 0.3, 7), ("fast", 0.1, 2))),
    TaskDelta(cost=0.002, latency_s=0.3, clean=True, latencies=(("fast", 0.4, 9),)),
]  # fmt: skip
"""One of each kind of turn: clean, escalated, gate failure, stall, locked, clean again."""
