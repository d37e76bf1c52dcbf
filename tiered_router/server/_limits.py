"""Per-client-key limits of the proxy: requests per minute and spend per day.

Clients are told apart by a hash of their API key (the key itself is never stored or
logged). The counts live in the router's state store when it is Redis, so every replica
enforces one limit; otherwise, or while Redis is down, each process counts on its own
(counted as state fallbacks). Windows are calendar minutes and UTC days.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.policy._schema import ClientLimits

__all__ = ["ClientLimiter", "client_id"]

logger = logging.getLogger("tiered_router.server")


@functools.lru_cache(maxsize=1024)
def client_id(authorization: str | None) -> str:
    """A stable, non-secret id for the key in an ``Authorization`` header (cached per key)."""
    token = (authorization or "").partition(" ")[2].strip()
    if not token:
        return "anonymous"
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class ClientLimiter:
    """Admits requests and adds up spend per client, in Redis or in this process.

    Args:
        limits: The policy's ``server.limits``.
        store: The router's state store (its ``alimit_*`` methods are used when it has them).
        clock: Wall clock, seconds (for the in-process windows).

    """

    def __init__(self, limits: ClientLimits, store: Any, *, clock: Any = time.time) -> None:
        self.limits = limits
        self._store = store if hasattr(store, "alimit_admit") else None
        self._clock = clock
        self._rate: dict[tuple[str, int], int] = {}
        self._spend: dict[tuple[str, int], float] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self.failures = 0
        """Operations that Redis failed and this process answered."""

    @property
    def enabled(self) -> bool:
        """Whether any limit is set."""
        return (
            self.limits.requests_per_minute is not None or self.limits.spend_usd_per_day is not None
        )

    async def admit(self, client: str) -> tuple[bool, str, float]:
        """Count one request; return ``(allowed, reason, retry_after_s)``."""
        per_minute = self.limits.requests_per_minute
        per_day = self.limits.spend_usd_per_day
        if self._store is not None:
            try:
                verdict: tuple[bool, str, float] = await self._store.alimit_admit(
                    client, per_minute=per_minute, spend_per_day=per_day
                )
                return verdict
            except Exception as exc:  # any store failure: count here instead
                self._failed(exc)
        return self._admit_here(client)

    def _admit_here(self, client: str) -> tuple[bool, str, float]:
        now = self._clock()
        per_day = self.limits.spend_usd_per_day
        if per_day is not None:
            day = int(now // 86400)
            if self._spend.get((client, day), 0.0) >= per_day:
                return False, "spend", (day + 1) * 86400 - now
        per_minute = self.limits.requests_per_minute
        if per_minute is not None:
            minute = int(now // 60)
            for key in [k for k in self._rate if k[1] < minute]:
                del self._rate[key]
            count = self._rate[(client, minute)] = self._rate.get((client, minute), 0) + 1
            if count > per_minute:
                return False, "rate", (minute + 1) * 60 - now
        return True, "", 0.0

    def spent(self, client: str, usd: float) -> None:
        """Add a finished turn's cost to ``client``'s day (written in the background)."""
        if self.limits.spend_usd_per_day is None or usd <= 0:
            return
        if self._store is None:
            self._spend_here(client, usd)
            return
        task = asyncio.ensure_future(self._spend_shared(client, usd))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _spend_shared(self, client: str, usd: float) -> None:
        assert self._store is not None
        try:
            await self._store.alimit_spend(client, usd)
        except Exception as exc:  # any store failure: count here instead
            self._failed(exc)
            self._spend_here(client, usd)

    def _spend_here(self, client: str, usd: float) -> None:
        day = int(self._clock() // 86400)
        for key in [k for k in self._spend if k[1] < day]:
            del self._spend[key]
        self._spend[(client, day)] = self._spend.get((client, day), 0.0) + usd

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        if self.failures == 1 or self.failures % 1000 == 0:
            logger.warning(
                "client limits: state store failed (%s); counting in this process",
                type(exc).__name__,
            )

    async def aclose(self) -> None:
        """Wait for the spend still being written."""
        while self._pending:
            await asyncio.gather(*list(self._pending))
