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
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tiered_router.engine._panel import (
    DraftSpec,
    FlightPlan,
    Panel,
    PanelPlan,
    draft_turn,
    own_calls,
)
from tiered_router.exceptions import BackendError

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.backends._base import Backend, CompletionRequest
    from tiered_router.engine._dispatch import Dispatcher
    from tiered_router.engine._machine import TurnRun
    from tiered_router.turn import Completion, Turn

__all__ = ["Flight", "OwnQueue"]


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
            run.roles.pop("frontier", None)

    async def _race(
        self,
        run: TurnRun,
        fast: asyncio.Future[Tier | None],
        hedge: asyncio.Future[Any],
        started: list[bool],
    ) -> Tier | None:
        await asyncio.wait({fast, hedge}, return_when=asyncio.FIRST_COMPLETED)
        hedge_draft: bool | None = None  # None: no answer; else whether the gate accepted it
        if hedge.done() and not fast.done():
            hedge_draft = self._hedged(run, hedge)
            if hedge_draft:
                run.cancelling.add("fast")
                await _acancel(fast)
                run.escalations.append("hedged")
                return None
        nxt = await fast
        if nxt != "frontier":
            if not hedge.done():
                run.cancelling.add("frontier")
                await _acancel(hedge)
            elif hedge_draft is None and hedge.result() is not None:
                record_loser(run, hedge.result())  # both ended at once: the fast side won
            return nxt
        if hedge_draft is not None:  # the hedge's answer is the escalation's (kept by the machine)
            run.tried.add("frontier")
            return None
        if hedge.done() or started:
            await asyncio.wait({hedge})
            return hedge_answer(run, hedge.result())
        await _acancel(hedge)  # not started yet: the usual frontier call takes over
        return nxt

    def _hedged(self, run: TurnRun, hedge: asyncio.Future[Any]) -> bool | None:
        """Record the hedge's answer; whether the gate accepted it (``None``: it failed)."""
        return hedged(run, hedge.result())

    async def _ahedge(self, run: TurnRun, delay: float, started: list[bool]) -> Any:
        if delay > 0:
            await self._dispatch.asleep(delay)
        started.append(True)
        run.roles["frontier"] = "hedge"
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
        except BaseException:
            await _acancel_all(pending)
            pending = take_late(panel, tasks, pending)
            # a hedge answered first, or the turn was cut short: either way every draft is
            # traced (the ones that answered with their cost, the others as cancelled)
            cut = self._cut(tasks, pending, clock() - begun)
            if "fast" in run.cancelling:
                panel.abandon(run, cut)
            else:
                panel.abandon(run, cut, reason="the turn was cut short")
            raise
        await _acancel_all(pending)
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
            request = run.request(spec.backend, turn=panel_turn(run, specs, plan))
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


class OwnQueue:
    """How many of a panel's drafts wait behind the turn's own drafts, per backend.

    ``k`` drafts on a backend with ``max_concurrency`` slots below ``k``: the server runs
    ``max_concurrency`` of them and queues the others behind them. A timeout of one of those
    (at most ``k - max_concurrency`` per backend) is the turn's own doing, not the backend's:
    :meth:`absorbs` says so, and the breaker counts it as neutral. The others count as usual,
    so a backend that hangs still opens its breaker. Thread-safe (the sync panel's drafts
    run on threads).
    """

    def __init__(self, run: TurnRun, plan: PanelPlan) -> None:
        self._excess: dict[str, int] = {}
        self._lock = threading.Lock()
        for name, count in own_calls(plan).items():
            config = run.ports.backend_config(name)
            slots = config.max_concurrency if config is not None else None
            if slots is not None and count > slots:
                self._excess[name] = count - slots

    def absorbs(self, backend: str) -> bool:
        """Whether a timed-out draft on ``backend`` is one the turn's own drafts queued."""
        with self._lock:
            left = self._excess.get(backend, 0)
            if left > 0:
                self._excess[backend] = left - 1
            return left > 0


def take_late(
    panel: Panel, groups: dict[Any, tuple[DraftSpec, ...]], pending: set[Any]
) -> set[Any]:
    """Take the drafts that answered before they could be cut; return the others.

    A draft can end between the panel's last look and the cutting of the rest: it has an
    answer (and a cost), so it is an arrival, not a cut draft. ``pending`` holds asyncio
    tasks or thread futures; a sync draft given up at the cut (its value ``None``) stays a
    cut draft.
    """
    taken = set()
    for job in sorted(pending, key=lambda j: groups[j][0].index):
        if not job.done() or job.cancelled() or job.exception() is not None:
            continue
        value, model, latency = job.result()
        if value is not None:
            panel.take(groups[job], value, model, latency)
            taken.add(job)
    return pending - taken


def calls(plan: PanelPlan) -> list[tuple[DraftSpec, ...]]:
    """The requests of a panel: one per draft, or one for all (``n`` choices)."""
    return [plan.drafts] if plan.n else [(spec,) for spec in plan.drafts]


def panel_turn(run: TurnRun, specs: tuple[DraftSpec, ...], plan: PanelPlan) -> Turn:
    """The turn one panel request sends."""
    n = len(specs) if len(specs) > 1 else None
    return draft_turn(run.turn, specs[0], temperature=plan.temperature, n=n)


def cut_drafts(
    dispatch: Dispatcher, pending: list[tuple[DraftSpec, ...]], latency: float
) -> list[tuple[DraftSpec, str, float]]:
    """The drafts still running when the panel was decided, to trace as cancelled."""
    specs = sorted((s for group in pending for s in group), key=lambda s: s.index)
    return [(s, dispatch.backend(s.backend).model, latency) for s in specs]


def hedged(run: TurnRun, outcome: Any) -> bool | None:
    """Record a hedge's answer (the machine keeps it when it is the best so far).

    Returns whether the gate accepted it, ``None`` when the hedge failed (already traced).
    """
    if outcome is None:
        return None
    completion, backend, latency = outcome
    run.after_draft("frontier", backend.name, backend.model, completion, latency)
    verdict = run.attempts[-1].verdict
    return verdict is None or verdict.passed


def hedge_answer(run: TurnRun, outcome: Any) -> Tier | None:
    """The fast side escalated while the hedge ran: its outcome is the frontier's."""
    run.tried.add("frontier")
    if hedged(run, outcome) is not None:
        return None
    return run.after_error("frontier", run.errors[-1])


def record_loser(run: TurnRun, outcome: Any) -> None:
    """Trace a hedge that answered after the fast side had (its cost counts)."""
    completion, backend, latency = outcome
    run.record_draft("frontier", backend.name, backend.model, completion, latency)


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
