"""Retries, the per-turn deadline and the per-backend circuit breaker.

The router owns the only retry loop (backends are built with the SDK's ``max_retries=0``).
Sync retries use tenacity, async ones the router's own loop (the same decisions, through
the same :meth:`RetrySchedule.backoff` and :meth:`RetrySchedule.give_up`): retryable
errors (connection errors, 408, 409, 429, 5xx but 508, broken bodies) are retried up to the
backend's ``max_retries``, waiting ``min(base_s * 2**n, max_s) * jitter`` with jitter in
[0.75, 1.0], or the server's ``Retry-After`` when it sent one. A ``Retry-After`` longer
than ``retry_after_cap_s``, or a wait that would cross the turn's deadline, stops the
retries so the router can escalate instead of waiting.

Time and randomness are injected: the clock, the sleep functions and the jitter source.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiered_router.exceptions import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    CapabilityError,
    StreamInterrupted,
)
from tiered_router.state import Admission, BreakerSnapshot, BreakerState, Outcome, StateStore

if TYPE_CHECKING:
    import tenacity

    from tiered_router.policy._schema import BreakerConfig, RetryConfig

__all__ = ["BreakerPass", "CircuitBreaker", "Deadline", "RetrySchedule", "breaker_outcome"]


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point in time (on the router's clock) by which a turn must be done.

    Attributes:
        at: Clock value of the deadline; ``None`` means no deadline.
    """

    at: float | None

    def remaining(self, now: float) -> float | None:
        """Seconds left at ``now`` (may be negative), or ``None`` without a deadline."""
        return None if self.at is None else self.at - now

    def expired(self, now: float) -> bool:
        """Whether the deadline has passed."""
        return self.at is not None and now >= self.at


class RetrySchedule:
    """Builds the tenacity retry loop for one backend call.

    Args:
        config: Backoff settings from the policy.
        clock: The router's clock (seconds, monotonic).
        rng: Source of jitter; inject a seeded ``random.Random`` for repeatable runs.
    """

    def __init__(
        self,
        config: RetryConfig,
        *,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._rng = rng or random.Random()

    def backoff(self, retry_number: int, exc: BaseException | None) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based) after ``exc``."""
        asked: float | None = getattr(exc, "retry_after_s", None)
        if asked is not None:
            return max(0.0, float(asked))
        base = min(self.config.base_s * 2.0 ** (retry_number - 1), self.config.max_s)
        return base * self._rng.uniform(0.75, 1.0)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.backoff(state.attempt_number, exc)

    def give_up(
        self,
        exc: BaseException | None,
        *,
        tries: int,
        upcoming_s: float,
        max_retries: int,
        deadline: Deadline,
    ) -> bool:
        """Whether to stop retrying after ``tries`` tries ended with ``exc``.

        Stops when the error is not retryable, the retries are used up, the server asked
        for a wait longer than ``retry_after_cap_s``, or the wait would cross the deadline.
        """
        if exc is not None and not _is_retryable(exc):
            return True
        if tries > max_retries:
            return True
        asked = getattr(exc, "retry_after_s", None)
        if asked is not None and asked > self.config.retry_after_cap_s:
            return True  # a long Retry-After: escalate rather than wait
        left = deadline.remaining(self._clock())
        return left is not None and upcoming_s >= left

    def _stopper(self, max_retries: int, deadline: Deadline) -> Callable[..., bool]:
        def stop(state: tenacity.RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            return self.give_up(
                exc,
                tries=state.attempt_number,
                upcoming_s=state.upcoming_sleep,
                max_retries=max_retries,
                deadline=deadline,
            )

        return stop

    def retrying(
        self, *, max_retries: int, deadline: Deadline, sleep: Callable[[float], None]
    ) -> tenacity.Retrying:
        """Return a sync retry loop (``for attempt in loop: with attempt: ...``)."""
        import tenacity  # with asyncio under it: off the import path of the package

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(_is_retryable),
            wait=self._wait,
            stop=self._stopper(max_retries, deadline),
            sleep=sleep,
            reraise=True,
        )

    def aretrying(
        self,
        *,
        max_retries: int,
        deadline: Deadline,
        sleep: Callable[[float], Awaitable[None]],
    ) -> _AsyncRetryLoop:
        """Return an async retry loop (``async for attempt in loop: with attempt: ...``)."""
        return _AsyncRetryLoop(self, max_retries=max_retries, deadline=deadline, sleep=sleep)


class _Attempt:
    """One try of an :class:`_AsyncRetryLoop`: keeps the exception it ended with."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        self.error = exc
        return True  # the loop decides: retry, or raise it again


