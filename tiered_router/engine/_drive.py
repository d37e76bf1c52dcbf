"""Driving one turn to its end: the engine's loop, with the fast side in flight when planned.

The machine (:mod:`tiered_router.engine._machine`) says which tier comes next; the driver
calls it through the :class:`~tiered_router.engine._dispatch.Dispatcher` and reports back,
one attempt at a time. When the policy has ``drafts:`` or ``hedge:`` and the turn starts on
the fast tier, the fast side runs first as a flight (:mod:`tiered_router.engine._flight`:
a panel's drafts and a hedged frontier call at once), and the loop goes on from what the
flight leaves. Without those sections the loop is the same as ever: one check of two
policy fields is all they cost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from tiered_router.exceptions import BackendError

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.backends._base import Backend, CompletionRequest
    from tiered_router.engine._dispatch import Dispatcher
    from tiered_router.engine._flight import Flight
    from tiered_router.engine._flight_plan import FlightPlan
    from tiered_router.engine._flight_sync import SyncFlight
    from tiered_router.engine._hedge import Percentile
    from tiered_router.engine._machine import RoutedResult, TurnRun
    from tiered_router.turn import Completion

__all__ = ["AfterTurn", "Driver"]


class AfterTurn(Protocol):
    """What sees a turn that ended well before its result is kept: the quality monitor.

    The router calls it after ``complete`` / ``acomplete``; a routed stream calls it through
    its driver (:attr:`Driver.monitor`) when the stream ends.
    """

    def shadow(self, run: TurnRun, result: RoutedResult) -> RoutedResult:
        """Sync path: the result, marked ``shadowed`` when a shadow call was started."""
        ...

    def ashadow(self, run: TurnRun, result: RoutedResult) -> RoutedResult:
        """Async path (the shadow call is an asyncio task)."""
        ...


class Driver:
    """Runs turns to their end (async and sync), for the router and its shadow runs.

    Args:
        dispatch: The calls, breakers, retries and the trace's exit.
        percentile: A backend's measured latency percentile (for ``hedge.after_percentile``).
        acomplete: One async whole-completion call of a backend.
        complete: Its sync twin.
    """

    def __init__(
        self,
        dispatch: Dispatcher,
        *,
        percentile: Percentile,
        acomplete: Callable[[Backend, CompletionRequest], Awaitable[Completion]],
        complete: Callable[[Backend, CompletionRequest], Completion],
    ) -> None:
        self._dispatch = dispatch
        self._percentile = percentile
        self._acomplete = acomplete
        self._complete = complete
        self._flight: Flight | None = None
        self._sync_flight: SyncFlight | None = None
        self.monitor: AfterTurn | None = None
        """The quality monitor, when the policy has one (the router sets it)."""

    def plan(self, run: TurnRun) -> FlightPlan | None:
        """The turn's fast side in flight (a panel, a hedge), ``None`` for the usual loop."""
        policy = run.policy
        if policy.drafts is None and policy.hedge is None:
            return None
        # imported on first use: `from tiered_router import Router` stays without asyncio
        from tiered_router.engine._flight_plan import plan_flight

        return plan_flight(run, percentile=self._percentile)

    @property
    def flight(self) -> Flight:
        """The async driver of a turn's attempts in flight."""
        if self._flight is None:
            from tiered_router.engine._flight import Flight

            self._flight = Flight(self._dispatch, complete=self._acomplete)
        return self._flight

    @property
    def sync_flight(self) -> SyncFlight:
        """Its sync twin (threads)."""
        if self._sync_flight is None:
            from tiered_router.engine._flight_sync import SyncFlight

            self._sync_flight = SyncFlight(self._dispatch, complete=self._complete)
        return self._sync_flight

    async def adrive(self, run: TurnRun) -> None:
        """Run the engine to the end of the turn (the trace is emitted on any other exit)."""
        dispatch = self._dispatch
        try:
            nxt: Tier | None = run.first_tier()
            flight = self.plan(run)
            if flight is not None:  # a panel or a hedge: the fast side's attempts at once
                nxt = await self.flight.arun(run, flight)
            while nxt is not None:
                serving = nxt
                try:
                    completion, backend, started = await dispatch.acall(
                        run, serving, self._acomplete
                    )
                except BackendError as exc:
                    nxt = run.after_error(serving, exc)
                    continue
                nxt = run.after_draft(
                    serving, backend.name, backend.model, completion, dispatch.clock() - started
                )
        except BaseException as exc:  # cancelled, or a bug: the trace is emitted all the same
            await dispatch.aend(run, exc)
            raise

    def drive(self, run: TurnRun) -> None:
        """Sync twin of :meth:`adrive`."""
        dispatch = self._dispatch
        try:
            nxt: Tier | None = run.first_tier()
            flight = self.plan(run)
            if flight is not None:
                nxt = self.sync_flight.run(run, flight)
            while nxt is not None:
                serving = nxt
                try:
                    completion, backend, started = dispatch.call(run, serving, self._complete)
                except BackendError as exc:
                    nxt = run.after_error(serving, exc)
                    continue
                nxt = run.after_draft(
                    serving, backend.name, backend.model, completion, dispatch.clock() - started
                )
        except BaseException as exc:
            dispatch.end(run, exc)
            raise
