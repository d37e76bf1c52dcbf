"""Retries, the per-turn deadline and the per-backend circuit breaker.

The router owns the only retry loop (backends are built with the SDK's ``max_retries=0``).
Retries use tenacity: retryable errors (connection errors, 408, 409, 429, 5xx, broken
bodies) are retried up to the backend's ``max_retries``, waiting
``min(base_s * 2**n, max_s) * jitter`` with jitter in [0.75, 1.0], or the server's
``Retry-After`` when it sent one. A ``Retry-After`` longer than ``retry_after_cap_s``, or a
wait that would cross the turn's deadline, stops the retries so the router can escalate
instead of waiting.

Time and randomness are injected: the clock, the sleep functions and the jitter source.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import tenacity

from tiered_router.exceptions import BackendError
from tiered_router.policy import BreakerConfig, RetryConfig

__all__ = ["CircuitBreaker", "Deadline", "RetrySchedule"]

BreakerState = Literal["closed", "open", "half_open"]


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
    ) -> tenacity.AsyncRetrying:
        """Return an async retry loop (``async for attempt in loop: with attempt: ...``)."""
        return tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_is_retryable),
            wait=self._wait,
            stop=self._stopper(max_retries, deadline),
            sleep=sleep,
            reraise=True,
        )


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, BackendError) and exc.retryable


class CircuitBreaker:
    """Opens a backend after repeated failures, and lets one trial call through later.

    The breaker opens when, over the last ``window_s`` seconds, at least ``min_calls`` calls
    were made and more than ``failure_ratio`` of them failed. After ``cooldown_s`` it is
    half-open: one call may go through; success closes it, failure opens it again.
    The router routes around an open backend but never cuts off the last usable path.

    Args:
        config: Breaker settings from the policy.
        clock: The router's clock.
    """

    def __init__(self, config: BreakerConfig, *, clock: Callable[[], float]) -> None:
        self.config = config
        self._clock = clock
        self._events: deque[tuple[float, bool]] = deque()
        self._failures = 0  # failures among _events, kept as calls come and go
        self._opened_at: float | None = None
        self._trial_in_flight = False
        self._lock = threading.Lock()

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open``."""
        with self._lock:
            return self._state(self._clock())

    def _state(self, now: float) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if now - self._opened_at >= self.config.cooldown_s:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether a call may go to the backend now (reserves the half-open trial)."""
        if not self.config.enabled:
            return True
        with self._lock:
            state = self._state(self._clock())
            if state == "closed":
                return True
            if state == "half_open" and not self._trial_in_flight:
                self._trial_in_flight = True
                return True
            return False

    def record(self, ok: bool) -> None:
        """Record the outcome of one call."""
        if not self.config.enabled:
            return
        with self._lock:
            now = self._clock()
            if self._opened_at is not None:
                self._trial_in_flight = False
                if ok and self._state(now) == "half_open":
                    self._opened_at = None
                    self._events.clear()
                    self._failures = 0
                elif not ok:
                    self._opened_at = now
                return
            self._events.append((now, ok))
            self._failures += not ok
            horizon = now - self.config.window_s
            while self._events and self._events[0][0] < horizon:
                self._failures -= not self._events.popleft()[1]
            calls = len(self._events)
            ratio = self._failures / calls
            if calls >= self.config.min_calls and ratio > self.config.failure_ratio:
                self._opened_at = now

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r})"
