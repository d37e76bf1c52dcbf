"""The live quality monitor: shadow a share of accepted fast answers, judge, tighten.

The router calls it at two points, and nowhere else:

- before a turn's first call, :meth:`Monitor.adjust` (pure: it reads the kinds' states the
  monitor last saw): a fast turn of an ``enforcing`` kind is tightened (rule ``monitor``:
  the frontier tier, or a stricter draft panel), except an ``explore`` share that goes fast
  as usual (rule ``monitor.explore``) and is always shadowed;
- after a turn ended with an accepted fast answer, :meth:`Monitor.shadow` (sync path) or
  :meth:`Monitor.ashadow` (async path): a ``shadow_rate`` share of them (drawn at random
  per turn, or by the injected sampler) is sent to the frontier tier in the background
  through the engine's shadow runner (:mod:`tiered_router.engine._shadow`). The caller
  already has its answer. When the frontier answers, the two answers are compared
  (:func:`~tiered_router.monitor.compare_answers`), the comparison is recorded in the state
  store (one atomic operation, shared by every worker on a shared store), the shadow call's
  cost is charged to the turn's task, and its trace (rule ``monitor.shadow``,
  ``metadata.shadow`` and ``metadata.monitor``: kind, outcome, figures, any change of state)
  goes to the sinks.

Which turns are shadowed (and which explore) is neither predictable nor steerable by a
client: the default sampler draws from the operating system's random source on every turn,
so a turn id a client chooses (the ``turn_id`` signal) says nothing about it, and probing
ids teaches nothing; and a turn id already shadowed is never shadowed (nor counted) again
while it is among the last ``max(1024, 4 * window)`` shadowed ids, so replaying one cannot
fill the window. Tests and simulations inject a deterministic sampler
(``Monitor(sample=...)`` or ``router.monitor.sample``).

A state change (``ok`` -> ``enforcing`` and back) is logged once, by the process whose record
made it, and is in that shadow call's trace. A state-store failure falls back to in-process
figures (:class:`~tiered_router.state.SafeStateStore`); a shadow call's failure is counted
(outcome ``failed``) and never reaches the caller.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from tiered_router.engine._shadow import shadow_run
from tiered_router.monitor._kinds import Comparison, compare_answers, turn_kind
from tiered_router.monitor._quality import KindQuality, quality_of
from tiered_router.policy._drafts import DraftsConfig
from tiered_router.state import (
    MonitorRules,
    MonitorSnapshot,
    MonitorStore,
    perfect_needs,
    wilson_lower,
)

if TYPE_CHECKING:
    from tiered_router.engine._context import TaskHooks
    from tiered_router.engine._machine import RoutedResult, TurnRun
    from tiered_router.engine._shadow import ShadowRunner
    from tiered_router.policy._monitor import MonitorConfig, MonitorKind
    from tiered_router.policy._schema import Policy
    from tiered_router.turn import Completion

__all__ = ["Monitor", "Sampler", "random_sampler"]

logger = logging.getLogger("tiered_router.monitor")

Sampler = Callable[[str, float], bool]
"""``sample(key, rate) -> bool``: whether ``key`` falls in the share ``rate``. The default
(:func:`random_sampler`) draws at random, ignoring the key, so a client cannot predict or
steer it through the turn id it chooses; inject a deterministic one (such as
:func:`tiered_router.engine._shadow.sampled`, a hash of the key) for tests and simulations
(STYLE rule 19)."""


def random_sampler(rng: random.Random | None = None) -> Sampler:
    """A :data:`Sampler` that draws from ``rng`` (default: the OS's random source) per call.

    The key is ignored: the draw depends on nothing a client sends.
    """
    source = rng or random.SystemRandom()

    def sample(key: str, rate: float) -> bool:
        return rate > 0 and source.random() < rate

    return sample


SHADOW_RULE = "monitor.shadow"
EXPLORE_RULE = "monitor.explore"
TIGHTEN_RULE = "monitor"
CUT_SHORT = "cancelled"
"""The outcome of a shadow call stopped before it had one (see ``SHADOW_OUTCOMES``)."""


class Monitor:
    """The policy's ``monitor:`` at work for one router (see the module docstring).

    Args:
        policy: The router's policy (its ``monitor:`` section must be set).
        store: The router's state store (monitor windows shared through it).
        shadows: The router's shadow runner (background calls, drained on close).
        clock: The router's clock, seconds.
        sample: The sampler of shadowed and exploring turns (see :data:`Sampler`).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        store: MonitorStore,
        shadows: ShadowRunner,
        clock: Callable[[], float],
        sample: Sampler | None = None,
    ) -> None:
        config = policy.monitor
        if config is None:
            raise ValueError("the policy has no monitor: section")
        self.config: MonitorConfig = config
        self.policy = policy
        z = NormalDist().inv_cdf(config.confidence)
        self.rules = MonitorRules(
            window=config.window,
            # fewer comparisons than a perfect record needs to clear the target judge nothing
            min_compared=max(config.min_compared, perfect_needs(config.target, z)),
            target=config.target,
            z=z,
            enforce=config.enforce,
        )
        self._store = store
        self._shadows = shadows
        self._clock = clock
        self.sample: Sampler = sample or random_sampler()
        self._shadowed: OrderedDict[str, None] = OrderedDict()  # recent shadowed turn ids
        self._remember = max(1024, 4 * config.window)
        self._view: dict[str, MonitorSnapshot] = {}
        self._read_at: float | None = None
        self._refreshing = False
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = {}
        self._strict: Policy | None = None
        if config.enforce and config.tighten == "drafts":
            base = policy.drafts or DraftsConfig()
            strict = base.model_copy(
                update={
                    "k": config.tighten_drafts.k,
                    "min_agreement": config.tighten_drafts.min_agreement,
                    "when": ["all"],
                    "variants": base.variants[: config.tighten_drafts.k],
                    # per-kind panels and the one-draft zone would undo the tightening
                    "kinds": {},
                    "panel_above": None,
                }
            )
            self._strict = policy.model_copy(update={"drafts": strict})

    def __repr__(self) -> str:
        c = self.config
        return f"Monitor(shadow_rate={c.shadow_rate:g}, target={c.target:g}, enforce={c.enforce})"

    # -- the kinds' states, as last seen ---------------------------------------------------

    def _stale(self) -> bool:
        if not self.config.enforce:
            return False  # nothing is decided from the states: no read on the turn's path
        return self._read_at is None or self._clock() - self._read_at >= self.config.refresh_s

    def _saw(self, snapshots: list[MonitorSnapshot]) -> None:
        with self._lock:
            for snap in snapshots:
                self._view[snap.kind] = snap
            self._read_at = self._clock()

    def refresh(self) -> None:
        """Read the kinds' states from the store when ``refresh_s`` has passed (sync path)."""
        if self._stale():
            rules = self.rules
            self._saw([self._store.monitor_snapshot(k, rules=rules) for k in self.config.kinds])

    async def arefresh(self) -> None:
        """Async twin of :meth:`refresh`."""
        if self._stale():
            rules = self.rules
            store = self._store
            self._saw([await store.amonitor_snapshot(k, rules=rules) for k in self.config.kinds])

    def refresh_soon(self) -> None:
        """Start :meth:`arefresh` in the background when due (a stream's constructor)."""
        if not self._stale() or self._refreshing:
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._refreshing = True

        async def read() -> None:
            try:
                await self.arefresh()
            finally:
                self._refreshing = False

        self._shadows.track(loop.create_task(read()))

    def prepare(self, run: TurnRun) -> None:
        """Before a turn's first call: read the states again when due, then :meth:`adjust`.

        In an event loop the read runs in the background (this turn uses the states last
        seen); elsewhere it is a sync read.
        """
        if self._stale():
            import asyncio

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self.refresh()
            else:
                self.refresh_soon()
        self.adjust(run)

    def state(self, kind: str) -> MonitorSnapshot:
        """The figures of ``kind`` as this process last saw them."""
        return self._view.get(kind) or MonitorSnapshot(kind=kind)

    # -- before the first call --------------------------------------------------------------

    def adjust(self, run: TurnRun) -> None:
        """Tighten a fast turn of an enforcing kind, or let it explore (pure; sets the decision).

        A turn pinned by the caller, or not decided for the fast tier, is left alone.
        """
        decision = run.decision
        if decision.tier != "fast" or decision.rule == "pinned" or not self.config.enforce:
            return
        kind = turn_kind(run.turn)
        snap = self._view.get(kind)
        if snap is None or snap.state != "enforcing":
            return
        config = self.config
        if self.sample(f"monitor.explore|{run.turn.id}", config.explore):
            run.redecide(
                replace(
                    decision,
                    rule=EXPLORE_RULE,
                    reasons=(
                        f"monitor: {kind} is enforcing; this turn explores (explore "
                        f"{config.explore:g}): fast as usual, compared with the frontier",
                        *decision.reasons,
                    ),
                )
            )
            return
        bound = wilson_lower(snap.matched, snap.compared, self.rules.z)
        why = (
            f"monitor: {kind} matched-share bound {bound:.3f} < target {config.target:g} "
            f"({snap.matched}/{snap.compared} matched)"
        )
        if config.tighten == "drafts" and self._strict is not None:
            strict = config.tighten_drafts
            run.redecide(
                replace(
                    decision,
                    rule=TIGHTEN_RULE,
                    reasons=(
                        f"{why}: {strict.k} drafts, min_agreement {strict.min_agreement:g}",
                        *decision.reasons,
                    ),
                ),
                policy=self._strict,
            )
        elif run.usable("frontier"):
            run.redecide(
                replace(
                    decision,
                    tier="frontier",
                    backend=run.policy.backend_for("frontier"),
                    rule=TIGHTEN_RULE,
                    reasons=(f"{why}: frontier", *decision.reasons),
                )
            )

    # -- after the turn ---------------------------------------------------------------------

    def _plan(self, run: TurnRun) -> tuple[TurnRun, MonitorKind, Completion] | None:
        trace = run.trace()
        kept = run.kept
        if kept is None or trace.tier != "fast" or trace.escalated:
            return None
        if trace.verdict is not None and not trace.verdict.passed:
            return None  # a fast draft kept because nothing else answered: not accepted
        kind = turn_kind(run.turn)
        config = self.config
        if kind not in config.kinds:
            return None
        explore = run.decision.rule == EXPLORE_RULE
        turn_id = run.turn.id
        if turn_id in self._shadowed:  # a replayed id is compared (and counted) once
            return None
        if not explore and not self.sample(f"monitor.shadow|{turn_id}", config.shadow_rate):
            return None
        if "frontier" in run.tried or not run.usable("frontier"):
            return None
        with self._lock:
            if turn_id in self._shadowed:
                return None
            self._shadowed[turn_id] = None
            while len(self._shadowed) > self._remember:
                self._shadowed.popitem(last=False)
        shadow = shadow_run(
            run,
            "frontier",
            rule=SHADOW_RULE,
            reason=(
                f"monitor: the accepted fast {kind} answer compared with the frontier's "
                + ("(exploring)" if explore else f"(shadow_rate {config.shadow_rate:g})")
            ),
            metadata={"shadow": True, "monitor": {"kind": kind, "explore": explore}},
        )
        return shadow, kind, kept.completion

    def shadow(self, run: TurnRun, result: RoutedResult) -> RoutedResult:
        """After a turn (sync path): shadow it when sampled; return the result, marked."""
        planned = self._plan(run)
        if planned is None:
            return result
        shadow, kind, fast = planned
        _pending(shadow)
        task = run.task

        def finish(shadow_run: TurnRun) -> None:
            outcome = self._outcome(shadow_run, kind, fast)
            snap = None
            if outcome in ("matched", "mismatched"):
                snap = self._store.monitor_record(kind, outcome == "matched", rules=self.rules)
            self._settle(shadow_run, kind, outcome, snap)
            if task is not None:
                _charge(task.charge, shadow_run)

        self._shadows.launch(shadow, finish, cut=self._cut)
        return replace(result, shadowed=True)

    def ashadow(self, run: TurnRun, result: RoutedResult) -> RoutedResult:
        """Async twin of :meth:`shadow` (the shadow call is an asyncio task)."""
        planned = self._plan(run)
        if planned is None:
            return result
        shadow, kind, fast = planned
        _pending(shadow)
        task = run.task

        async def finish(shadow_run: TurnRun) -> None:
            outcome = self._outcome(shadow_run, kind, fast)
            snap = None
            if outcome in ("matched", "mismatched"):
                matched = outcome == "matched"
                snap = await self._store.amonitor_record(kind, matched, rules=self.rules)
            self._settle(shadow_run, kind, outcome, snap)
            if task is not None:
                await _acharge(task, shadow_run)

        self._shadows.alaunch(shadow, finish, cut=self._cut)
        return replace(result, shadowed=True)

    def _outcome(self, shadow: TurnRun, kind: MonitorKind, fast: Completion) -> str:
        kept = shadow.kept
        if kept is None:
            return "failed"
        comparison: Comparison = compare_answers(fast, kept.completion, shadow.turn)
        return comparison

    def _cut(self, shadow: TurnRun) -> None:
        """A shadow call cut short before it settled: count it ``cancelled`` (its trace says so)."""
        info = shadow.turn.metadata.get("monitor", {})
        if info.get("outcome") == CUT_SHORT:  # not settled: _settle never writes this outcome
            with self._lock:
                key = (str(info.get("kind")), CUT_SHORT)
                self._calls[key] = self._calls.get(key, 0) + 1

    def _settle(
        self, shadow: TurnRun, kind: MonitorKind, outcome: str, snap: MonitorSnapshot | None
    ) -> None:
        with self._lock:
            key = (kind, outcome)
            self._calls[key] = self._calls.get(key, 0) + 1
            if snap is not None:
                self._view[kind] = snap
        info: dict[str, Any] = {**shadow.turn.metadata.get("monitor", {}), "outcome": outcome}
        if snap is not None:
            bound = wilson_lower(snap.matched, snap.compared, self.rules.z)
            info.update(
                compared=snap.compared,
                matched=snap.matched,
                lower_bound=round(bound, 6),
                target=self.config.target,
                state=snap.state,
                judged=snap.compared >= self.rules.min_compared,
            )
            if snap.changed:
                info["change"] = f"{snap.previous}->{snap.state}"
                logger.warning(
                    "monitor: %s %s -> %s: matched-share bound %.3f %s target %g "
                    "(%d/%d matched, confidence %g)",
                    kind,
                    snap.previous,
                    snap.state,
                    bound,
                    ">=" if snap.state == "ok" else "<",
                    self.config.target,
                    snap.matched,
                    snap.compared,
                    self.config.confidence,
                )
        shadow.annotate({"monitor": info})

    # -- figures --------------------------------------------------------------------------

    def _figures(self, snapshots: list[MonitorSnapshot]) -> dict[str, KindQuality]:
        with self._lock:
            calls = dict(self._calls)
        return {
            snap.kind: quality_of(
                snap,
                z=self.rules.z,
                target=self.config.target,
                min_compared=self.rules.min_compared,
                calls={o: n for (k, o), n in calls.items() if k == snap.kind},
            )
            for snap in snapshots
        }

    def quality(self) -> dict[str, KindQuality]:
        """Every monitored kind's figures, read from the store now."""
        rules = self.rules
        snapshots = [self._store.monitor_snapshot(k, rules=rules) for k in self.config.kinds]
        self._saw(snapshots)
        return self._figures(snapshots)

    async def aquality(self) -> dict[str, KindQuality]:
        """Async twin of :meth:`quality`."""
        rules = self.rules
        store = self._store
        snapshots = [await store.amonitor_snapshot(k, rules=rules) for k in self.config.kinds]
        self._saw(snapshots)
        return self._figures(snapshots)


def _pending(shadow: TurnRun) -> None:
    """Mark a shadow call ``cancelled`` until it settles.

    A trace emitted before then (the call cut short: its task cancelled, the event loop
    ended) says so.
    """
    info = {**shadow.turn.metadata.get("monitor", {}), "outcome": CUT_SHORT}
    shadow.annotate({"monitor": info})


def _charge(charge: Callable[[Any], None], shadow: TurnRun) -> None:
    try:
        charge(shadow.trace())
    except Exception:  # the task's bookkeeping never fails the shadow call's report
        logger.exception("the task could not take the shadow call of turn %s", shadow.turn.id)


async def _acharge(task: TaskHooks, shadow: TurnRun) -> None:
    try:
        charged: Awaitable[None] = task.acharge(shadow.trace())
        await charged
    except Exception:
        logger.exception("the task could not take the shadow call of turn %s", shadow.turn.id)
