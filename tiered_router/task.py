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
from collections import deque
from collections.abc import Callable
from contextvars import Token
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router._context import CURRENT_TASK, TaskHooks
from tiered_router._types import Tier
from tiered_router.agent_signals import STALL_KEY, AgentSignals, agent_signals, annotate
from tiered_router.policy import LatencyModel, TaskConfig
from tiered_router.pricing import cost_of
from tiered_router.routing import Decision
from tiered_router.scoring.features import approx_tokens
from tiered_router.trace import Trace
from tiered_router.turn import Turn, Usage

if TYPE_CHECKING:
    from tiered_router.router import Router

__all__ = ["Task", "TaskSummary"]

_OTHER: dict[Tier, Tier] = {"fast": "frontier", "frontier": "fast"}
_DEFAULT_LATENCY = LatencyModel()


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


class Task:
    """One agent task: a sync and async context manager that groups the turns routed in it.

    Build it with :meth:`Router.task <tiered_router.Router.task>` rather than directly.

    Args:
        router: The router whose policy, clock and backends the task uses.
        task_id: The task's id (a random one when ``None``); it lands in every turn's
            metadata as ``task_id``.
        max_cost: Cost budget in US dollars (``None``: the policy's ``task.max_cost``).
        max_latency_s: Latency budget in seconds (``None``: the policy's).
        max_escalations: Escalation budget (``None``: the policy's).
        clock: Monotonic clock in seconds (default: the router's).

    """

    def __init__(
        self,
        router: Router,
        task_id: str | None = None,
        *,
        max_cost: float | None = None,
        max_latency_s: float | None = None,
        max_escalations: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        config: TaskConfig = router.policy.task
        self.router = router
        self.id = task_id or uuid.uuid4().hex[:16]
        self.config = config
        self.max_cost = max_cost if max_cost is not None else config.max_cost
        self.max_latency_s = max_latency_s if max_latency_s is not None else config.max_latency_s
        self.max_escalations = (
            max_escalations if max_escalations is not None else config.max_escalations
        )
        self._clock: Callable[[], float] = clock or router._clock
        self._started = self._clock()
        self._ended: float | None = None
        self._lock = threading.Lock()
        self._tokens: list[Token[TaskHooks | None]] = []
        self._traces: list[Trace] = []
        self._fast_decided = 0
        self._fast_served = 0
        self._escalations = 0
        self._gate_failures = 0
        self._window_failures = 0
        self._stalls = 0
        self._clean_streak = 0
        self._locked_by: str | None = None
        self._rules: dict[str, int] = {}
        self._over: list[str] = []
        self._recent: dict[str, deque[tuple[float, int]]] = {}

    def __repr__(self) -> str:
        return f"Task({self.id!r}, steps={self.steps}, locked={self.locked})"

    # -- context management ------------------------------------------------------------------

    def __enter__(self) -> Task:
        if not self._tokens and not self._traces:
            self._started = self._clock()
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
        return self.__enter__()

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
        return len(self._traces)

    @property
    def cost(self) -> float:
        """Total cost so far, US dollars."""
        with self._lock:
            return sum(t.cost for t in self._traces)

    @property
    def latency_s(self) -> float:
        """Model time so far: the sum of the turns' latencies."""
        with self._lock:
            return sum(t.latency_s for t in self._traces)

    @property
    def elapsed_s(self) -> float:
        """Wall time since the task started (until it ended, once it has)."""
        end = self._ended if self._ended is not None else self._clock()
        return max(0.0, end - self._started)

    @property
    def fast_share(self) -> float:
        """Share of turns answered by the fast tier (0 before the first turn)."""
        return self._fast_served / len(self._traces) if self._traces else 0.0

    @property
    def escalations(self) -> int:
        """Turns escalated from the fast tier so far."""
        return self._escalations

    @property
    def locked(self) -> bool:
        """Whether the task is locked to the frontier tier."""
        return self._locked_by is not None

    def summary(self) -> TaskSummary:
        """Return the task's totals."""
        traces = self.traces
        usage = Usage()
        for t in traces:
            usage = usage + t.usage
        return TaskSummary(
            task_id=self.id,
            steps=len(traces),
            cost=sum(t.cost for t in traces),
            latency_s=sum(t.latency_s for t in traces),
            elapsed_s=self.elapsed_s,
            fast_share=self.fast_share,
            escalations=self._escalations,
            gate_failures=self._gate_failures,
            stalls=self._stalls,
            task_rules=dict(self._rules),
            locked=self.locked,
            over_budget=tuple(self._over),
            usage=usage,
        )

    # -- estimates -----------------------------------------------------------------------------

    def expected_latency(self, tier: Tier, turn: Turn | None = None) -> float:
        """Return the expected seconds of one call on ``tier``'s backend.

        The mean of its recent measured latencies in this task (``latency_window`` of
        them) once there are any; else the router's moving average of its measured
        latencies (across tasks); before any call its latency model (the policy's, else
        its preset's): ``ttft_s + output tokens / tokens_per_s`` with
        ``expected_output_tokens`` (or the turn's ``max_tokens`` when smaller).
        """
        name = self.router.policy.backend_for(tier)
        recent = self._recent.get(name)
        if recent:
            return sum(lat for lat, _ in recent) / len(recent)
        # the policy's latency model, else its preset's (the dialect profile's defaults)
        config = self.router.backend_config(name)
        model = (config.latency if config is not None else None) or _DEFAULT_LATENCY
        return self.router.latency.expected(
            name, model, output_tokens=self._output_tokens(name, turn)
        )

    def expected_cost(self, tier: Tier, turn: Turn) -> float:
        """Return the expected US dollars of one call on ``tier``'s backend (policy prices)."""
        name = self.router.policy.backend_for(tier)
        config = self.router.backend_config(name)  # preset prices included
        if config is None:
            return 0.0
        usage = Usage(
            input_tokens=approx_tokens(turn), output_tokens=self._output_tokens(name, turn)
        )
        return cost_of(usage, config.price)

    def _output_tokens(self, name: str, turn: Turn | None) -> int:
        recent = self._recent.get(name)
        if recent:
            return max(1, round(sum(n for _, n in recent) / len(recent)))
        tokens = self.config.expected_output_tokens
        cap = turn.params.get("max_tokens") if turn is not None else None
        return min(tokens, cap) if isinstance(cap, int) and cap > 0 else tokens

    def _escalation_rate(self) -> float:
        return self._escalations / self._fast_decided if self._fast_decided else 0.0

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
        rule: str | None = None
        reasons: list[str] = []
        if tier == "fast":
            signals = self.signals(turn)
            if signals.stalled and self.config.lock_on_stall:
                rule = "task.stall"
                reasons.append(f"task.stall: {signals.stall_reason}")
            elif self._locked_by is not None:
                rule = "task.locked"
                reasons.append(
                    f"task.locked: locked to frontier after {self._locked_by}; "
                    f"{self._clean_streak}/{self.config.unlock_after_clean_turns} clean turns"
                )
            elif self.max_escalations is not None and self._escalations >= self.max_escalations:
                rule = "task.budget.escalations"
                reasons.append(
                    f"task.budget.escalations: {self._escalations} of {self.max_escalations} "
                    "escalations spent"
                )
            if rule is not None and self._usable(turn, "frontier"):
                tier = "frontier"
            elif rule is not None:
                rule, reasons = None, []
        tier, budget_rule, budget_reason = self._budgets(turn, tier)
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

    def _budgets(self, turn: Turn, tier: Tier) -> tuple[Tier, str | None, str]:
        other = _OTHER[tier]
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
            need = {t: self.expected_cost(t, turn) for t in (tier, other)}
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

    def observe(self, trace: Trace) -> None:
        """Take a finished turn into the totals and update the lock (called once per turn)."""
        config = self.config
        failures = sum(1 for a in trace.attempts if a.verdict is not None and not a.verdict.passed)
        stalled = trace.metadata.get(STALL_KEY) is True
        clean = (
            trace.tier is not None
            and not trace.escalated
            and failures == 0
            and not stalled
            and (trace.verdict is None or trace.verdict.passed)
        )
        with self._lock:
            self._traces.append(trace)
            rule = trace.decision.rule
            if rule is not None and rule.startswith("task."):
                self._rules[rule] = self._rules.get(rule, 0) + 1
            if trace.decision.tier == "fast":
                self._fast_decided += 1
            if trace.tier == "fast":
                self._fast_served += 1
            if trace.escalated:
                self._escalations += 1
            for attempt in trace.attempts:
                if attempt.ok:
                    recent = self._recent.setdefault(
                        attempt.backend, deque(maxlen=config.latency_window)
                    )
                    recent.append((attempt.latency_s, attempt.usage.output_tokens))
            self._gate_failures += failures
            self._window_failures += failures
            if stalled:
                self._stalls += 1
                if config.lock_on_stall:
                    self._lock_to_frontier("a stall")
            limit = config.lock_after_gate_failures
            if failures and limit is not None and self._window_failures >= limit:
                self._lock_to_frontier(f"{self._window_failures} gate failures")
            if clean:
                self._clean_streak += 1
                if self._clean_streak >= config.unlock_after_clean_turns:
                    self._locked_by = None
                    self._window_failures = 0
            else:
                self._clean_streak = 0
            self._check_budgets()

    def _lock_to_frontier(self, why: str) -> None:
        self._locked_by = why
        self._clean_streak = 0

    def _check_budgets(self) -> None:
        if (
            self.max_cost is not None
            and "cost" not in self._over
            and sum(t.cost for t in self._traces) > self.max_cost
        ):
            self._over.append("cost")
        if (
            self.max_latency_s is not None
            and "latency" not in self._over
            and self.elapsed_s > self.max_latency_s
        ):
            self._over.append("latency")
