"""Task context: the agent loop as one routed object.

An agent task is a chain of turns. Inside ``with router.task() as task:`` every turn the
router routes in this context (and in threads and asyncio tasks started from it) belongs to
the task, which

- numbers the steps and writes the agent signals into each turn (see
  :mod:`tiered_router.agent_signals`);
- adds up cost, latency, fast share and escalations, and keeps every turn's trace in order;
- may change a turn's decision from task state, always under a rule named ``task.*``:

  ``task.stall``
      the conversation shows a stall (the same tool call repeated, tool errors in a row):
      the turn goes to the frontier tier and the task locks there;
  ``task.locked``
      the task is locked to the frontier tier (after ``lock_after_gate_failures`` failed
      drafts or a stall) until ``unlock_after_clean_turns`` clean turns in a row;
  ``task.budget.escalations``
      the task spent its escalation budget: the fast tier is skipped from now on;
  ``task.budget.latency`` / ``task.budget.cost``
      the tier chosen would take the task past its latency (cost) budget and the other tier
      would not, so the other one serves the turn.

Budgets are limits and win over the quality locks; the lock never sends a turn to the fast
tier. The knobs are the policy's ``task:`` section (:class:`~tiered_router.policy.TaskConfig`);
``router.task(max_cost=..., max_latency_s=..., max_escalations=...)`` overrides them.

The totals and the lock live in the router's state store under the task id
(:meth:`~tiered_router.state.StateStore.task_record`), so workers sharing a store share a
task; each :class:`Task` object keeps the traces of the turns it saw.

Example:
    ```python
    async with router.task("ticket-42", max_latency_s=20) as task:
        while not done:
            result = await router.acomplete(Turn(messages, tools=tools))
            ...
    print(task.summary().to_dict())
    ```

"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from contextvars import Token
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

from tiered_router._task_types import TaskHost, TaskSummary, default_latency
from tiered_router._types import OTHER_TIER, Tier
from tiered_router.agent_signals import STALL_KEY, AgentSignals, agent_signals, annotate
from tiered_router.engine._context import CURRENT_TASK, TaskHooks
from tiered_router.pricing import cost_of
from tiered_router.routing import Decision
from tiered_router.scoring.features import approx_tokens
from tiered_router.state import TaskDelta, TaskRules, TaskSnapshot
from tiered_router.trace import Trace
from tiered_router.turn import Turn, Usage

if TYPE_CHECKING:
    from tiered_router.policy._schema import TaskConfig

__all__ = ["Task", "TaskHost", "TaskSummary"]


class Task:
    """One agent task: a sync and async context manager that groups the turns routed in it.

    Build it with :meth:`Router.task <tiered_router.Router.task>` rather than directly.

    Args:
        router: The router whose policy, clock, capabilities and state store the task uses.
        task_id: The task's id (a random one when ``None``); it lands in every turn's
            metadata as ``task_id``.
        max_cost: Cost budget in US dollars (``None``: the policy's ``task.max_cost``).
        max_latency_s: Latency budget in seconds (``None``: the policy's).
        max_escalations: Escalation budget (``None``: the policy's).
        hedge: Whether the policy's ``hedge:`` may start frontier calls for this task's
            turns (``None``: the policy's ``task.hedge``). Hedge spend always counts in the
            cost budget, and no hedge starts once the budget is spent.
        clock: Monotonic clock in seconds (default: the router's).

    """

    def __init__(
        self,
        router: TaskHost,
        task_id: str | None = None,
        *,
        max_cost: float | None = None,
        max_latency_s: float | None = None,
        max_escalations: int | None = None,
        hedge: bool | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        for name, value, low in (
            ("max_cost", max_cost, "> 0"),
            ("max_latency_s", max_latency_s, "> 0"),
            ("max_escalations", max_escalations, ">= 0"),
        ):
            if value is None:
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not (value > 0 if low == "> 0" else value >= 0):
                raise ValueError(f"task {name} must be a number {low}, or None; got {value!r}")
        config: TaskConfig = router.policy.task
        self.router = router
        self.id = task_id or uuid.uuid4().hex[:16]
        self.config = config
        self.max_cost = max_cost if max_cost is not None else config.max_cost
        self.max_latency_s = max_latency_s if max_latency_s is not None else config.max_latency_s
        self.max_escalations = (
            max_escalations if max_escalations is not None else config.max_escalations
        )
        self.hedge = config.hedge if hedge is None else bool(hedge)
        self._clock: Callable[[], float] = clock or router.now
        self._store = router.state
        self._rules = TaskRules(
            lock_after_gate_failures=config.lock_after_gate_failures,
            lock_on_stall=config.lock_on_stall,
            unlock_after_clean_turns=config.unlock_after_clean_turns,
            latency_window=config.latency_window,
        )
        self._started = self._clock()
        self._ended: float | None = None
        self._lock = threading.Lock()
        self._tokens: list[Token[TaskHooks | None]] = []
        self._traces: list[Trace] = []
        self._snap = TaskSnapshot()
        self._just_read = False  # the totals were read on entering: the first turn reuses them
        self._over: list[str] = []

    def __repr__(self) -> str:
        return f"Task({self.id!r}, steps={self.steps}, locked={self.locked})"

    @property
    def may_hedge(self) -> bool:
        """Whether a turn of this task may be hedged: allowed, and the cost budget not spent."""
        return self.hedge and (self.max_cost is None or self._snap.cost < self.max_cost)

    # -- context management ------------------------------------------------------------------

    def __enter__(self) -> Task:
        if not self._tokens and not self._traces:
            self._started = self._clock()
            self._just_read = False
            self.refresh()
            self._just_read = True
        self._ended = None
        self._tokens.append(CURRENT_TASK.set(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        CURRENT_TASK.reset(self._tokens.pop())
        if not self._tokens:
            self._ended = self._clock()

    async def __aenter__(self) -> Task:
        # the async twin of __enter__, with the store read awaited (never the sync one,
        # which would block the event loop on a shared store)
        if not self._tokens and not self._traces:
            self._started = self._clock()
            self._just_read = False
            await self.arefresh()
            self._just_read = True
        self._ended = None
        self._tokens.append(CURRENT_TASK.set(self))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- totals --------------------------------------------------------------------------------

    @property
    def traces(self) -> tuple[Trace, ...]:
        """The task trace: every turn's trace, in the order the turns finished."""
        with self._lock:
            return tuple(self._traces)

    @property
    def steps(self) -> int:
        """Turns routed in the task so far (the next turn's step index)."""
        return self._snap.steps

    @property
    def cost(self) -> float:
        """Total cost so far, US dollars."""
        return self._snap.cost

    @property
    def latency_s(self) -> float:
        """Model time so far: the sum of the turns' latencies."""
        return self._snap.latency_s

    @property
    def elapsed_s(self) -> float:
        """Wall time since the task started (until it ended, once it has)."""
        end = self._ended if self._ended is not None else self._clock()
        return max(0.0, end - self._started)

    @property
    def fast_share(self) -> float:
        """Share of turns answered by the fast tier (0 before the first turn)."""
        snap = self._snap
        return snap.fast_served / snap.steps if snap.steps else 0.0

    @property
    def escalations(self) -> int:
        """Turns escalated from the fast tier so far."""
        return self._snap.escalations

    @property
    def locked(self) -> bool:
        """Whether the task is locked to the frontier tier."""
        return self._snap.locked_by is not None

    def summary(self) -> TaskSummary:
        """Return the task's totals."""
        snap = self._snap
        return TaskSummary(
            task_id=self.id,
            steps=snap.steps,
            cost=snap.cost,
            latency_s=snap.latency_s,
            elapsed_s=self.elapsed_s,
            fast_share=self.fast_share,
            escalations=snap.escalations,
            gate_failures=snap.gate_failures,
            stalls=snap.stalls,
            task_rules=dict(snap.rules),
            locked=snap.locked_by is not None,
            over_budget=tuple(self._over),
            usage=Usage(input_tokens=snap.input_tokens, output_tokens=snap.output_tokens),
        )

    def refresh(self) -> None:
        """Read the task's totals from the state store (other workers' turns included).

        The first call after entering the task reuses what entering just read (one store
        round trip less per turn on a shared store); later calls read again.
        """
        if self._just_read:
            self._just_read = False
            return
        self._snap = self._store.task_snapshot(self.id)

    async def arefresh(self) -> None:
        """Async twin of :meth:`refresh`."""
        if self._just_read:
            self._just_read = False
            return
        self._snap = await self._store.atask_snapshot(self.id)

    # -- estimates -----------------------------------------------------------------------------

    def expected_latency(self, tier: Tier, turn: Turn | None = None) -> float:
        """Return the expected seconds of one call on ``tier``'s backend.

        The mean of its recent measured latencies in this task (``latency_window`` of
        them) once there are any; else the router's moving average of its measured
        latencies (across tasks); before any call its latency model (the policy's, else
        its preset's): ``ttft_s + output tokens / tokens_per_s`` with
        ``expected_output_tokens`` (or the turn's ``max_tokens`` when smaller), whole
        canvases on a canvas server; plus the wait for a slot when the backend's
        ``max_concurrency`` is known (the router's own count of calls in flight).
        """
        name = self.router.policy.backend_for(tier)
        recent = self._snap.recent.get(name)
        if recent:
            return sum(lat for lat, _ in recent) / len(recent)
        # the policy's latency model, else its preset's (the dialect profile's defaults)
        config = self.router.backend_config(name)
        model = (config.latency if config is not None else None) or default_latency()
        return self.router.latency.expected(
            name,
            model,
            output_tokens=self._output_tokens(name, turn),
            canvas_tokens=config.canvas_tokens if config is not None else None,
            max_concurrency=config.max_concurrency if config is not None else None,
        )

    def expected_cost(self, tier: Tier, turn: Turn, *, score: float | None = None) -> float:
        """Return the expected US dollars of ``tier``'s call (policy prices).

        A fast turn that gets a draft panel counts its ``k`` drafts; with the turn's routing
        ``score``, a turn in the panel's one-draft zone (``drafts.panel_above``) counts one.
        """
        name = self.router.policy.backend_for(tier)
        config = self.router.backend_config(name)  # preset prices included
        if config is None:
            return 0.0
        usage = Usage(
            input_tokens=approx_tokens(turn), output_tokens=self._output_tokens(name, turn)
        )
        drafts = self.router.policy.drafts
        if tier == "fast" and drafts is not None and drafts.max_k > 1:
            from tiered_router.engine._panel_plan import panel_shape

            shape = panel_shape(drafts, turn, score)
            if shape is not None:
                return cost_of(usage, config.price) * shape[1]
        return cost_of(usage, config.price)

    def _output_tokens(self, name: str, turn: Turn | None) -> int:
        recent = self._snap.recent.get(name)
        if recent:
            return max(1, round(sum(n for _, n in recent) / len(recent)))
        tokens = self.config.expected_output_tokens
        cap = turn.params.get("max_tokens") if turn is not None else None
        return min(tokens, cap) if isinstance(cap, int) and cap > 0 else tokens

    def _escalation_rate(self) -> float:
        snap = self._snap
        return snap.escalations / snap.fast_decided if snap.fast_decided else 0.0

    # -- the router's hooks ----------------------------------------------------------------------

    def signals(self, turn: Turn) -> AgentSignals:
        """Return the agent signals of ``turn`` with this task's stall limits."""
        return agent_signals(
            turn,
            stall_repeated_calls=self.config.stall_repeated_calls,
            stall_tool_errors=self.config.stall_tool_errors,
        )

    def prepare(self, turn: Turn) -> Turn:
        """Fill the step index, the task id and the agent signals in (idempotent, pure)."""
        if turn.metadata.get("task_id") is None:
            turn = turn.with_updates(metadata={**turn.metadata, "task_id": self.id})
        return annotate(turn, step=self.steps, signals=self.signals(turn))

    def adjust(self, turn: Turn, decision: Decision) -> Decision:
        """Return the decision changed by task state, under a ``task.*`` rule (pure)."""
        tier = decision.tier
        snap = self._snap
        rule: str | None = None
        reasons: list[str] = []
        if tier == "fast":
            signals = self.signals(turn)
            if signals.stalled and self.config.lock_on_stall:
                rule = "task.stall"
                reasons.append(f"task.stall: {signals.stall_reason}")
            elif snap.locked_by is not None:
                rule = "task.locked"
                reasons.append(
                    f"task.locked: locked to frontier after {snap.locked_by}; "
                    f"{snap.clean_streak}/{self.config.unlock_after_clean_turns} clean turns"
                )
            elif self.max_escalations is not None and snap.escalations >= self.max_escalations:
                rule = "task.budget.escalations"
                reasons.append(
                    f"task.budget.escalations: {snap.escalations} of {self.max_escalations} "
                    "escalations spent"
                )
            if rule is not None and self._usable(turn, "frontier"):
                tier = "frontier"
            elif rule is not None:
                rule, reasons = None, []
        tier, budget_rule, budget_reason = self._budgets(turn, tier, decision.score)
        if budget_rule is not None:
            rule = budget_rule
            reasons.insert(0, budget_reason)
        if rule is None:
            return decision
        return replace(
            decision,
            tier=tier,
            backend=self.router.policy.backend_for(tier),
            rule=rule,
            reasons=(*reasons, *decision.reasons),
        )

    def _usable(self, turn: Turn, tier: Tier) -> bool:
        return self.router.capability_gap(self.router.policy.backend_for(tier), turn) is None

    def _budgets(self, turn: Turn, tier: Tier, score: float) -> tuple[Tier, str | None, str]:
        other = OTHER_TIER[tier]
        if self.max_latency_s is not None:
            left = self.max_latency_s - self.elapsed_s
            need = {t: self._turn_latency(t, turn) for t in (tier, other)}
            if need[tier] > left and self._usable(turn, other) and need[other] < need[tier]:
                fits = "fits" if need[other] <= left else "is closer"
                reason = (
                    f"task.budget.latency: {tier} needs ~{need[tier]:.2f} s, "
                    f"{max(left, 0.0):.2f} s left of {self.max_latency_s:g} s; "
                    f"{other} (~{need[other]:.2f} s) {fits}"
                )
                return other, "task.budget.latency", reason
        if self.max_cost is not None:
            left = self.max_cost - self.cost
            need = {t: self.expected_cost(t, turn, score=score) for t in (tier, other)}
            if need[tier] > left and self._usable(turn, other) and need[other] < need[tier]:
                fits = "fits" if need[other] <= left else "is cheaper"
                reason = (
                    f"task.budget.cost: {tier} needs ~${need[tier]:.6f}, "
                    f"${max(left, 0.0):.6f} left of ${self.max_cost:g}; {other} "
                    f"(~${need[other]:.6f}) {fits}"
                )
                return other, "task.budget.cost", reason
        return tier, None, ""

    def _turn_latency(self, tier: Tier, turn: Turn) -> float:
        """Return the expected latency of a turn sent to ``tier``, escalation risk included."""
        own = self.expected_latency(tier, turn)
        if tier == "fast":
            own += self._escalation_rate() * self.expected_latency("frontier", turn)
        return own

    def _delta(self, trace: Trace) -> TaskDelta:
        failures = sum(1 for a in trace.attempts if a.verdict is not None and not a.verdict.passed)
        stalled = trace.metadata.get(STALL_KEY) is True
        clean = (
            trace.tier is not None
            and not trace.escalated
            and failures == 0
            and not stalled
            and (trace.verdict is None or trace.verdict.passed)
        )
        rule = trace.decision.rule
        usage = trace.usage
        return TaskDelta(
            cost=trace.cost,
            latency_s=trace.latency_s,
            escalated=trace.escalated,
            fast_decided=trace.decision.tier == "fast",
            fast_served=trace.tier == "fast",
            gate_failures=failures,
            stalled=stalled,
            clean=clean,
            rule=rule if rule is not None and rule.startswith("task.") else None,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            latencies=tuple(
                (a.backend, a.latency_s, a.usage.output_tokens) for a in trace.attempts if a.ok
            ),
        )

    def observe(self, trace: Trace) -> None:
        """Take a finished turn into the totals and update the lock (called once per turn)."""
        snap = self._store.task_record(self.id, self._delta(trace), rules=self._rules)
        self._took(trace, snap)

    async def aobserve(self, trace: Trace) -> None:
        """Async twin of :meth:`observe`."""
        snap = await self._store.atask_record(self.id, self._delta(trace), rules=self._rules)
        self._took(trace, snap)

    @staticmethod
    def _spend(trace: Trace) -> TaskDelta:
        usage = trace.usage
        cost, tokens_in, tokens_out = trace.cost, usage.input_tokens, usage.output_tokens
        return TaskDelta(cost=cost, input_tokens=tokens_in, output_tokens=tokens_out, step=False)

    def charge(self, trace: Trace) -> None:
        """Add a background call's spend (a monitor's shadow call) to the task's totals.

        Cost and tokens count against the budgets; steps, latency and the lock do not change.
        """
        self._charged(self._store.task_record(self.id, self._spend(trace), rules=self._rules))

    async def acharge(self, trace: Trace) -> None:
        """Async twin of :meth:`charge`."""
        self._charged(
            await self._store.atask_record(self.id, self._spend(trace), rules=self._rules)
        )

    def _charged(self, snap: TaskSnapshot) -> None:
        with self._lock:
            self._snap = snap if snap.steps >= self._snap.steps else self._snap
            if self.max_cost is not None and "cost" not in self._over and snap.cost > self.max_cost:
                self._over.append("cost")

    def _took(self, trace: Trace, snap: TaskSnapshot) -> None:
        with self._lock:
            self._traces.append(trace)
            self._snap = snap
            if self.max_cost is not None and "cost" not in self._over and snap.cost > self.max_cost:
                self._over.append("cost")
            if (
                self.max_latency_s is not None
                and "latency" not in self._over
                and self.elapsed_s > self.max_latency_s
            ):
                self._over.append("latency")