class _AsyncRetryLoop:
    """The async retry loop: the decisions of the sync path's tenacity loop, without it.

    The same order as ``tenacity.AsyncRetrying(retry=retry_if_exception(retryable),
    wait=backoff, stop=give_up, reraise=True)``: an answer ends the loop; an error that is
    not retryable is raised again; otherwise the wait is worked out, :meth:`RetrySchedule.
    give_up` may stop the loop (the error is raised again), else the loop sleeps and tries
    again. Measured at about 26 us a call for tenacity's loop, most of it machinery a call
    that succeeds first time never uses (docs/proxy.md, "The proxy's own share").
    """

    __slots__ = ("_attempt", "_deadline", "_max_retries", "_schedule", "_sleep", "_tries")

    def __init__(
        self,
        schedule: RetrySchedule,
        *,
        max_retries: int,
        deadline: Deadline,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._schedule = schedule
        self._max_retries = max_retries
        self._deadline = deadline
        self._sleep = sleep
        self._tries = 0
        self._attempt: _Attempt | None = None

    def __aiter__(self) -> _AsyncRetryLoop:
        return self

    async def __anext__(self) -> _Attempt:
        attempt = self._attempt
        if attempt is not None:
            exc = attempt.error
            if exc is None:
                raise StopAsyncIteration
            if not _is_retryable(exc):
                raise exc
            schedule = self._schedule
            wait = schedule.backoff(self._tries, exc)
            if schedule.give_up(
                exc,
                tries=self._tries,
                upcoming_s=wait,
                max_retries=self._max_retries,
                deadline=self._deadline,
            ):
                raise exc
            await self._sleep(wait)
        self._tries += 1
        self._attempt = _Attempt()
        return self._attempt


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, BackendError) and exc.retryable


def breaker_outcome(exc: BaseException | None, *, progressed: bool = False) -> Outcome:
    """What a call's end says about its backend, for its circuit breaker.

    Args:
        exc: The exception the call ended with, ``None`` for a normal return.
        progressed: Whether the backend had already answered (a stream sent content).

    Returns:
        ``success`` for an answer; ``failure`` for timeouts, connection errors, 401, 403, 408,
        429, 5xx, unreadable answers and any unexpected exception; ``neutral`` for a 4xx the
        request caused (400, 404, 413, 422...), a 508 (a proxy upstream refused the route as a
        loop: a chain of proxies, or a client's forged hop header), an open breaker, a missing
        capability, and a cancelled or abandoned call (``success`` when the backend had
        already answered).
    """
    if exc is None:
        return "success"
    if isinstance(exc, StreamInterrupted):
        return breaker_outcome(exc.__cause__, progressed=progressed)
    if not isinstance(exc, Exception):  # cancelled, abandoned (GeneratorExit), interrupted
        return "success" if progressed else "neutral"
    if isinstance(exc, (BackendUnavailable, CapabilityError)):
        return "neutral"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in _BACKEND_4XX:
        return "neutral"
    if status == _LOOP_DETECTED:
        return "neutral"
    return "failure"


_LOOP_DETECTED = 508
"""A proxy refused the request's route as a loop: the route's fault, not the backend's."""


_BACKEND_4XX = frozenset({401, 403, 408, 429})
"""4xx answers that say the backend (its key, its load), not the request, is at fault."""


