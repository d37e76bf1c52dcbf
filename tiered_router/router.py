"""The Router: decide -> dispatch -> gate -> escalate, with a trace of every step.

The async path is the core; :meth:`Router.complete` is its sync twin. Both drive the same
:class:`_Run` (the per-turn state: which tier next, what was tried, what the gate said), so
the escalation logic exists once; only the waiting and the backend call differ.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tiered_router._context import CURRENT_TASK
from tiered_router._streaming import AsyncRoutedStream, RoutedStream
from tiered_router._types import UNSET, PolicySource, Tier, Unset
from tiered_router.backends._base import Backend, CompletionRequest
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GateFailed,
    _describe,
)
from tiered_router.gate import QualityGate, Verdict
from tiered_router.policy import BackendConfig, Policy, load_policy
from tiered_router.pricing import cost_of
from tiered_router.resilience import CircuitBreaker, Deadline, RetrySchedule
from tiered_router.routing import Decision, decide
from tiered_router.scoring import Scorer, build_scorer
from tiered_router.task import Task
from tiered_router.trace import Attempt, Trace, TraceSink
from tiered_router.turn import Completion, Turn

__all__ = ["RoutedResult", "Router"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_OTHER: dict[Tier, Tier] = {"fast": "frontier", "frontier": "fast"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedResult:
    """What a routed turn returns.

    Attributes:
        completion: The completion returned to the caller.
        tier: The tier that produced it (``fast`` or ``frontier``).
        escalated: ``True`` when a fast draft failed the gate or the fast backend failed.
        trace: Everything the router decided and tried.
    """

    completion: Completion
    tier: Tier
    escalated: bool
    trace: Trace

    @property
    def decision(self) -> Decision:
        """The routing decision (same as ``trace.decision``)."""
        return self.trace.decision

    @property
    def verdict(self) -> Verdict | None:
        """The gate's verdict on the returned completion."""
        return self.trace.verdict


