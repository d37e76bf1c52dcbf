"""The Router: decide -> dispatch -> gate -> escalate, with a trace of every step.

The async path is the core; :meth:`Router.complete` is its sync twin. Both drive the
escalation engine (:mod:`tiered_router.engine._machine`: a turn's state machine, no I/O) with a
:class:`~tiered_router.engine._dispatch.Dispatcher` (backend calls under breakers and retries), so
the escalation logic exists once; only the waiting and the backend call differ. The router
hands the engine its :class:`~tiered_router.engine._machine.EnginePorts` through a private
adapter (:class:`~tiered_router.engine._ports.RouterPorts`: policy, gate, scorer, clock,
capability lookups, trace sinks), so its own public face is a caller's. A fast turn its
queue would make late goes to the frontier before any call
(:mod:`tiered_router.engine._capacity`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tiered_router._types import UNSET, PolicySource, Tier, Unset
from tiered_router.backends._base import Backend, CompletionRequest
from tiered_router.engine._call_args import checked_deadline, checked_tier, checked_turn
from tiered_router.engine._capacity import route_by_capacity
from tiered_router.engine._context import CURRENT_TASK
from tiered_router.engine._dispatch import Dispatcher
from tiered_router.engine._drive import Driver
from tiered_router.engine._latency import LatencyTracker
from tiered_router.engine._machine import RoutedResult, TurnRun
from tiered_router.engine._plan import decide_turn, plan_turn
from tiered_router.engine._ports import RouterPorts
from tiered_router.engine._recording import RecordOption
from tiered_router.engine._shadow import ShadowRunner
from tiered_router.engine._streaming import AsyncRoutedStream, RoutedStream
from tiered_router.engine.resilience import CircuitBreaker, RetrySchedule
from tiered_router.gate import QualityGate
from tiered_router.monitor._build import build_monitor
from tiered_router.routing import Decision
from tiered_router.scoring import Scorer, build_scorer, panel_deferral
from tiered_router.state import MemoryStateStore, SafeStateStore, StateStore
from tiered_router.task import Task
from tiered_router.trace import TraceSink
from tiered_router.turn import Completion, Turn

if TYPE_CHECKING:
    from tiered_router.monitor import KindQuality, Monitor
    from tiered_router.policy._schema import BackendConfig, Policy

__all__ = ["RoutedResult", "Router"]

logger = logging.getLogger(__name__)


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
        asleep: Async sleep used between retries (default: ``asyncio.sleep``).
        rng: Source of retry jitter.
        record: Record each turn's request and each attempt's output in its trace
            (``True``), through a redaction hook (a callable: record in, what to keep out,
            ``None`` for nothing), or not at all (``False``, the default).
        state: Where circuit breakers and task totals live (default: this process,
            :class:`~tiered_router.state.MemoryStateStore`). A failing store never fails a
            turn: the router falls back to in-process state with a warning.
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
        asleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
        record: RecordOption = False,
        state: StateStore | None = None,
    ) -> None:
        # imported here: the policy schema (pydantic) stays off the `import Router` path
        from tiered_router.policy import load_policy

        self.policy = load_policy(policy)  # a Policy is returned as is
        self.scorer = scorer or build_scorer(self.policy.scoring)
        self.deferral = panel_deferral(self.policy)  # drafts.deferral's model, read once
        self.gate = gate or QualityGate.from_config(self.policy.gate)
        self.sinks = tuple(sinks)
        self.record = record
        self._backends: dict[str, Backend] = dict(backends or {})
        self._clock = clock
        self._sleep = sleep
        self._asleep = asleep or _asyncio_sleep
        self._own_state: Any = None  # a store built from the policy's state: section
        if state is None and self.policy.state.type == "redis":
            from tiered_router.state.redis_store import RedisStateStore

            state = self._own_state = RedisStateStore.from_config(self.policy.state)
        self.state: StateStore = (
            MemoryStateStore()
            if state is None
            else state
            if isinstance(state, (MemoryStateStore, SafeStateStore))
            else SafeStateStore(state)
        )
        self._breakers: dict[str, CircuitBreaker] = {}
        self.latency = LatencyTracker()
        """Measured latency per backend (EWMA), replacing the latency models in estimates."""
        self._ports = RouterPorts(
            self.policy,
            gate=self.gate,
            scorer=self.scorer,
            record=record,
            clock=clock,
            backends=self._backends,
            state=self.state,
            latency=self.latency,
            sinks=self.sinks,
            deferral=self.deferral,
        )
        self._dispatch = Dispatcher(
            self.policy,
            backend=self.backend,
            breaker=self.breaker,
            retries=RetrySchedule(self.policy.resilience.retry, clock=clock, rng=rng),
            clock=clock,
            sleep=sleep,
            asleep=self._asleep,
            emit=self._ports.emit,
            in_flight=self.latency.in_flight,
        )
        self._driver = Driver(
            self._dispatch, percentile=self._percentile, acomplete=_acomplete, complete=_complete
        )
        self._shadows = ShadowRunner(
            drive=self._driver.drive, adrive=self._driver.adrive, dispatch=self._dispatch
        )
        self.monitor: Monitor | None = build_monitor(self._ports, shadows=self._shadows)  # monitor:
        self._driver.monitor = self.monitor  # routed streams reach it through their driver

    @classmethod
    def from_yaml(cls, path: PolicySource, **options: Any) -> Router:
        """Load the policy at ``path`` and build a router (keyword options as in ``Router``)."""
        from tiered_router.policy import load_policy

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
                name, self.state, self.policy.resilience.breaker, clock=self._clock
            )
        return found

    def backend_config(self, name: str) -> BackendConfig | None:
        """Return backend ``name``'s policy config with its preset applied, if it has one."""
        return self._ports.backend_config(name)

    def close(self) -> None:
        """Close the backends' HTTP clients, the sinks that close, and a policy-built store.

        Shadow runs still going are waited for first.
        """
        self._shadows.drain()
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        self._close_sinks()
        if self._own_state is not None:
            self._own_state.close()

    def _close_sinks(self) -> None:
        # a JSONLSink reopens its file on the next trace, so closing it here is always safe
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        await self._shadows.adrain()
        self._shadows.drain()
        for backend in self._backends.values():
            aclose = getattr(backend, "aclose", None)
            if aclose is not None:
                await aclose()
            else:
                close = getattr(backend, "close", None)
                if close is not None:
                    close()
        self._close_sinks()
        if self._own_state is not None:
            await self._own_state.aclose()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, turn: Turn, *, tier: Tier | None = None) -> Decision:
        """Score the turn and pick its tier. Pure: makes no model call.

        Inside a task (:meth:`task`), the task's state may change the decision; its rule
        then starts with ``task.``.

        Args:
            turn: The turn.
            tier: Pin the first tier (``fast`` or ``frontier``) instead of deciding; the
                rule reads ``pinned``. A pinned fast turn with tools still goes to the
                frontier when the fast backend cannot call tools (``capability.tools``).
        """
        return decide_turn(
            self._ports, checked_turn(turn), tier=checked_tier(tier), task=CURRENT_TASK.get()
        )[1]

    # -- completing --------------------------------------------------------------------------

    async def acomplete(
        self,
        turn: Turn,
        *,
        tier: Tier | None = None,
        deadline_s: float | None | Unset = UNSET,
    ) -> RoutedResult:
        """Route one turn: decide, call, gate, escalate when needed.

        Args:
            turn: The turn to route.
            tier: Pin the first tier instead of deciding (see :meth:`decide`); the draft is
                still gated and escalated by the policy.
            deadline_s: Seconds for the whole turn (retries and escalation included);
                ``None`` turns it off, ``UNSET`` uses the policy's ``resilience.deadline_s``.

        Returns:
            The completion with its tier and trace.

        Raises:
            AllTiersFailed: No tier produced a completion; carries every attempt.
            GateFailed: The last draft failed the gate and the policy says ``raise``.
        """
        task = CURRENT_TASK.get()
        if task is not None:
            await task.arefresh()
        if self.monitor is not None:  # the kinds' states, read again when due
            await self.monitor.arefresh()
        run = self._start(turn, tier, deadline_s)
        await self._driver.adrive(run)
        result = await self._dispatch.afinish(run)
        self._shadows.astart(run)
        return result if self.monitor is None else self.monitor.ashadow(run, result)

    def complete(
        self,
        turn: Turn,
        *,
        tier: Tier | None = None,
        deadline_s: float | None | Unset = UNSET,
    ) -> RoutedResult:
        """Sync twin of :meth:`acomplete`."""
        task = CURRENT_TASK.get()
        if task is not None:
            task.refresh()
        run = self._start(turn, tier, deadline_s)
        self._driver.drive(run)
        result = self._dispatch.finish(run)
        self._shadows.start(run)
        return result if self.monitor is None else self.monitor.shadow(run, result)

    def _percentile(self, backend: str, q: float, min_samples: int) -> float | None:
        return self.latency.percentile(backend, q, min_samples=min_samples)

    def drain_shadows(self, timeout_s: float | None = None) -> None:
        """Wait for the shadow runs started by the sync path (``close`` does too)."""
        self._shadows.drain(timeout_s)

    async def adrain_shadows(self) -> None:
        """Wait for the shadow runs started by the async path (``aclose`` does too)."""
        await self._shadows.adrain()

    # -- streaming ---------------------------------------------------------------------------

    def astream(
        self,
        turn: Turn,
        *,
        tier: Tier | None = None,
        deadline_s: float | None | Unset = UNSET,
    ) -> AsyncRoutedStream:
        """Route one turn and stream the answer.

        No I/O happens until the stream is started or iterated. A fast draft is buffered
        and gated before its first chunk when the gate needs the whole draft; otherwise it
        streams straight through. See :mod:`tiered_router.engine._streaming`.

        Args:
            turn: The turn to route.
            tier: Pin the first tier instead of deciding (see :meth:`decide`).
            deadline_s: Seconds for the whole turn (see :meth:`acomplete`).

        Example:
            ```python
            stream = router.astream(turn)
            await stream.start()          # the serving tier is known now
            async for chunk in stream:
                print(chunk.text, end="")
            print(stream.result.trace.tier)
            ```
        """
        return AsyncRoutedStream(self._dispatch, self._start(turn, tier, deadline_s), self._driver)

    def stream(
        self,
        turn: Turn,
        *,
        tier: Tier | None = None,
        deadline_s: float | None | Unset = UNSET,
    ) -> RoutedStream:
        """Sync twin of :meth:`astream`."""
        return RoutedStream(self._dispatch, self._start(turn, tier, deadline_s), self._driver)

    # -- tasks -------------------------------------------------------------------------------

    def task(
        self,
        task_id: str | None = None,
        *,
        max_cost: float | None = None,
        max_latency_s: float | None = None,
        max_escalations: int | None = None,
        hedge: bool | None = None,
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
            hedge: Allow hedged frontier calls (``None``: the policy's ``task.hedge``).
        """
        return Task(
            self._ports,
            task_id,
            max_cost=max_cost,
            max_latency_s=max_latency_s,
            max_escalations=max_escalations,
            hedge=hedge,
        )

    def _start(self, turn: Turn, tier: Tier | None, deadline_s: float | None | Unset) -> TurnRun:
        run = plan_turn(
            self._ports,
            checked_turn(turn),
            deadline_s=checked_deadline(deadline_s, unset=self.policy.resilience.deadline_s),
            tier=checked_tier(tier),
            task=CURRENT_TASK.get(),
        )
        run = route_by_capacity(run, latency=self.latency)
        if self.monitor is not None:
            self.monitor.prepare(run)  # its states read again when due, then the decision
        return run

    def quality(self) -> dict[str, KindQuality]:
        """The monitor's figures per turn kind (``{}`` without ``monitor:``; docs/monitor.md)."""
        return {} if self.monitor is None else self.monitor.quality()


async def _acomplete(backend: Backend, request: CompletionRequest) -> Completion:
    return await backend.acomplete(request)


def _complete(backend: Backend, request: CompletionRequest) -> Completion:
    return backend.complete(request)


async def _asyncio_sleep(seconds: float) -> None:
    # imported on first use: code that only routes synchronously never loads asyncio (or ssl)
    import asyncio

    await asyncio.sleep(seconds)
