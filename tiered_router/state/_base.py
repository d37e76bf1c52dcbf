"""The state-store interface: value types and the :class:`StateStore` protocol.

Every operation is a whole operation (read, decide and write in one step), so that a shared
store can run each one atomically (a Redis store runs each as one Lua script). Nothing here
is a get/set pair that a caller would have to combine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tiered_router.policy._schema import BreakerConfig

__all__ = [
    "Admission",
    "BreakerSnapshot",
    "BreakerState",
    "Outcome",
    "StateStore",
    "TaskDelta",
    "TaskRules",
    "TaskSnapshot",
    "apply_task_delta",
]

BreakerState = Literal["closed", "open", "half_open"]
"""A circuit breaker's state."""

Outcome = Literal["success", "failure", "neutral"]
"""What one admitted call says about its backend.

``success``: the backend answered (whatever the gate thinks of the draft). ``failure``: the
backend is unwell (timeout, connection error, 429, 5xx, unreadable answer). ``neutral``: the
call proves nothing either way (a 4xx caused by the request, a cancelled call); it only
releases a half-open trial.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """The answer of :meth:`StateStore.breaker_allow`.

    Attributes:
        allowed: Whether the call may go to the backend.
        state: The breaker's state when asked.
        token: Set when the call is the half-open trial: pass it back to
            :meth:`StateStore.breaker_record` so that the trial is released. ``None`` for
            ordinary calls (and refusals).
    """

    allowed: bool
    state: BreakerState
    token: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerSnapshot:
    """A breaker's state, read without reserving anything.

    Attributes:
        state: ``closed``, ``open`` or ``half_open``.
        consecutive_failures: Failures in a row since the last success (closed state).
        calls: Calls counted in the current window.
        failures: Failures among them.
        opened_at: Clock value when it last opened (``None`` when closed).
        trial_in_flight: Whether a half-open trial is out.
    """

    state: BreakerState
    consecutive_failures: int = 0
    calls: int = 0
    failures: int = 0
    opened_at: float | None = None
    trial_in_flight: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRules:
    """The lock rules a task update applies (from the policy's ``task:`` section).

    Attributes:
        lock_after_gate_failures: Failed drafts that lock the task to the frontier tier.
        lock_on_stall: Whether a stall locks it.
        unlock_after_clean_turns: Clean turns in a row that unlock it.
        latency_window: Recent latencies kept per backend.
    """

    lock_after_gate_failures: int | None = None
    lock_on_stall: bool = True
    unlock_after_clean_turns: int = 2
    latency_window: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDelta:
    """What one finished turn adds to its task (see :meth:`StateStore.task_record`).

    Attributes:
        cost: US dollars spent on the turn.
        latency_s: Model time of the turn.
        escalated: Whether the turn was escalated from the fast tier.
        fast_decided: Whether the turn was decided for the fast tier.
        fast_served: Whether the fast tier answered it.
        gate_failures: Drafts of the turn that failed the gate.
        stalled: Whether a stall was detected on the turn.
        clean: Whether the turn was clean (answered, not escalated, nothing failed).
        rule: The turn's decision rule when it is a ``task.*`` rule.
        input_tokens: Input tokens used.
        output_tokens: Output tokens used.
        latencies: ``(backend, latency_s, output_tokens)`` of each successful call.
        step: Whether the delta is one of the task's turns. ``False``: spend alone (a
            monitor's shadow call in the background): cost and tokens are added, and no
            step, latency, count or lock rule changes.
    """

    cost: float = 0.0
    latency_s: float = 0.0
    escalated: bool = False
    fast_decided: bool = False
    fast_served: bool = False
    gate_failures: int = 0
    stalled: bool = False
    clean: bool = False
    rule: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latencies: tuple[tuple[str, float, int], ...] = ()
    step: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSnapshot:
    """A task's shared totals and lock.

    Attributes:
        steps: Turns recorded.
        cost: Total cost, US dollars.
        latency_s: Total model time.
        escalations: Escalated turns.
        fast_decided: Turns decided for the fast tier.
        fast_served: Turns answered by the fast tier.
        gate_failures: Failed drafts.
        stalls: Turns with a stall.
        locked_by: Why the task is locked to the frontier tier, ``None`` when it is not.
        clean_streak: Clean turns in a row.
        window_failures: Failed drafts since the last unlock.
        rules: How often each ``task.*`` rule decided a turn.
        input_tokens: Total input tokens.
        output_tokens: Total output tokens.
        recent: Per backend, the latest ``(latency_s, output_tokens)`` pairs, oldest first.
    """

    steps: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    escalations: int = 0
    fast_decided: int = 0
    fast_served: int = 0
    gate_failures: int = 0
    stalls: int = 0
    locked_by: str | None = None
    clean_streak: int = 0
    window_failures: int = 0
    rules: Mapping[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    recent: Mapping[str, tuple[tuple[float, int], ...]] = field(default_factory=dict)


def apply_task_delta(snapshot: TaskSnapshot, delta: TaskDelta, rules: TaskRules) -> TaskSnapshot:
    """Return ``snapshot`` with one finished turn added: the totals and the lock rules.

    The reference semantics of :meth:`StateStore.task_record`, as a pure function: the
    in-process store runs it under its lock, and a task written in the background runs it
    to know its totals before the shared store has answered.
    """
    if not delta.step:  # spend alone (a shadow call): nothing else about the task changes
        return replace(
            snapshot,
            cost=snapshot.cost + delta.cost,
            input_tokens=snapshot.input_tokens + delta.input_tokens,
            output_tokens=snapshot.output_tokens + delta.output_tokens,
        )
    counts = dict(snapshot.rules)
    if delta.rule is not None:
        counts[delta.rule] = counts.get(delta.rule, 0) + 1
    recent = {name: tuple(pairs) for name, pairs in snapshot.recent.items()}
    for backend, latency, tokens in delta.latencies:
        kept = (*recent.get(backend, ()), (latency, tokens))
        recent[backend] = kept[-rules.latency_window :] if rules.latency_window > 0 else ()
    locked_by = snapshot.locked_by
    window = snapshot.window_failures + delta.gate_failures
    streak = snapshot.clean_streak
    if delta.stalled and rules.lock_on_stall:
        locked_by, streak = "a stall", 0
    limit = rules.lock_after_gate_failures
    if delta.gate_failures and limit is not None and window >= limit:
        locked_by, streak = f"{window} gate failures", 0
    if delta.clean:
        streak += 1
        if streak >= rules.unlock_after_clean_turns:
            locked_by, window = None, 0
    else:
        streak = 0
    return replace(
        snapshot,
        steps=snapshot.steps + 1,
        cost=snapshot.cost + delta.cost,
        latency_s=snapshot.latency_s + delta.latency_s,
        escalations=snapshot.escalations + delta.escalated,
        fast_decided=snapshot.fast_decided + delta.fast_decided,
        fast_served=snapshot.fast_served + delta.fast_served,
        gate_failures=snapshot.gate_failures + delta.gate_failures,
        stalls=snapshot.stalls + delta.stalled,
        locked_by=locked_by,
        clean_streak=streak,
        window_failures=window,
        rules=counts,
        input_tokens=snapshot.input_tokens + delta.input_tokens,
        output_tokens=snapshot.output_tokens + delta.output_tokens,
        recent=recent,
    )


@runtime_checkable
class StateStore(Protocol):
    """Where circuit breakers and task totals live; each method is one atomic operation.

    ``now`` is the router's clock. A store shared by several processes needs a clock they
    share (a Redis store may use the server's ``TIME`` instead and ignore ``now``).

    Every sync method has an async twin with an ``a`` prefix; the router's async path awaits
    the twins, its sync path calls the sync methods. On a cancellation the async path, too,
    calls the sync ``breaker_record`` and ``task_record``: an await could be cancelled again
    (anyio cancels every await in a cancelled scope), and the trial must be released. A
    shared store's sync methods must therefore work from an event-loop thread.

    A method may raise on a store failure: the router wraps every store in
    :class:`~tiered_router.state.SafeStateStore`, which falls back to in-process state with a
    warning, so a store failure never fails a turn.
    """

    def breaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """Admit a call to backend ``name`` or refuse it.

        Closed: admits. Open: refuses until ``cooldown_s`` has passed since it opened, then
        turns half-open. Half-open: admits one trial (with a token) while no other trial is
        out; a trial out longer than ``trial_lease_s`` is given up and a new one admitted.
        """
        ...

    def breaker_record(
        self,
        name: str,
        outcome: Outcome,
        *,
        now: float,
        config: BreakerConfig,
        token: str | None = None,
    ) -> BreakerState:
        """Record the outcome of a call admitted by :meth:`breaker_allow`; return the state.

        With the trial's token: ``success`` closes the breaker, ``failure`` opens it again,
        ``neutral`` only releases the trial. Without a token, in the closed state: a
        ``success`` resets the failure run; a ``failure`` counts, and opens the breaker after
        ``consecutive_failures`` in a row, or when the window holds at least ``min_calls``
        calls of which more than ``failure_ratio`` failed. Records without a token in
        another state (a call admitted before the breaker opened) change nothing.
        """
        ...

    def breaker_snapshot(self, name: str, *, now: float, config: BreakerConfig) -> BreakerSnapshot:
        """Read the breaker's state without reserving a trial."""
        ...

    def task_record(self, task_id: str, delta: TaskDelta, *, rules: TaskRules) -> TaskSnapshot:
        """Add one finished turn to task ``task_id``, update its lock, return the new totals.

        Lock rules, in order: a stall locks (``lock_on_stall``); failed drafts add to the
        window and lock once it reaches ``lock_after_gate_failures``; a clean turn adds to
        the clean streak and ``unlock_after_clean_turns`` in a row unlock and empty the
        window; any other turn resets the streak.
        """
        ...

    def task_snapshot(self, task_id: str) -> TaskSnapshot:
        """Read task ``task_id``'s totals (zeros for an unknown task)."""
        ...

    async def abreaker_allow(self, name: str, *, now: float, config: BreakerConfig) -> Admission:
        """Async twin of :meth:`breaker_allow`."""
        ...

    async def abreaker_record(
        self,
        name: str,
        outcome: Outcome,
        *,
        now: float,
        config: BreakerConfig,
        token: str | None = None,
    ) -> BreakerState:
        """Async twin of :meth:`breaker_record`."""
        ...

    async def abreaker_snapshot(
        self, name: str, *, now: float, config: BreakerConfig
    ) -> BreakerSnapshot:
        """Async twin of :meth:`breaker_snapshot`."""
        ...

    async def atask_record(
        self, task_id: str, delta: TaskDelta, *, rules: TaskRules
    ) -> TaskSnapshot:
        """Async twin of :meth:`task_record`."""
        ...

    async def atask_snapshot(self, task_id: str) -> TaskSnapshot:
        """Async twin of :meth:`task_snapshot`."""
        ...
