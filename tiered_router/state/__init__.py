"""Shared state behind one small interface: circuit breakers, task totals, monitor windows.

The router keeps no breaker or task counters of its own: it asks a :class:`StateStore`. The
default, :class:`MemoryStateStore`, keeps them in this process; a shared store (Redis, as an
extra) lets several workers and replicas share them. Every operation is a whole operation
(``breaker_allow``, ``breaker_record``, ``task_record``...) so a shared store can run it
atomically, and each has an async twin (``abreaker_allow``...) for the async path.

A store failure never fails a turn: the router wraps its store in :class:`SafeStateStore`,
which answers from in-process state (with a warning) while the store is down.

Example:
    ```python
    from tiered_router import Router
    from tiered_router.state import MemoryStateStore

    router = Router(policy, state=MemoryStateStore())
    router.breaker("mercury").state      # "closed"
    ```


Wing (docs/architecture.md): owns breakers and task totals behind :class:`StateStore`; may
import only the root's shared values and ``policy`` (its schema). A new store implements
:class:`StateStore` and its async twins.
"""

from __future__ import annotations

from tiered_router.state._base import (
    Admission,
    BreakerSnapshot,
    BreakerState,
    Outcome,
    StateStore,
    TaskDelta,
    TaskRules,
    TaskSnapshot,
)
from tiered_router.state._memory import MemoryStateStore
from tiered_router.state._monitor import (
    MonitorRules,
    MonitorSnapshot,
    MonitorState,
    MonitorStore,
    judge,
    perfect_needs,
    wilson_lower,
)
from tiered_router.state._safe import SafeStateStore

__all__ = [
    "Admission",
    "BreakerSnapshot",
    "BreakerState",
    "MemoryStateStore",
    "MonitorRules",
    "MonitorSnapshot",
    "MonitorState",
    "MonitorStore",
    "Outcome",
    "SafeStateStore",
    "StateStore",
    "TaskDelta",
    "TaskRules",
    "TaskSnapshot",
    "judge",
    "perfect_needs",
    "wilson_lower",
]
