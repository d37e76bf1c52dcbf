"""The async retry loop decides as the sync path's tenacity loop does, try by try.

``RetrySchedule.aretrying`` is the router's own loop, ``retrying`` is
tenacity's: the same sequence of outcomes must give the same tries, the same waits (the
jitter source seeded alike) and the same error raised at the end, or the same answer.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tiered_router.engine.resilience import Deadline, RetrySchedule
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendRateLimited,
    BackendStatusError,
    BackendTimeout,
)
from tiered_router.policy._ops import RetryConfig

OK = None
CASES = {
    "answer": [OK],
    "timeout then answer": [BackendTimeout("t"), OK],
    "retries used up": [BackendTimeout("t"), BackendConnectionError("c"), BackendTimeout("t")],
    "not retryable": [BackendStatusError("bad", status_code=400), OK],
    "500, 429 with retry-after, answer": [
        BackendStatusError("boom", status_code=500),
        BackendRateLimited("slow", retry_after_s=1.5),
        OK,
    ],
    "retry-after over the cap": [BackendRateLimited("slow", retry_after_s=600), OK],
    "cancelled": [asyncio.CancelledError(), OK],
}


def _schedule() -> RetrySchedule:
    return RetrySchedule(RetryConfig(), clock=lambda: 0.0, rng=random.Random(7))


def _sync(outcomes: list[BaseException | None], deadline: Deadline) -> tuple[int, list, object]:
    slept: list[float] = []
    tries = 0
    loop = _schedule().retrying(max_retries=2, deadline=deadline, sleep=slept.append)
    try:
        for attempt in loop:
            with attempt:
                tries += 1
                outcome = outcomes[tries - 1]
                if outcome is not None:
                    raise outcome
        return tries, slept, "answered"
    except BaseException as exc:
        return tries, slept, exc


def _async(outcomes: list[BaseException | None], deadline: Deadline) -> tuple[int, list, object]:
    slept: list[float] = []
    tries = 0

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def run() -> object:
        nonlocal tries
        loop = _schedule().aretrying(max_retries=2, deadline=deadline, sleep=sleep)
        async for attempt in loop:
            with attempt:
                tries += 1
                outcome = outcomes[tries - 1]
                if outcome is not None:
                    raise outcome
        return "answered"

    async def guarded() -> object:
        try:
            return await run()
        except BaseException as exc:  # the cancellation too: it is the outcome here
            return exc

    end = asyncio.run(guarded())
    return tries, slept, end


@pytest.mark.parametrize("outcomes", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("deadline_at", [None, 1.0], ids=["no deadline", "deadline 1 s"])
def test_the_async_loop_decides_as_tenacitys_sync_loop(
    outcomes: list[BaseException | None], deadline_at: float | None
) -> None:
    deadline = Deadline(deadline_at)
    assert _async(outcomes, deadline) == _sync(outcomes, deadline)


def test_the_cases_cover_each_way_out() -> None:
    ends = {_async(o, Deadline(None))[2] for o in CASES.values()}
    assert "answered" in ends
    kinds = {type(e) for e in ends if e != "answered"}
    assert {BackendTimeout, BackendStatusError, BackendRateLimited} <= kinds
    assert asyncio.CancelledError in kinds
