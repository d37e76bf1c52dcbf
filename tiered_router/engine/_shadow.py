"""Shadow mode: run the other tier on a sampled share of turns, so production yields labels.

With ``shadow: {rate: 0.05}`` in the policy, 5 % of turns (chosen by a hash of the turn id:
the same turn always is or is not sampled) also run, after their answer is ready, on the
tier that did not answer them, when the turn did not try that tier already. The shadow run
is one call with no escalation and no task; its own trace (same ``turn_id``, decision rule
``shadow``, ``metadata.shadow: true``) goes to the sinks, where ``tiered-router dataset
from-traces`` merges it with the turn's trace. It never changes what the caller got and
never fails anything: it runs in the background (an asyncio task on the async path, a daemon
thread on the sync path), and its failure is only logged.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tiered_router._types import OTHER_TIER
from tiered_router.engine._machine import TurnRun
from tiered_router.engine.resilience import Deadline

if TYPE_CHECKING:
    import asyncio

    from tiered_router._types import Tier
    from tiered_router.engine._dispatch import Dispatcher

__all__ = ["ShadowRunner", "plan_shadow", "sampled", "shadow_run"]

logger = logging.getLogger("tiered_router.router")


def sampled(turn_id: str, rate: float) -> bool:
    """Whether ``turn_id`` falls in the sampled share ``rate`` (a hash: no randomness)."""
    if rate <= 0:
        return False
    digest = hashlib.blake2b(turn_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate


def plan_shadow(run: TurnRun) -> TurnRun | None:
    """The shadow run of a finished turn, if policy ``shadow.rate`` samples it (pure).

    A shadow run calls the tier that did not answer the turn (when the turn did not try it
    already and it can take the turn), once, with no escalation and no task: its trace (same
    ``turn_id``, rule ``shadow``, ``metadata.shadow: true``) is a label for that tier.
    """
    rate = run.policy.shadow.rate
    if run.kept is None or not sampled(run.turn.id, rate):
        return None
    other = OTHER_TIER[run.kept.tier]
    if other in run.tried or not run.usable(other):
        return None
    return shadow_run(
        run,
        other,
        rule="shadow",
        reason=f"shadow run of the {other} tier (shadow.rate {rate:g})",
        metadata={"shadow": True},
    )


def shadow_run(
    run: TurnRun, tier: Tier, *, rule: str, reason: str, metadata: Mapping[str, Any]
) -> TurnRun:
    """A one-call run of ``run``'s turn on ``tier``: no escalation, no task (pure).

    Its decision is ``run``'s with ``tier``, ``rule`` and ``reason`` first; ``metadata`` is
    added to the turn's (its trace carries it). Shadow mode and the quality monitor
    (:mod:`tiered_router.monitor`) both build their background calls here.
    """
    turn = run.turn.with_updates(metadata={**run.turn.metadata, **metadata})
    decision = replace(
        run.decision,
        tier=tier,
        backend=run.policy.backend_for(tier),
        rule=rule,
        reasons=(reason, *run.decision.reasons),
    )
    ports = run.ports
    limit = run.policy.resilience.deadline_s
    now = ports.now()
    deadline = Deadline(None if limit is None else now + limit)
    return TurnRun(ports, turn, decision, deadline, started=now, escalate=False)


Finisher = Callable[[TurnRun], None]
"""Called with a shadow run that ran to its end, before its trace is emitted."""
AsyncFinisher = Callable[[TurnRun], Awaitable[None]]
"""Async twin of :data:`Finisher`."""


class ShadowRunner:
    """Starts shadow runs in the background and waits for them on request.

    Args:
        drive: Runs a turn to its end on the sync path.
        adrive: Runs a turn to its end on the async path.
        dispatch: Emits the shadow run's trace.
    """

    def __init__(
        self,
        *,
        drive: Callable[[TurnRun], None],
        adrive: Callable[[TurnRun], Awaitable[None]],
        dispatch: Dispatcher,
    ) -> None:
        self._drive = drive
        self._adrive = adrive
        self._dispatch = dispatch
        self._jobs: set[asyncio.Task[None]] = set()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def astart(self, run: TurnRun) -> None:
        """Start ``run``'s shadow run as an asyncio task, when the policy samples it."""
        shadow = plan_shadow(run)
        if shadow is not None:
            self.alaunch(shadow)

    def alaunch(self, shadow: TurnRun, finish: AsyncFinisher | None = None) -> None:
        """Run ``shadow`` in the background (an asyncio task); ``finish`` it before its trace."""
        import asyncio  # off the package's import path (see router._asyncio_sleep)

        self.track(asyncio.get_running_loop().create_task(self._arun(shadow, finish)))

    def track(self, job: asyncio.Task[None]) -> None:
        """Keep a background task of the router's (waited for by :meth:`adrain`)."""
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _arun(self, shadow: TurnRun, finish: AsyncFinisher | None) -> None:
        try:
            await self._adrive(shadow)
            if finish is not None:
                await finish(shadow)
            await self._dispatch.aend(shadow)
        except Exception:  # a shadow run never fails anything: it is only a label
            logger.warning("shadow run of turn %s failed", shadow.turn.id, exc_info=True)
            await self._dispatch.aend(shadow)  # emitted once: a no-op when it already was

    def start(self, run: TurnRun) -> None:
        """Sync twin of :meth:`astart` (a daemon thread)."""
        shadow = plan_shadow(run)
        if shadow is not None:
            self.launch(shadow)

    def launch(self, shadow: TurnRun, finish: Finisher | None = None) -> None:
        """Sync twin of :meth:`alaunch`.

        Differs from the async twin: the shadow run goes on a daemon thread, kept in the
        running set until it ends; the async twin makes an asyncio task and tracks it.
        """
        thread = threading.Thread(
            target=self._run, args=(shadow, finish), name="tiered-router-shadow", daemon=True
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _run(self, shadow: TurnRun, finish: Finisher | None) -> None:
        """Sync twin of :meth:`_arun`, on its own thread.

        Differs from the async twin: the thread takes itself off the running set at its end
        (a task is taken off by its done callback).
        """
        try:
            self._drive(shadow)
            if finish is not None:
                finish(shadow)
            self._dispatch.end(shadow)
        except Exception:
            logger.warning("shadow run of turn %s failed", shadow.turn.id, exc_info=True)
            self._dispatch.end(shadow)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait for the shadow threads still running.

        Differs from the async twin: it joins threads, each for at most ``timeout_s``; the
        async twin gathers tasks until none is left.
        """
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout_s)

    async def adrain(self) -> None:
        """Wait for the shadow tasks still running."""
        import asyncio

        while self._jobs:
            await asyncio.gather(*list(self._jobs), return_exceptions=True)
