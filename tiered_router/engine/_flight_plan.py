"""What both flights share: the plan, the race's decision, and their reports to the machine.

A *flight* runs a fast turn's attempts at once (:mod:`tiered_router.engine._flight` on
asyncio, :mod:`tiered_router.engine._flight_sync` on threads). Both drivers only wait and
cancel; what they decide is here, without I/O:

- :func:`plan_flight`: whether a turn flies at all, with a panel (:func:`~tiered_router.
  engine._panel_plan.plan_panel`) and a hedge delay (:func:`~tiered_router.engine._hedge.
  hedge_delay`);
- :func:`race_action`: the hedge against the fast side, one table over what has happened
  (has the fast side ended and where it goes next, where the hedge stands), returning one
  :class:`RaceAction`, as tenacity's ``iter`` returns the next step of a retry;
- the panel's requests (:func:`calls`, :func:`panel_turn`), the timeouts its own queue
  explains (:class:`OwnQueue`), the drafts cut when it is decided (:func:`cut_drafts`,
  :func:`take_late`), and what a hedge's outcome tells the machine (:func:`hedged`,
  :func:`hedge_answer`, :func:`record_loser`).
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Any

from tiered_router.engine._hedge import Percentile, hedge_delay
from tiered_router.engine._panel import Panel
from tiered_router.engine._panel_plan import DraftSpec, PanelPlan, draft_turn, own_calls, turn_panel

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.engine._dispatch import Dispatcher
    from tiered_router.engine._machine import TurnRun
    from tiered_router.turn import Turn

__all__ = [
    "FlightPlan",
    "HedgeState",
    "OwnQueue",
    "RaceAction",
    "calls",
    "cut_drafts",
    "hedge_answer",
    "hedged",
    "panel_turn",
    "plan_flight",
    "race_action",
    "record_loser",
    "take_late",
]

FlightPlan = tuple["PanelPlan | None", "float | None"]
"""A fast turn's panel (``None``: one draft) and hedge delay (``None``: no hedge)."""


def plan_flight(run: TurnRun, *, percentile: Percentile) -> FlightPlan | None:
    """The concurrent plan of a turn starting on the fast tier, ``None`` for the usual path."""
    policy = run.policy
    if (policy.drafts is None and policy.hedge is None) or run.first_tier() != "fast":
        return None
    if not run.escalate:  # a shadow run: one call, as documented
        return None
    panel = turn_panel(run)
    hedge = hedge_delay(run, percentile=percentile)
    if panel is None and hedge is None:
        return None
    return panel, hedge


# -- the race ------------------------------------------------------------------------------


class HedgeState(enum.Enum):
    """Where the hedged frontier call stands, as its flight sees it."""

    NOT_STARTED = "its delay has not run out"
    RUNNING = "under way"
    ANSWERED = "it answered; the machine has not been told yet"
    FAILED = "it ended without an answer (its errors are traced)"
    ACCEPTED = "the machine took its answer and the gate accepted it"
    REJECTED = "the machine took its answer and the gate failed it"


class RaceAction(enum.Enum):
    """What a flight does next in the race between its fast side and its hedge."""

    WAIT_FAST = "wait for the fast side"
    RECORD_HEDGE = "tell the machine the hedge's answer (hedged), then decide again"
    HEDGE_WINS = "cancel the fast side: the hedge's accepted answer is the turn's"
    CANCEL_HEDGE = "the fast side is done without the frontier: cancel the hedge"
    RECORD_LATE_HEDGE = "both ended at once, the fast side won: trace the hedge's answer"
    KEEP_FAST = "the fast side is done; the hedge left nothing to do"
    TAKE_HEDGE = "the fast side escalated: the hedge's answer, taken already, is the frontier's"
    AWAIT_HEDGE = "the fast side escalated: the hedge's outcome, when it ends, is the frontier's"
    CALL_FRONTIER = "the fast side escalated before the hedge started: the usual frontier call"


_SEEN = frozenset({HedgeState.ACCEPTED, HedgeState.REJECTED})


def race_action(hedge: HedgeState, *, fast_done: bool, fast_next: Tier | None = None) -> RaceAction:
    """The next step of a race (pure): the hedge's state, and the fast side's end if it ended.

    Args:
        hedge: Where the hedge stands.
        fast_done: Whether the fast side has ended.
        fast_next: The tier the fast side moves on to (``None``: it answered the turn).
    """
    if not fast_done:
        if hedge is HedgeState.ANSWERED:
            return RaceAction.RECORD_HEDGE
        return RaceAction.HEDGE_WINS if hedge is HedgeState.ACCEPTED else RaceAction.WAIT_FAST
    if fast_next != "frontier":
        if hedge in (HedgeState.NOT_STARTED, HedgeState.RUNNING):
            return RaceAction.CANCEL_HEDGE
        if hedge is HedgeState.ANSWERED:
            return RaceAction.RECORD_LATE_HEDGE
        return RaceAction.KEEP_FAST
    if hedge in _SEEN:
        return RaceAction.TAKE_HEDGE
    if hedge is HedgeState.NOT_STARTED:
        return RaceAction.CALL_FRONTIER
    return RaceAction.AWAIT_HEDGE


