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
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from tiered_router._types import OTHER_TIER
from tiered_router.engine._machine import TurnRun
from tiered_router.engine.resilience import Deadline

if TYPE_CHECKING:
    import asyncio

    from tiered_router.engine._dispatch import Dispatcher

__all__ = ["ShadowRunner", "plan_shadow", "sampled"]

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
    turn = run.turn.with_updates(metadata={**run.turn.metadata, "shadow": True})
    decision = replace(
        run.decision,
        tier=other,
        backend=run.policy.backend_for(other),
        rule="shadow",
        reasons=(f"shadow run of the {other} tier (shadow.rate {rate:g})", *run.decision.reasons),
    )
    ports = run.ports
    limit = run.policy.resilience.deadline_s
    now = ports.now()
    deadline = Deadline(None if limit is None else now + limit)
    return TurnRun(ports, turn, decision, deadline, started=now, escalate=False)


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
            import asyncio  # off the package's import path (see router._asyncio_sleep)

            job = asyncio.get_running_loop().create_task(self._arun(shadow))
            self._jobs.add(job)
            job.add_done_callback(self._jobs.discard)

    async def _arun(self, shadow: TurnRun) -> None:
        try:
            await self._adrive(shadow)
            await self._dispatch.aend(shadow)
        except Exception:  # a shadow run never fails anything: it is only a label
            logger.warning("shadow run of turn %s failed", shadow.turn.id, exc_info=True)

    def start(self, run: TurnRun) -> None:
        """Sync twin of :meth:`astart` (a daemon thread)."""
        shadow = plan_shadow(run)
        if shadow is not None:
            thread = threading.Thread(
                target=self._run, args=(shadow,), name="tiered-router-shadow", daemon=True
            )
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _run(self, shadow: TurnRun) -> None:
        """Sync twin of :meth:`_arun`, on its own thread.

        Differs from the async twin: the thread takes itself off the running set at its end
        (a task is taken off by its done callback).
        """
        try:
            self._drive(shadow)
            self._dispatch.end(shadow)
        except Exception:
            logger.warning("shadow run of turn %s failed", shadow.turn.id, exc_info=True)
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
