"""A turn's attempts in flight at once: a draft panel and a hedged frontier call (async).

The machine runs a turn one attempt at a time; when the policy has ``drafts:`` or
``hedge:`` and the turn starts on the fast tier, :class:`Flight` runs its fast side and
its hedge concurrently and reports each outcome back to the machine:

- the fast side is a panel (:mod:`tiered_router.engine._panel`: ``k`` drafts at once, the
  panel decided as soon as its outcome cannot change, the drafts still running cancelled)
  or the usual single draft under retries;
- the hedge (:mod:`tiered_router.engine._hedge`) starts the frontier call after its delay;
  a fast side that ends first cancels it (nothing is traced when it had not started yet);
  a hedge that answers first with a draft the gate accepts wins, and the fast side is
  cancelled; a fast side that escalates takes the hedge's answer as its escalation.

Cancelled calls are traced as ``cancelled`` (neutral for their breakers). What
:meth:`Flight.arun` returns is the next tier for the usual one-at-a-time loop (``None``:
the turn has its answer). The sync twin is :mod:`tiered_router.engine._flight_sync`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tiered_router.engine._flight_plan import (
    FlightPlan,
    HedgeState,
    OwnQueue,
    RaceAction,
    calls,
    cut_drafts,
    hedge_answer,
    hedge_state,
    hedged,
    panel_turn,
    race_action,
    record_loser,
    take_late,
)
from tiered_router.engine._panel import Panel
from tiered_router.engine._panel_plan import DraftSpec, PanelPlan
from tiered_router.exceptions import BackendError

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.backends._base import Backend, CompletionRequest
    from tiered_router.engine._dispatch import Dispatcher
    from tiered_router.engine._machine import TurnRun
    from tiered_router.turn import Completion

__all__ = ["Flight"]


_Draft = tuple["Completion | BackendError", str, float]


class Flight:
    """Runs a turn's concurrent attempts for the engine (async); see the module docstring.

    Args:
        dispatch: The calls, breakers and retries.
        complete: One whole-completion call of a backend.
    """

    def __init__(
        self,
        dispatch: Dispatcher,
        *,
        complete: Callable[[Backend, CompletionRequest], Awaitable[Completion]],
    ) -> None:
        self._dispatch = dispatch
        self._complete = complete

    async def arun(self, run: TurnRun, plan: FlightPlan) -> Tier | None:
        """Run the fast side (and the hedge) of ``run``; return the next tier, if any."""
        panel, hedge_s = plan
        fast = asyncio.ensure_future(self._afast(run, panel))
        if hedge_s is None:
            try:
                return await fast
            except BaseException:
                await _acancel(fast)
                raise
        started: list[bool] = []
        hedge = asyncio.ensure_future(self._ahedge(run, hedge_s, started))
        try:
            return await self._race(run, fast, hedge, started)
        except BaseException:
            await _acancel(fast)
            await _acancel(hedge)
            raise
        finally:
            run.hedge_over()

    async def _race(
        self,
        run: TurnRun,
        fast: asyncio.Future[Tier | None],
        hedge: asyncio.Future[Any],
        started: list[bool],
    ) -> Tier | None:
        """Wait and cancel as :func:`~tiered_router.engine._flight_plan.race_action` says."""
        await asyncio.wait({fast, hedge}, return_when=asyncio.FIRST_COMPLETED)
        seen: HedgeState | None = None  # the hedge's answer, once the machine has it
        if not fast.done():  # the hedge ended first
            action = race_action(_state(hedge, started), fast_done=False)
            if action is RaceAction.RECORD_HEDGE:
                seen = hedged(run, hedge.result())
                action = race_action(seen, fast_done=False)
            if action is RaceAction.HEDGE_WINS:
                run.cancel_tier("fast")
                await _acancel(fast)
                run.hedge_won()
                return None
        nxt = await fast
        action = race_action(seen or _state(hedge, started), fast_done=True, fast_next=nxt)
        if action is RaceAction.CANCEL_HEDGE:
            run.cancel_tier("frontier")
            await _acancel(hedge)
        elif action is RaceAction.RECORD_LATE_HEDGE:
            record_loser(run, hedge.result())
        elif action is RaceAction.TAKE_HEDGE:
            run.hedge_took_over()
            return None
        elif action is RaceAction.AWAIT_HEDGE:
            await asyncio.wait({hedge})
            return hedge_answer(run, hedge.result())
        elif action is RaceAction.CALL_FRONTIER:
            await _acancel(hedge)  # not started yet: the usual frontier call takes over
        return nxt

    async def _ahedge(self, run: TurnRun, delay: float, started: list[bool]) -> Any:
        if delay > 0:
            await self._dispatch.asleep(delay)
        started.append(True)
        run.hedge_started()
        try:
            completion, backend, begun = await self._dispatch.acall(run, "frontier", self._complete)
        except BackendError:
            return None  # traced by the dispatcher; the fast side may still answer
        return completion, backend, self._dispatch.clock() - begun

    # -- the fast side ---------------------------------------------------------------------

    async def _afast(self, run: TurnRun, plan: PanelPlan | None) -> Tier | None:
        if plan is None:
            try:
                completion, backend, begun = await self._dispatch.acall(run, "fast", self._complete)
            except BackendError as exc:
                return run.after_error("fast", exc)
            latency = self._dispatch.clock() - begun
            return run.after_draft("fast", backend.name, backend.model, completion, latency)
        return await self._apanel(run, plan)

    async def _apanel(self, run: TurnRun, plan: PanelPlan) -> Tier | None:
        panel = Panel(plan, run.turn)
        clock = self._dispatch.clock
        begun = clock()
        queue = OwnQueue(run, plan)
        tasks = {
            asyncio.ensure_future(self._adraft(run, specs, plan, queue)): specs
            for specs in calls(plan)
        }
        pending = set(tasks)
        try:
            while pending and not panel.decided():
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: tasks[t][0].index):
                    panel.take(tasks[task], *task.result())
            # inside the guard: a hedge can win while the cut drafts unwind
            await _acancel_all(pending)
        except BaseException:
            await _acancel_all(pending)
            pending = take_late(panel, tasks, pending)
            # a hedge answered first, or the turn was cut short: either way every draft is
            # traced (the ones that answered with their cost, the others as cancelled)
            cut = self._cut(tasks, pending, clock() - begun)
            if run.is_cancelling("fast"):
                panel.abandon(run, cut)
            else:
                panel.abandon(run, cut, reason="the turn was cut short")
            raise
        pending = take_late(panel, tasks, pending)
        return panel.settle(run, self._cut(tasks, pending, clock() - begun))

    def _cut(
        self, tasks: dict[Any, tuple[DraftSpec, ...]], pending: set[Any], latency: float
    ) -> list[tuple[DraftSpec, str, float]]:
        return cut_drafts(self._dispatch, [tasks[t] for t in pending], latency)

    async def _adraft(
        self, run: TurnRun, specs: tuple[DraftSpec, ...], plan: PanelPlan, queue: OwnQueue
    ) -> _Draft:
        clock = self._dispatch.clock
        spec = specs[0]
        backend = self._dispatch.backend(spec.backend)
        begun = clock()
        try:
            request = self._dispatch.request(run, spec.backend, turn=panel_turn(run, specs, plan))
            completion = await self._dispatch.aonce(
                run,
                spec.backend,
                request,
                self._complete,
                self_queued=lambda: queue.absorbs(spec.backend),
            )
        except BackendError as exc:
            return exc, backend.model, clock() - begun
        return completion, backend.model, clock() - begun


def _state(hedge: asyncio.Future[Any], started: list[bool]) -> HedgeState:
    done = hedge.done()
    return hedge_state(started=bool(started), done=done, outcome=hedge.result() if done else None)


async def _acancel(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has finished (its call traced, its breaker released)."""
    if task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait({task})


async def _acancel_all(tasks: set[Any]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)