def hedge_state(*, started: bool, done: bool, outcome: Any = None) -> HedgeState:
    """The state of a hedge not yet told to the machine (``outcome``: its result once done)."""
    if not done:
        return HedgeState.RUNNING if started else HedgeState.NOT_STARTED
    return HedgeState.FAILED if outcome is None else HedgeState.ANSWERED


def hedged(run: TurnRun, outcome: Any) -> HedgeState:
    """Tell the machine a hedge's outcome (it keeps the answer when it is the best so far).

    Returns:
        ``ACCEPTED`` or ``REJECTED`` by the gate, ``FAILED`` when the hedge had no answer
        (already traced).
    """
    if outcome is None:
        return HedgeState.FAILED
    completion, backend, latency = outcome
    run.after_draft("frontier", backend.name, backend.model, completion, latency)
    verdict = run.attempts[-1].verdict
    return HedgeState.ACCEPTED if verdict is None or verdict.passed else HedgeState.REJECTED


def hedge_answer(run: TurnRun, outcome: Any) -> Tier | None:
    """The fast side escalated while the hedge ran: its outcome is the frontier's."""
    run.hedge_took_over()
    if hedged(run, outcome) is not HedgeState.FAILED:
        return None
    return run.after_error("frontier", run.errors[-1])


def record_loser(run: TurnRun, outcome: Any) -> None:
    """Trace a hedge that answered after the fast side had (its cost counts)."""
    completion, backend, latency = outcome
    run.record_draft("frontier", backend.name, backend.model, completion, latency)


# -- the panel's requests --------------------------------------------------------------------


def calls(plan: PanelPlan) -> list[tuple[DraftSpec, ...]]:
    """The requests of a panel: one per draft, or one for all (``n`` choices)."""
    return [plan.drafts] if plan.n else [(spec,) for spec in plan.drafts]


def panel_turn(run: TurnRun, specs: tuple[DraftSpec, ...], plan: PanelPlan) -> Turn:
    """The turn one panel request sends."""
    n = len(specs) if len(specs) > 1 else None
    return draft_turn(run.turn, specs[0], temperature=plan.temperature, n=n)


def cut_drafts(
    dispatch: Dispatcher, pending: list[tuple[DraftSpec, ...]], latency: float
) -> list[tuple[DraftSpec, str, float]]:
    """The drafts still running when the panel was decided, to trace as cancelled."""
    specs = sorted((s for group in pending for s in group), key=lambda s: s.index)
    return [(s, dispatch.backend(s.backend).model, latency) for s in specs]


def take_late(
    panel: Panel, groups: dict[Any, tuple[DraftSpec, ...]], pending: set[Any]
) -> set[Any]:
    """Take the drafts that answered before they could be cut; return the others.

    A draft can end between the panel's last look and the cutting of the rest: it has an
    answer (and a cost), so it is an arrival, not a cut draft. ``pending`` holds asyncio
    tasks or thread futures; a sync draft given up at the cut (its value ``None``) stays a
    cut draft.
    """
    taken = set()
    for job in sorted(pending, key=lambda j: groups[j][0].index):
        if not job.done() or job.cancelled() or job.exception() is not None:
            continue
        value, model, latency = job.result()
        if value is not None:
            panel.take(groups[job], value, model, latency)
            taken.add(job)
    return pending - taken


class OwnQueue:
    """How many of a panel's drafts wait behind the turn's own drafts, per backend.

    ``k`` drafts on a backend with ``max_concurrency`` slots below ``k``: the server runs
    ``max_concurrency`` of them and queues the others behind them. A timeout of one of those
    (at most ``k - max_concurrency`` per backend) is the turn's own doing, not the backend's:
    :meth:`absorbs` says so, and the breaker counts it as neutral. The others count as usual,
    so a backend that hangs still opens its breaker. Thread-safe (the sync panel's drafts
    run on threads).
    """

    def __init__(self, run: TurnRun, plan: PanelPlan) -> None:
        self._excess: dict[str, int] = {}
        self._lock = threading.Lock()
        for name, count in own_calls(plan).items():
            config = run.ports.backend_config(name)
            slots = config.max_concurrency if config is not None else None
            if slots is not None and count > slots:
                self._excess[name] = count - slots

    def absorbs(self, backend: str) -> bool:
        """Whether a timed-out draft on ``backend`` is one the turn's own drafts queued."""
        with self._lock:
            left = self._excess.get(backend, 0)
            if left > 0:
                self._excess[backend] = left - 1
            return left > 0
