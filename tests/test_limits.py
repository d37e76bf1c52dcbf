"""The proxy's per-key limits counted in-process (no shared store, or while it is down)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("starlette")

from tiered_router.policy import ClientLimits  # noqa: E402
from tiered_router.server._limits import ClientLimiter, client_id  # noqa: E402


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class BrokenStore:
    async def alimit_admit(self, client: str, **kw: object) -> tuple[bool, str, float]:
        raise ConnectionError("redis is down")

    async def alimit_spend(self, client: str, usd: float) -> None:
        raise ConnectionError("redis is down")


def test_client_ids_hide_the_key() -> None:
    one = client_id("Bearer sk-secret-1")
    assert one == client_id("Bearer  sk-secret-1 ") and len(one) == 16
    assert "secret" not in one and one != client_id("Bearer sk-secret-2")
    assert client_id(None) == client_id("Bearer ") == "anonymous"


def test_rate_per_calendar_minute_and_spend_per_day_in_process() -> None:
    clock = Clock(120.0)
    limiter = ClientLimiter(
        ClientLimits(requests_per_minute=2, spend_usd_per_day=1.0), object(), clock=clock
    )
    assert limiter.enabled

    async def main() -> None:
        assert await limiter.admit("a") == (True, "", 0.0)
        assert await limiter.admit("a") == (True, "", 0.0)
        clock.now = 150.0
        assert await limiter.admit("a") == (False, "rate", 30.0)
        assert (await limiter.admit("b"))[0]  # another key has its own count
        clock.now = 180.0  # the next minute
        assert (await limiter.admit("a"))[0]
        limiter.spent("a", 0.6)
        limiter.spent("a", 0.0)  # nothing spent: nothing counted
        assert (await limiter.admit("a"))[0]
        limiter.spent("a", 0.5)
        clock.now = 200.0
        allowed, reason, retry = await limiter.admit("a")
        assert (allowed, reason) == (False, "spend") and retry == 86400 - 200
        clock.now = 86400 + 5.0  # a new UTC day
        assert (await limiter.admit("a"))[0]
        await limiter.aclose()

    asyncio.run(main())
    assert limiter.failures == 0


def test_a_failing_store_is_counted_and_answered_here() -> None:
    clock = Clock(0.0)
    limiter = ClientLimiter(
        ClientLimits(requests_per_minute=1, spend_usd_per_day=0.5), BrokenStore(), clock=clock
    )

    async def main() -> None:
        assert (await limiter.admit("a"))[0]
        assert (await limiter.admit("a"))[1] == "rate"
        limiter.spent("a", 1.0)
        await limiter.aclose()
        clock.now = 61.0
        assert (await limiter.admit("a"))[1] == "spend"

    asyncio.run(main())
    assert limiter.failures == 4


def test_no_limits_means_disabled() -> None:
    assert not ClientLimiter(ClientLimits(), None).enabled
