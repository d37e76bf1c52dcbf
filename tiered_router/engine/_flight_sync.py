"""Sync twin of :mod:`tiered_router.engine._flight`: a turn's attempts in flight on threads.

Each attempt in flight (a panel's draft, the fast side, the hedge) runs on a thread of a
pool made for the turn; the calling thread waits for them and reports to the machine as
the async driver does. A sync HTTP call cannot be interrupted: a call the turn no longer
wants is traced as cancelled at once, and its thread is left to end on its own (its
answer is dropped and its breaker records it as neutral: :class:`~tiered_router.engine.
_dispatch.Abandoned`), within the call's timeout; it starts no retry and keeps no in-flight
count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from tiered_router.engine._dispatch import Abandoned
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

__all__ = ["SyncFlight"]


class SyncFlight:
    """Runs a turn's concurrent attempts for the engine on threads (sync twin of ``Flight``).

    Args:
        dispatch: The calls, breakers and retries.
        complete: One whole-completion call of a backend.
    """

    def __init__(
        self, dispatch: Dispatcher, *, complete: Callable[[Backend, CompletionRequest], Completion]
    ) -> None:
        self._dispatch = dispatch
        self._complete = complete

    def run(self, run: TurnRun, plan: FlightPlan) -> Tier | None:
        """Run the fast side (and the hedge) of ``run``; return the next tier, if any."""
        panel, hedge_s = plan
        workers = (panel.k if panel is not None else 1) + (1 if hedge_s is not None else 0) + 1
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tiered-router-flight")
        stop = threading.Event()  # set: the calls in flight are no longer wanted
        lock = threading.Lock()  # the machine is told one thing at a time
        try:
            if hedge_s is None:
                return self._fast(run, panel, pool, stop, lock)
            return self._race(run, panel, hedge_s, pool, stop, lock)
        finally:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            run.hedge_over()

    def _race(
        self,
        run: TurnRun,
        panel: PanelPlan | None,
        hedge_s: float,
        pool: ThreadPoolExecutor,
        stop: threading.Event,
        lock: threading.Lock,
    ) -> Tier | None:
        fast_stop, hedge_stop = threading.Event(), threading.Event()
        try:
            return self._race_on(run, panel, hedge_s, pool, lock, fast_stop, hedge_stop)
        finally:  # however the race ended, a call still running is no longer wanted
            fast_stop.set()
            hedge_stop.set()

    def _race_on(
        self,
        run: TurnRun,
        panel: PanelPlan | None,
        hedge_s: float,
        pool: ThreadPoolExecutor,
        lock: threading.Lock,
        fast_stop: threading.Event,
        hedge_stop: threading.Event,
    ) -> Tier | None:
        """Wait and cancel as :func:`~tiered_router.engine._flight_plan.race_action` says."""
        fast_begun = self._dispatch.clock()
        fast = pool.submit(self._fast, run, panel, pool, fast_stop, lock)
        done, _ = wait({fast}, timeout=hedge_s) if hedge_s > 0 else (set(), None)
        if fast in done:  # decided before the hedge was due: it never starts
            return fast.result()
        begun = self._dispatch.clock()
        with lock:
            run.hedge_started()
        hedge = pool.submit(self._hedge, run, hedge_stop)
        wait({fast, hedge}, return_when=FIRST_COMPLETED)
        seen: HedgeState | None = None  # the hedge's answer, once the machine has it
        if not fast.done():  # the hedge ended first
            action, seen = self._hedge_first(run, hedge, lock, fast_stop, fast_begun, panel)
            if action is RaceAction.HEDGE_WINS:
                if panel is not None:
                    fast.result()  # the panel traces what it had, within one poll
                return None
        nxt = fast.result()
        with lock:
            action = race_action(seen or _state(hedge), fast_done=True, fast_next=nxt)
            if action is RaceAction.CANCEL_HEDGE:
                hedge_stop.set()
                self._cancelled(run, "frontier", begun)
            elif action is RaceAction.RECORD_LATE_HEDGE:
                record_loser(run, hedge.result())
        if action is RaceAction.TAKE_HEDGE:
            run.hedge_took_over()
            return None
        if action is RaceAction.AWAIT_HEDGE:
            return hedge_answer(run, hedge.result())
        return nxt

    def _hedge_first(
        self,
        run: TurnRun,
        hedge: Future[Any],
        lock: threading.Lock,
        fast_stop: threading.Event,
        fast_begun: float,
        panel: PanelPlan | None,
    ) -> tuple[RaceAction, HedgeState | None]:
        """The hedge ended while the fast side runs: tell the machine, stop a beaten fast side.

        Returns the race's action and what the machine made of the hedge's answer.
        """
        with lock:
            seen: HedgeState | None = None
            action = race_action(_state(hedge), fast_done=False)
            if action is RaceAction.RECORD_HEDGE:
                seen = hedged(run, hedge.result())
                action = race_action(seen, fast_done=False)
            if action is RaceAction.HEDGE_WINS:
                fast_stop.set()
                run.hedge_won()
                if panel is None:  # the single call cannot be interrupted: traced now
                    self._cancelled(run, "fast", fast_begun)
        return action, seen

    def _cancelled(self, run: TurnRun, tier: Tier, begun: float) -> None:
        backend = self._dispatch.backend(run.policy.backend_for(tier))
        latency = self._dispatch.clock() - begun
        run.add_attempt(tier, backend.name, backend.model, latency, cancelled=True)

    def _hedge(self, run: TurnRun, stop: threading.Event) -> Any:
        try:
            completion, backend, begun = self._dispatch.call(
                run, "frontier", self._complete, abandoned=stop.is_set
            )
        except (BackendError, Abandoned):
            return None
        if stop.is_set():
            return None
        return completion, backend, self._dispatch.clock() - begun

    # -- the fast side ---------------------------------------------------------------------

    def _fast(
        self,
        run: TurnRun,
        plan: PanelPlan | None,
        pool: ThreadPoolExecutor,
        stop: threading.Event,
        lock: threading.Lock,
    ) -> Tier | None:
        if plan is not None:
            return self._panel(run, plan, pool, stop, lock)
        try:
            completion, backend, begun = self._dispatch.call(
                run, "fast", self._complete, abandoned=stop.is_set
            )
        except Abandoned:
            return None  # the hedge answered first; the call is traced as cancelled
        except BackendError as exc:
            with lock:
                return None if stop.is_set() else run.after_error("fast", exc)
        latency = self._dispatch.clock() - begun
        with lock:
            if stop.is_set():  # the hedge answered first: the call is traced as cancelled
                return None
            return run.after_draft("fast", backend.name, backend.model, completion, latency)

    def _panel(
        self,
        run: TurnRun,
        plan: PanelPlan,
        pool: ThreadPoolExecutor,
        stop: threading.Event,
        lock: threading.Lock,
    ) -> Tier | None:
        panel = Panel(plan, run.turn)
        clock = self._dispatch.clock
        begun = clock()
        drop = threading.Event()
        queue = OwnQueue(run, plan)
        futures: dict[Future[Any], tuple[DraftSpec, ...]] = {
            pool.submit(self._draft, run, specs, plan, drop, queue): specs for specs in calls(plan)
        }
        pending = set(futures)
        while pending and not panel.decided() and not stop.is_set():
            done, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: futures[f][0].index):
                value, model, latency = future.result()
                if value is not None:
                    panel.take(futures[future], value, model, latency)
        drop.set()
        # a draft that answered after the last look (but before the drop) is an answer with
        # a cost, not a cut draft, as on the async path
        pending = take_late(panel, futures, pending)
        cut = cut_drafts(self._dispatch, [futures[f] for f in pending], clock() - begun)
        with lock:
            if stop.is_set():
                panel.abandon(run, cut)
                return None
            return panel.settle(run, cut)

    def _draft(
        self,
        run: TurnRun,
        specs: tuple[DraftSpec, ...],
        plan: PanelPlan,
        drop: threading.Event,
        queue: OwnQueue,
    ) -> tuple[Any, str, float]:
        clock = self._dispatch.clock
        spec = specs[0]
        backend = self._dispatch.backend(spec.backend)
        begun = clock()
        try:
            request = self._dispatch.request(run, spec.backend, turn=panel_turn(run, specs, plan))
            value: Any = self._dispatch.once(
                run,
                spec.backend,
                request,
                self._complete,
                abandoned=drop.is_set,
                self_queued=lambda: queue.absorbs(spec.backend),
            )
        except BackendError as exc:
            value = exc
        except Abandoned:
            value = None
        return value, backend.model, clock() - begun


def _state(hedge: Future[Any]) -> HedgeState:
    done = hedge.done()
    return hedge_state(started=True, done=done, outcome=hedge.result() if done else None)