class CircuitBreaker:
    """The circuit breaker of one backend; its state lives in the router's state store.

    It opens after ``consecutive_failures`` failed calls in a row, or when over the last
    ``window_s`` seconds at least ``min_calls`` calls were made and more than
    ``failure_ratio`` of them failed (see :func:`breaker_outcome` for what counts). After
    ``cooldown_s`` it is half-open: one trial call may go through; success closes it, failure
    opens it again. The trial is released on every exit path: :meth:`guard` /
    :meth:`aguard` record the call's outcome however it ends (a cancelled trial is released
    without a verdict), and a trial out longer than ``trial_lease_s`` is given up.

    Args:
        name: The backend's name.
        store: Where the breaker's state lives.
        config: Breaker settings from the policy.
        clock: The router's clock.
    """

    def __init__(
        self, name: str, store: StateStore, config: BreakerConfig, *, clock: Callable[[], float]
    ) -> None:
        self.name = name
        self.config = config
        self._store = store
        self._clock = clock

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, state={self.state!r})"

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open``."""
        return self.snapshot().state

    def snapshot(self) -> BreakerSnapshot:
        """The breaker's state and counts (reserves nothing)."""
        if not self.config.enabled:
            return BreakerSnapshot(state="closed")
        return self._store.breaker_snapshot(self.name, now=self._clock(), config=self.config)

    async def asnapshot(self) -> BreakerSnapshot:
        """Async twin of :meth:`snapshot`."""
        if not self.config.enabled:
            return BreakerSnapshot(state="closed")
        return await self._store.abreaker_snapshot(self.name, now=self._clock(), config=self.config)

    def allow(self) -> Admission:
        """Admit a call or refuse it; a half-open trial comes with a token to record."""
        if not self.config.enabled:
            return _ADMITTED
        return self._store.breaker_allow(self.name, now=self._clock(), config=self.config)

    async def aallow(self) -> Admission:
        """Async twin of :meth:`allow`."""
        if not self.config.enabled:
            return _ADMITTED
        return await self._store.abreaker_allow(self.name, now=self._clock(), config=self.config)

    def record(self, outcome: Outcome, *, token: str | None = None) -> BreakerState:
        """Record an admitted call's outcome (pass the admission's token back)."""
        if not self.config.enabled:
            return "closed"
        return self._store.breaker_record(
            self.name, outcome, now=self._clock(), config=self.config, token=token
        )

    async def arecord(self, outcome: Outcome, *, token: str | None = None) -> BreakerState:
        """Async twin of :meth:`record`."""
        if not self.config.enabled:
            return "closed"
        return await self._store.abreaker_record(
            self.name, outcome, now=self._clock(), config=self.config, token=token
        )

    def guard(self) -> BreakerPass:
        """A context manager around one call: admits it on entry, records it on every exit."""
        return BreakerPass(self)

    def aguard(self) -> BreakerPass:
        """Async twin of :meth:`guard` (use it with ``async with``)."""
        return BreakerPass(self)


_ADMITTED = Admission(allowed=True, state="closed")


class BreakerPass:
    """One call under a breaker: ``with breaker.guard() as call:`` (or ``async with``).

    On entry the breaker admits or refuses the call (:attr:`admission`; the caller may still
    call a refused backend when it is the last path). On exit, whatever the way out, the
    outcome is recorded (:func:`breaker_outcome` of the exception), which releases a
    half-open trial. Set :attr:`progressed` once the backend has answered (a stream's first
    content), so that a caller abandoning the call later counts as a success.
    """

    __slots__ = ("_breaker", "admission", "outcome", "progressed", "self_queued")

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker
        self.admission: Admission = _ADMITTED
        self.progressed = False
        self.self_queued = False
        """Set when the call timed out waiting behind its own turn's calls (a panel's drafts
        on a backend with fewer slots): that says nothing of the backend (neutral)."""
        self.outcome: Outcome | None = None

    def _outcome(self, exc: BaseException | None) -> Outcome:
        outcome = breaker_outcome(exc, progressed=self.progressed)
        if outcome == "failure" and self.self_queued and isinstance(exc, BackendTimeout):
            return "neutral"
        return outcome

    @property
    def allowed(self) -> bool:
        """Whether the breaker admitted the call."""
        return self.admission.allowed

    def __enter__(self) -> BreakerPass:
        self.admission = self._breaker.allow()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Record the call's outcome (a refused call records nothing).

        Differs from the async twin: that one records a cancelled call with this sync
        record (an await could be cancelled again); this one has one way out.
        """
        self.outcome = self._outcome(exc)
        if self.admission.allowed:
            self._breaker.record(self.outcome, token=self.admission.token)

    async def __aenter__(self) -> BreakerPass:
        self.admission = await self._breaker.aallow()
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.outcome = self._outcome(exc)
        if not self.admission.allowed:
            return
        if exc is not None and not isinstance(exc, Exception):
            # cancelled: an await here could be cancelled again (anyio cancels every await
            # in a cancelled scope), so the sync twin releases the trial, which cannot be
            self._breaker.record(self.outcome, token=self.admission.token)
            return
        await self._breaker.arecord(self.outcome, token=self.admission.token)