class Router:
    """Routes turns between the fast and the frontier tier.

    Example:
        ```python
        router = Router.from_yaml("policy.yaml")
        decision = router.decide(Turn([{"role": "user", "content": "hi"}]))  # no model call
        result = await router.acomplete(turn)
        print(result.tier, result.completion.text, result.trace.cost)
        ```

    Args:
        policy: A :class:`Policy`, a path to policy YAML, YAML text, or a mapping.
        backends: Backends by name, overriding (or adding to) the policy's; the rest are
            built from the policy on first use.
        scorer: Overrides the policy's scorer.
        gate: Overrides the policy's gate.
        sinks: Where finished traces go.
        clock: Monotonic clock in seconds (inject one for tests and simulations).
        sleep: Sync sleep used between retries.
        asleep: Async sleep used between retries.
        rng: Source of retry jitter.
    """

    def __init__(
        self,
        policy: Policy | PolicySource,
        *,
        backends: Mapping[str, Backend] | None = None,
        scorer: Scorer | None = None,
        gate: QualityGate | None = None,
        sinks: Sequence[TraceSink] = (),
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy if isinstance(policy, Policy) else load_policy(policy)
        self.scorer = scorer or build_scorer(self.policy.scoring)
        self.gate = gate or QualityGate.from_config(self.policy.gate)
        self.sinks = tuple(sinks)
        self._backends: dict[str, Backend] = dict(backends or {})
        self._clock = clock
        self._sleep = sleep
        self._asleep = asleep
        self._retries = RetrySchedule(self.policy.resilience.retry, clock=clock, rng=rng)
        self._breakers: dict[str, CircuitBreaker] = {}
        self._configs: dict[str, BackendConfig | None] = {}

    @classmethod
    def from_yaml(cls, path: PolicySource, **options: Any) -> Router:
        """Load the policy at ``path`` and build a router (keyword options as in ``Router``)."""
        return cls(load_policy(path), **options)

    def __repr__(self) -> str:
        t = self.policy.tiers
        return f"Router(fast={t.fast!r}, frontier={t.frontier!r})"

    # -- pieces ------------------------------------------------------------------------------

    def backend(self, name: str) -> Backend:
        """Return the backend called ``name``, building it from the policy on first use."""
        found = self._backends.get(name)
        if found is None:
            from tiered_router.backends.registry import build_backend

            found = self._backends[name] = build_backend(name, self.policy.backends[name])
        return found

    def breaker(self, name: str) -> CircuitBreaker:
        """Return the circuit breaker of backend ``name``."""
        found = self._breakers.get(name)
        if found is None:
            found = self._breakers[name] = CircuitBreaker(
                self.policy.resilience.breaker, clock=self._clock
            )
        return found

    def backend_config(self, name: str) -> BackendConfig | None:
        """Return backend ``name``'s policy config with its preset applied, if it has one."""
        if name in self._configs:
            return self._configs[name]
        config = self.policy.backends.get(name)
        if config is not None and config.type == "openai":
            from tiered_router.backends.presets import resolve_config

            config = resolve_config(config, backend=name)
        self._configs[name] = config
        return config

    def _supports_tools(self, name: str) -> bool:
        injected = self._backends.get(name)
        if injected is not None:
            return injected.supports_tools
        config = self.backend_config(name)
        return config.tools if config is not None else True

    def close(self) -> None:
        """Close the HTTP clients of the backends built so far."""
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        for backend in self._backends.values():
            aclose = getattr(backend, "aclose", None)
            if aclose is not None:
                await aclose()
            else:
                close = getattr(backend, "close", None)
                if close is not None:
                    close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, turn: Turn) -> Decision:
        """Score the turn and pick its tier. Pure: makes no model call.

        Inside a task (:meth:`task`), the task's state may change the decision; its rule
        then starts with ``task.``.
        """
        task = CURRENT_TASK.get()
        if task is not None:
            turn = task.prepare(turn)
        decision = self._decide(turn)
        return task.adjust(turn, decision) if task is not None else decision

    def _decide(self, turn: Turn) -> Decision:
        decision = decide(turn, self.scorer.score(turn), self.policy)
        if decision.tier == "fast" and turn.tools and not self._supports_tools(decision.backend):
            frontier = self.policy.backend_for("frontier")
            decision = replace(
                decision,
                tier="frontier",
                backend=frontier,
                rule="capability.tools",
                reasons=(
                    f"fast backend {decision.backend!r} cannot call tools (tools: false)",
                    *decision.reasons,
                ),
            )
        return decision

    # -- completing --------------------------------------------------------------------------

    async def acomplete(
        self, turn: Turn, *, deadline_s: float | None | Unset = UNSET
    ) -> RoutedResult:
        """Route one turn: decide, call, gate, escalate when needed.

        Args:
            turn: The turn to route.
            deadline_s: Seconds for the whole turn (retries and escalation included);
                ``None`` turns it off, ``UNSET`` uses the policy's ``resilience.deadline_s``.

        Returns:
            The completion with its tier and trace.

        Raises:
            AllTiersFailed: No tier produced a completion; carries every attempt.
            GateFailed: The last draft failed the gate and the policy says ``raise``.
        """
        run = self._start(turn, deadline_s)
        tier = run.first_tier()
        while tier is not None:
            try:
                completion = await self._acall(run, tier)
            except BackendError as exc:
                tier = run.after_error(tier, exc)
                continue
            tier = run.after_draft(tier, completion)
        return self._finish(run)

    def complete(self, turn: Turn, *, deadline_s: float | None | Unset = UNSET) -> RoutedResult:
        """Sync twin of :meth:`acomplete`."""
        run = self._start(turn, deadline_s)
        tier = run.first_tier()
        while tier is not None:
            try:
                completion = self._call(run, tier)
            except BackendError as exc:
                tier = run.after_error(tier, exc)
                continue
            tier = run.after_draft(tier, completion)
        return self._finish(run)

    async def _acall(self, run: _Run, tier: Tier) -> Completion:
        async def once(backend: Backend, request: CompletionRequest, started: float) -> Completion:
            completion = await backend.acomplete(request)
            run.record_draft(tier, backend, completion, self._clock() - started)
            return completion

        return await self._aretry(run, tier, once)

    def _call(self, run: _Run, tier: Tier) -> Completion:
        def once(backend: Backend, request: CompletionRequest, started: float) -> Completion:
            completion = backend.complete(request)
            run.record_draft(tier, backend, completion, self._clock() - started)
            return completion

        return self._retry(run, tier, once)

    async def _aretry(
        self,
        run: _Run,
        tier: Tier,
        once: Callable[[Backend, CompletionRequest, float], Awaitable[_T]],
    ) -> _T:
        """Run ``once`` against the tier's backend under the retry loop, recording errors."""
        name = self.policy.backend_for(tier)
        backend = self.backend(name)
        loop = self._retries.aretrying(
            max_retries=run.max_retries(name), deadline=run.deadline, sleep=self._asleep
        )
        async for attempt in loop:
            with attempt:
                request = run.request(name)
                started = self._clock()
                try:
                    return await once(backend, request, started)
                except BackendError as exc:
                    run.record_error(tier, backend, exc, self._clock() - started)
                    raise
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def _retry(
        self, run: _Run, tier: Tier, once: Callable[[Backend, CompletionRequest, float], _T]
    ) -> _T:
        """Sync twin of :meth:`_aretry`."""
        name = self.policy.backend_for(tier)
        backend = self.backend(name)
        loop = self._retries.retrying(
            max_retries=run.max_retries(name), deadline=run.deadline, sleep=self._sleep
        )
        for attempt in loop:
            with attempt:
                request = run.request(name)
                started = self._clock()
                try:
                    return once(backend, request, started)
                except BackendError as exc:
                    run.record_error(tier, backend, exc, self._clock() - started)
                    raise
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    # -- streaming ---------------------------------------------------------------------------

    def astream(
        self, turn: Turn, *, deadline_s: float | None | Unset = UNSET
    ) -> AsyncRoutedStream:
        """Route one turn and stream the answer.

        No I/O happens until the stream is started or iterated. A fast draft is buffered
        and gated before its first chunk when the gate needs the whole draft; otherwise it
        streams straight through. See :mod:`tiered_router._streaming`.

        Example:
            ```python
            stream = router.astream(turn)
            await stream.start()          # the serving tier is known now
            async for chunk in stream:
                print(chunk.text, end="")
            print(stream.result.trace.tier)
            ```
        """
        return AsyncRoutedStream(self, self._start(turn, deadline_s))

    def stream(self, turn: Turn, *, deadline_s: float | None | Unset = UNSET) -> RoutedStream:
        """Sync twin of :meth:`astream`."""
        return RoutedStream(self, self._start(turn, deadline_s))

    # -- tasks -------------------------------------------------------------------------------

    def task(
        self,
        task_id: str | None = None,
        *,
        max_cost: float | None = None,
        max_latency_s: float | None = None,
        max_escalations: int | None = None,
    ) -> Task:
        """Group the turns of one agent task (a sync and async context manager).

        Inside ``with router.task() as task:`` every routed turn gets its step index, the
        task id and the agent signals; the task adds up cost, latency, fast share and
        escalations, keeps every trace, and may change decisions from task state (rules
        ``task.stall``, ``task.locked``, ``task.budget.*``). See :mod:`tiered_router.task`.

        Args:
            task_id: The task's id (random when ``None``).
            max_cost: Cost budget, US dollars (``None``: the policy's ``task.max_cost``).
            max_latency_s: Latency budget, seconds (``None``: the policy's).
            max_escalations: Escalation budget (``None``: the policy's).
        """
        return Task(
            self,
            task_id,
            max_cost=max_cost,
            max_latency_s=max_latency_s,
            max_escalations=max_escalations,
        )

    def _start(self, turn: Turn, deadline_s: float | None | Unset) -> _Run:
        limit = self.policy.resilience.deadline_s if isinstance(deadline_s, Unset) else deadline_s
        now = self._clock()
        deadline = Deadline(None if limit is None else now + limit)
        task = CURRENT_TASK.get()
        if task is not None:
            turn = task.prepare(turn)
        decision = self._decide(turn)
        if task is not None:
            decision = task.adjust(turn, decision)
        return _Run(self, turn, decision, deadline, started=now)

    def _finish(self, run: _Run) -> RoutedResult:
        return run.finish(self._clock() - run.started)

    def _abandon(self, run: _Run) -> Trace:
        """End a turn whose stream broke after chunks reached the caller; emit its trace."""
        trace = run.trace(self._clock() - run.started)
        self._emit(trace)
        return trace

    def _emit(self, trace: Trace) -> None:
        task = CURRENT_TASK.get()
        if task is not None:
            task.observe(trace)
        for sink in self.sinks:
            sink.emit(trace)


