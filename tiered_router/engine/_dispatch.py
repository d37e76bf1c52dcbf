"""The I/O half of a turn: backend calls under breakers and retries, and the trace's exit.

The engine (:mod:`tiered_router.engine._machine`) decides; :class:`Dispatcher` does the calls and
reports every try back to the engine (``run.record_error``), and at the end hands the
turn's trace (once) to its task and to the sinks. It is handed its backends, breakers,
retry schedule, clock, sleep functions and sink; it knows nothing of the router.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from tiered_router.backends._base import CompletionRequest
from tiered_router.engine._capacity import InFlight
from tiered_router.exceptions import (
    BackendError,
    BackendResponseError,
    BackendTimeout,
    BackendUnavailable,
    CapabilityError,
    PolicyError,
)

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.backends._base import Backend
    from tiered_router.engine._machine import RoutedResult, TurnRun
    from tiered_router.engine.resilience import CircuitBreaker, RetrySchedule
    from tiered_router.policy._schema import Policy
    from tiered_router.trace import Trace
    from tiered_router.turn import Turn

__all__ = ["Abandoned", "Call", "Dispatcher", "unexpected_error"]

logger = logging.getLogger("tiered_router.router")

_T = TypeVar("_T")

Call = tuple[_T, "Backend", float]
"""What a dispatched call returns: its value, the backend that answered, and its start."""


class Abandoned(BaseException):  # noqa: N818 (a signal, like GeneratorExit, not an error)
    """A sync call whose answer the turn no longer wants (its panel or hedge was decided).

    Raised inside the call's breaker guard, it records the call as neutral, like a
    cancelled async call.
    """


def unexpected_error(exc: Exception, backend: str) -> BackendError:
    """The typed error for a non-BackendError from a backend (a malformed answer it missed).

    The message names the exception's type only: its text may quote the upstream answer.
    """
    return BackendResponseError(
        f"unexpected {type(exc).__name__} while reading the answer", backend=backend
    )


class Dispatcher:
    """Calls backends for the engine: breaker admission, retries, error translation.

    Args:
        policy: The routing policy (tier -> backend).
        backend: Returns the backend of a name.
        breaker: Returns the circuit breaker of a backend name.
        retries: The retry schedule.
        clock: The router's clock.
        sleep: Sync sleep between retries.
        asleep: Async sleep between retries.
        emit: Where finished traces go (must not raise).
        in_flight: The count of calls in flight per backend (the capacity estimates').
    """

    def __init__(
        self,
        policy: Policy,
        *,
        backend: Callable[[str], Backend],
        breaker: Callable[[str], CircuitBreaker],
        retries: RetrySchedule,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        asleep: Callable[[float], Awaitable[None]],
        emit: Callable[[Trace], None],
        in_flight: InFlight | None = None,
    ) -> None:
        self.in_flight = in_flight or InFlight()
        self.policy = policy
        self.backend = backend
        self.breaker = breaker
        self.clock = clock
        self._retries = retries
        self._sleep = sleep
        self._asleep = asleep
        self._emit = emit

    async def asleep(self, seconds: float) -> None:
        """The router's async sleep (a hedge's delay)."""
        await self._asleep(seconds)

    # -- the end of a turn ----------------------------------------------------------------

    def end(self, run: TurnRun, exc: BaseException | None = None) -> Trace:
        """Conclude ``run`` and emit its trace to its task and the sinks (only the first time).

        Differs from the async twin: that one hands a turn ended by a cancellation to this
        one (an await could be cancelled again, and the trace must still go out).

        Args:
            run: The turn.
            exc: What cut the turn short, if anything (sets the trace's ``interrupted``).
        """
        trace = run.conclude(exc)
        if trace is None:
            return run.trace()
        if run.task is not None:
            try:
                run.task.observe(trace)
            except Exception:  # the task's bookkeeping must not lose the turn
                logger.exception("the task could not take in turn %s", trace.turn_id)
        self._emit(trace)
        return trace

    async def aend(self, run: TurnRun, exc: BaseException | None = None) -> Trace:
        """Async twin of :meth:`end` (a shared task store is awaited).

        When ``exc`` is a cancellation the task is told with the sync twin: an await could be
        cancelled again, and the trace must still be emitted.
        """
        if exc is not None and not isinstance(exc, Exception):
            return self.end(run, exc)
        trace = run.conclude(exc)
        if trace is None:
            return run.trace()
        if run.task is not None:
            try:
                await run.task.aobserve(trace)
            except Exception:
                logger.exception("the task could not take in turn %s", trace.turn_id)
        self._emit(trace)
        return trace

    def finish(self, run: TurnRun) -> RoutedResult:
        """End a turn that ran to its end; return its result or raise its typed error."""
        self.end(run)
        return run.outcome()

    async def afinish(self, run: TurnRun) -> RoutedResult:
        """Async twin of :meth:`finish`."""
        await self.aend(run)
        return run.outcome()

    # -- calls ----------------------------------------------------------------------------

    async def _may_route_around(self, run: TurnRun, tier: Tier) -> bool:
        other = run.route_around(tier)
        if other is None:
            return False
        snapshot = await self.breaker(self.policy.backend_for(other)).asnapshot()
        return snapshot.state != "open"

    def _may_route_around_sync(self, run: TurnRun, tier: Tier) -> bool:
        other = run.route_around(tier)
        if other is None:
            return False
        return self.breaker(self.policy.backend_for(other)).snapshot().state != "open"

    # -- one call under its breaker: admitted, translated ----------------------------------

    async def _aguarded(
        self,
        run: TurnRun,
        tier: Tier,
        backend: Backend,
        request: CompletionRequest,
        once: Callable[[Backend, CompletionRequest], Awaitable[_T]],
        *,
        self_queued: Callable[[], bool] | None = None,
    ) -> _T:
        """One call of ``once`` under ``backend``'s breaker, its foreign errors translated.

        The breaker refuses the call when the turn can go elsewhere (its other tier's breaker
        is not open); else a refused backend is still called: it is the last path.
        ``self_queued()``, asked when the call timed out, says whether it waited behind its
        own turn's calls: then the timeout is neutral for the breaker.
        """
        name = backend.name
        async with self.breaker(name).aguard() as guard:
            if not guard.allowed and await self._may_route_around(run, tier):
                raise BackendUnavailable("circuit breaker is open", backend=name)
            try:
                with _Translated(name):
                    return await once(backend, request)
            except BackendTimeout:
                guard.self_queued = self_queued is not None and self_queued()
                raise

    def _guarded(
        self,
        run: TurnRun,
        tier: Tier,
        backend: Backend,
        request: CompletionRequest,
        once: Callable[[Backend, CompletionRequest], _T],
        watch: _Watch,
        *,
        self_queued: Callable[[], bool] | None = None,
    ) -> _T:
        """Sync twin of :meth:`_aguarded`; a call ``watch`` gives up raises :class:`Abandoned`.

        Differs from the async twin: ``watch`` turns the call's end (its answer or its
        failure) into :class:`Abandoned` inside the guard, so the breaker records it neutral.
        """
        name = backend.name
        with self.breaker(name).guard() as guard:
            if not guard.allowed and self._may_route_around_sync(run, tier):
                raise BackendUnavailable("circuit breaker is open", backend=name)
            try:
                with watch, _Translated(name):
                    return once(backend, request)
            except BackendTimeout:  # (a call given up is Abandoned, not its timeout)
                guard.self_queued = self_queued is not None and self_queued()
                raise

    def _recorded(self, run: TurnRun, tier: Tier, backend: Backend) -> _Recorded:
        """Around one try: gives its start, and records in ``run`` how it failed, once."""
        return _Recorded(run, tier, backend, self.clock)

    # -- a panel's draft: one try -----------------------------------------------------------

    async def aonce(
        self,
        run: TurnRun,
        name: str,
        request: CompletionRequest,
        once: Callable[[Backend, CompletionRequest], Awaitable[_T]],
        *,
        self_queued: Callable[[], bool] | None = None,
    ) -> _T:
        """One try of ``once`` on backend ``name`` under its breaker; records nothing in ``run``.

        A panel's draft: no retries (a failed draft is a missing vote, and the panel's
        deadline is the turn's). The breaker refuses the call when the turn can go elsewhere.
        Each draft counts in the backend's in-flight calls (the queue estimate) while it runs.
        ``self_queued()``, asked when the call timed out, says whether it waited behind its own
        turn's drafts: then the timeout is neutral for the breaker.
        """
        release = self.in_flight.acquire(name)
        try:
            return await self._aguarded(
                run, "fast", self.backend(name), request, once, self_queued=self_queued
            )
        finally:
            release()

    def once(
        self,
        run: TurnRun,
        name: str,
        request: CompletionRequest,
        once: Callable[[Backend, CompletionRequest], _T],
        *,
        abandoned: Callable[[], bool],
        self_queued: Callable[[], bool] | None = None,
    ) -> _T:
        """Sync twin of :meth:`aonce`.

        Differs from the async twin: ``abandoned`` (a panel's draft on a thread). Once it
        says so, the call raises :class:`Abandoned` (see :meth:`call`).
        """
        release = self.in_flight.acquire(name)
        try:
            watch = _Watch(abandoned)
            return self._guarded(
                run, "fast", self.backend(name), request, once, watch, self_queued=self_queued
            )
        finally:
            release()

    # -- a tier's call: the retry loop ------------------------------------------------------

    def request(self, run: TurnRun, name: str, *, turn: Turn | None = None) -> CompletionRequest:
        """The request for backend ``name``, with what is left of the deadline as timeout.

        ``turn`` replaces the turn's own (a panel draft's variant).

        Raises:
            BackendTimeout: The turn's deadline has passed.
        """
        config = run.ports.backend_config(name)
        per_call = config.timeout_s if config is not None else None
        left = run.deadline.remaining(self.clock())
        if left is not None and left <= 0:
            raise BackendTimeout("the turn's deadline has passed", backend=name)
        timeout = per_call if left is None else (left if per_call is None else min(per_call, left))
        return CompletionRequest.from_turn(
            turn or run.turn,
            timeout_s=timeout,
            output_tokens=run.policy.task.expected_output_tokens,
        )

    def _max_retries(self, run: TurnRun, name: str) -> int:
        config = run.ports.backend_config(name)
        return config.max_retries if config is not None else 0

    def _escalation_target(self, run: TurnRun, tier: Tier, name: str) -> Backend:
        """Build ``name``'s backend; a missing key is this tier's own error once a tier failed.

        The turn's first tier without its key raises the ``PolicyError`` (it names the
        variable). A tier the turn moves on to, after the first failed, records the missing
        key as its attempt's error instead (a ``CapabilityError``: no call was made), so the
        turn ends in ``AllTiersFailed`` carrying each tier's own error: a local server's
        "connection refused" is not hidden behind the frontier's missing key.
        """
        try:
            return self.backend(name)
        except PolicyError as exc:
            if not run.attempts or not (exc.field or "").endswith(".api_key"):
                raise
            error = CapabilityError(f"not called: {exc.problems[0][2]}", backend=name)
            run.record_error(tier, name, "", error, 0.0)
            raise error from exc

    async def acall(
        self,
        run: TurnRun,
        tier: Tier,
        once: Callable[[Backend, CompletionRequest], Awaitable[_T]],
    ) -> Call[_T]:
        """Run ``once`` against ``tier``'s backend under its breaker and the retry loop.

        Every failed try is recorded in ``run``; the last error is raised once the retries
        are spent (or the breaker refused the call and the turn can go elsewhere).
        Anything but a ``BackendError`` raised by ``once`` becomes a
        ``BackendResponseError``, so the turn can still move on to the other tier.
        """
        name = self.policy.backend_for(tier)
        backend = self._escalation_target(run, tier, name)
        loop = self._retries.aretrying(
            max_retries=self._max_retries(run, name), deadline=run.deadline, sleep=self._asleep
        )
        async for attempt in loop:
            with attempt, self._recorded(run, tier, backend) as started:
                request = self.request(run, name)
                run.hold(name, self.in_flight.acquire)
                return await self._aguarded(run, tier, backend, request, once), backend, started
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def call(
        self,
        run: TurnRun,
        tier: Tier,
        once: Callable[[Backend, CompletionRequest], _T],
        *,
        abandoned: Callable[[], bool] | None = None,
    ) -> Call[_T]:
        """Sync twin of :meth:`acall`.

        Differs from the async twin: ``abandoned`` (a hedge or the fast side of a race, on a
        thread). Once it says so, the call is no longer wanted and the turn has traced it as
        cancelled. The call then raises :class:`Abandoned`: no retry starts, no in-flight
        count is taken or kept, and neither its answer nor its failure reaches the breaker
        (neutral, as a cancelled async call).
        """
        name = self.policy.backend_for(tier)
        backend = self._escalation_target(run, tier, name)
        loop = self._retries.retrying(
            max_retries=self._max_retries(run, name), deadline=run.deadline, sleep=self._sleep
        )
        watch = _Watch(abandoned) if abandoned is not None else _WANTED
        for attempt in loop:
            with attempt:
                watch.check()
                with self._recorded(run, tier, backend) as started:
                    request = self.request(run, name)
                    run.hold(name, self.in_flight.acquire)
                    watch.check()  # decided while the hold was taken: it is given back
                    return self._guarded(run, tier, backend, request, once, watch), backend, started
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


class _Translated:
    """Around a backend's call: anything but a ``BackendError`` becomes its typed error.

    A class, not a generator-based context manager: it wraps every call (cheaper by a few
    microseconds).
    """

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, BackendError):
            raise unexpected_error(exc, self._name) from exc


class _Recorded:
    """Around one try: its start on entry, and how it failed recorded in the turn, once.

    A ``BackendError`` is the try's error; anything else that cuts it short (a
    cancellation, an abandoned stream, an error that is no backend's) is recorded as cut;
    :class:`Abandoned` records nothing (the turn traced the call as cancelled) and gives
    back the in-flight count.
    """

    __slots__ = ("_backend", "_clock", "_run", "_tier", "started")

    def __init__(
        self, run: TurnRun, tier: Tier, backend: Backend, clock: Callable[[], float]
    ) -> None:
        self._run, self._tier, self._backend, self._clock = run, tier, backend, clock
        self.started = 0.0

    def __enter__(self) -> float:
        self.started = self._clock()
        return self.started

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        run, tier, backend = self._run, self._tier, self._backend
        if isinstance(exc, Abandoned):
            run.release_hold(backend.name)
        elif isinstance(exc, BackendError):
            latency = self._clock() - self.started
            run.record_error(tier, backend.name, backend.model, exc, latency)
        else:
            run.record_cut(tier, backend.name, backend.model, exc, self._clock() - self.started)


class _Watch:
    """Whether a sync call is still wanted: every place it may be given up is here.

    A call is given up (:class:`Abandoned`) before it starts, once its in-flight count is
    taken, when it fails and when it answers, as soon as ``gone()`` says its turn was
    decided without it.
    """

    __slots__ = ("_gone",)

    def __init__(self, gone: Callable[[], bool] | None) -> None:
        self._gone = gone

    def check(self) -> None:
        """Raise :class:`Abandoned` when the call is no longer wanted."""
        if self._gone is not None and self._gone():
            raise Abandoned

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """The call's end, answer or failure, becomes :class:`Abandoned` once it is unwanted."""
        if exc is None:
            self.check()
        elif isinstance(exc, Exception) and self._gone is not None and self._gone():
            raise Abandoned from exc


_WANTED = _Watch(None)
"""The watch of a call nothing gives up (a sync turn's own calls)."""
