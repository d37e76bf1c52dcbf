"""Simulated time for async replays: an event loop whose clock jumps to the next timer.

Concurrent calls (a panel's drafts, a hedged frontier call) overlap in time, so a replay that
advances one clock by each call's latency, one call after the other, would add them up. Here
every replayed call sleeps its simulated latency on :class:`VirtualTimeLoop`, an asyncio
loop that never waits: when nothing is ready, its clock jumps to the next timer. Calls in
flight together then take the time of the slowest, as they would on the wire, and a
cancelled call stops at the time it was cancelled. The router's clock is the loop's.

Used by ``bench_task.py``; nothing here is part of the package.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

from tiered_router.backends._base import CompletionRequest
from tiered_router.evaluation.replay import ReplayBackend, simulated_latency
from tiered_router.exceptions import BackendError, BackendTimeout
from tiered_router.turn import Completion

__all__ = ["AsyncReplay", "VirtualTimeLoop"]


class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls the loop's own descriptors without waiting, and moves the clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time (see the module docstring)."""

    def __init__(self) -> None:
        self._virtual = _Selector()
        super().__init__(self._virtual)

    def time(self) -> float:
        """The simulated time, seconds."""
        return self._virtual.now


class AsyncReplay:
    """A :class:`ReplayBackend` whose calls sleep their simulated latency on the running loop.

    Args:
        inner: The replay backend (built without a clock).
    """

    def __init__(self, inner: ReplayBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.kind = inner.kind
        self.supports_tools = inner.supports_tools

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Sleep the recorded (or modelled) latency, then answer what the model answered."""
        inner = self.inner
        outcome = inner.outcome_for(request)
        seconds = simulated_latency(outcome, inner.latency, prefer_recorded=inner.prefer_recorded)
        if request.timeout_s is not None and seconds > request.timeout_s:
            await asyncio.sleep(request.timeout_s)
            raise BackendTimeout("simulated latency exceeds the time left", backend=self.name)
        await asyncio.sleep(seconds)
        if outcome.error is not None:
            raise BackendError(f"recorded failure: {outcome.error}", backend=self.name)
        return outcome.completion(model=self.model, backend=self.name)

    def complete(self, request: CompletionRequest) -> Completion:
        """Not used: the benchmark routes on the async path."""
        raise NotImplementedError("AsyncReplay is async only")