class _Run:
    """The state of one routed turn, shared by the async and the sync path."""

    def __init__(
        self, router: Router, turn: Turn, decision: Decision, deadline: Deadline, *, started: float
    ) -> None:
        self.router = router
        self.policy = router.policy
        self.turn = turn
        self.decision = decision
        self.deadline = deadline
        self.started = started
        self.attempts: list[Attempt] = []
        self.errors: list[BackendError] = []
        self.escalations: list[str] = []
        self.tries: dict[str, int] = {}
        self.last: tuple[Tier, Completion, Verdict | None] | None = None
        self.returned: tuple[Tier, Completion, Verdict | None] | None = None
        self.tried: set[Tier] = set()

    # which tier next ------------------------------------------------------------------------

    def usable(self, tier: Tier) -> bool:
        name = self.policy.backend_for(tier)
        return not self.turn.tools or self.router._supports_tools(name)

    def first_tier(self) -> Tier:
        tier = self.decision.tier
        other = _OTHER[tier]
        name = self.policy.backend_for(tier)
        if (
            not self.router.breaker(name).allow()
            and self.usable(other)
            and self.router.breaker(self.policy.backend_for(other)).allow()
        ):
            # route around an open backend, but only when the other path is open
            self.escalations.append("circuit_open")
            self.attempts.append(
                Attempt(
                    tier=tier,
                    backend=name,
                    model="",
                    error=_describe(BackendUnavailable("circuit breaker is open", backend=name)),
                )
            )
            return other
        return tier

    def next_tier(self, tier: Tier, reason: str) -> Tier | None:
        """The tier to try after ``tier`` failed for ``reason``, if any (no side effects)."""
        other = _OTHER[tier]
        if other in self.tried or not self.usable(other):
            return None
        if tier == "fast":
            esc = self.policy.escalation
            allowed = esc.on_gate_failure if reason == "gate_failed" else esc.on_backend_error
            return other if allowed else None
        # a frontier draft is never sent down to the fast tier; a frontier error may be
        return other if reason == "backend_error" else None

    def _next_after_failure(self, tier: Tier, reason: str) -> Tier | None:
        nxt = self.next_tier(tier, reason)
        if nxt is not None:
            self.escalations.append(reason if tier == "fast" else f"frontier_{reason}")
        return nxt

    def after_error(self, tier: Tier, exc: BackendError) -> Tier | None:
        nxt = self._next_after_failure(tier, "backend_error")
        if nxt is None and self.last is not None:
            self.returned = self.last  # an earlier draft failed the gate: keep it, lose nothing
        return nxt

    def after_draft(self, tier: Tier, completion: Completion) -> Tier | None:
        assert self.last is not None
        verdict = self.last[2]
        if verdict is None or verdict.passed:
            self.returned = self.last
            return None
        nxt = self._next_after_failure(tier, "gate_failed")
        if nxt is None:
            self.returned = self.last
        return nxt

    # one call -------------------------------------------------------------------------------

    def max_retries(self, name: str) -> int:
        config = self.router.backend_config(name)
        return config.max_retries if config is not None else 0

    def request(self, name: str) -> CompletionRequest:
        config = self.router.backend_config(name)
        per_call = config.timeout_s if config is not None else None
        left = self.deadline.remaining(self.router._clock())
        if left is not None and left <= 0:
            raise BackendTimeout("the turn's deadline has passed", backend=name)
        timeout = per_call if left is None else (left if per_call is None else min(per_call, left))
        return CompletionRequest.from_turn(self.turn, timeout_s=timeout)

    def _attempt(self, tier: Tier, backend: Backend, latency: float, **fields: Any) -> Attempt:
        name = backend.name
        index = self.tries.get(name, 0)
        self.tries[name] = index + 1
        self.tried.add(tier)
        return Attempt(
            tier=tier,
            backend=name,
            model=backend.model,
            try_index=index,
            latency_s=latency,
            **fields,
        )

    def record_error(self, tier: Tier, backend: Backend, exc: BackendError, latency: float) -> None:
        self.router.breaker(backend.name).record(False)
        self.errors.append(exc)
        self.attempts.append(self._attempt(tier, backend, latency, error=_describe(exc)))

    def record_draft(
        self, tier: Tier, backend: Backend, completion: Completion, latency: float
    ) -> None:
        self.router.breaker(backend.name).record(True)
        verdict: Verdict | None = None
        if tier == "fast" or self.policy.gate.check_frontier:
            verdict = self.router.gate.evaluate(completion, self.turn)
        config = self.router.backend_config(backend.name)
        cost = cost_of(completion.usage, config.price) if config is not None else 0.0
        self.attempts.append(
            self._attempt(
                tier, backend, latency, usage=completion.usage, cost=cost, verdict=verdict
            )
        )
        self.last = (tier, completion, verdict)

    # the end --------------------------------------------------------------------------------

    def trace(self, latency: float) -> Trace:
        """The trace of the turn as it stands."""
        returned = self.returned
        escalated = self.decision.tier == "fast" and any(
            e in ("gate_failed", "backend_error", "circuit_open") for e in self.escalations
        )
        return Trace(
            turn_id=self.turn.id,
            decision=self.decision,
            attempts=tuple(self.attempts),
            tier=returned[0] if returned else None,
            backend=self.policy.backend_for(returned[0]) if returned else None,
            escalated=escalated,
            escalations=tuple(self.escalations),
            verdict=returned[2] if returned else None,
            latency_s=latency,
            metadata=self.turn.metadata,
        )

    def finish(self, latency: float) -> RoutedResult:
        returned = self.returned
        trace = self.trace(latency)
        escalated = trace.escalated
        if returned is None:
            self.router._emit(trace)
            tried = ", ".join(sorted({a.backend for a in self.attempts})) or "none"
            raise AllTiersFailed(
                f"no tier produced a completion for turn {self.turn.id} (tried: {tried}); "
                f"last error: {self.errors[-1] if self.errors else 'none'}",
                attempts=self.attempts,
                errors=self.errors,
                trace=trace,
            )
        tier, completion, verdict = returned
        logger.info(
            "routed %s tier=%s score=%.2f rule=%s escalated=%s attempts=%d",
            self.turn.id,
            tier,
            self.decision.score,
            self.decision.rule,
            escalated,
            len(self.attempts),
        )
        if (
            verdict is not None
            and not verdict.passed
            and self.policy.escalation.when_frontier_fails_gate == "raise"
        ):
            self.router._emit(trace)
            raise GateFailed(
                f"the {tier} draft of turn {self.turn.id} failed the gate: "
                + "; ".join(verdict.reasons),
                verdict=verdict,
                attempts=self.attempts,
                trace=trace,
            )
        self.router._emit(trace)
        return RoutedResult(completion=completion, tier=tier, escalated=escalated, trace=trace)
