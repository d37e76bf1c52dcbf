"""The escalation engine: one routed turn's state machine, with no I/O.

A turn goes through the same steps whoever drives it (the router's async and sync paths,
the routed streams, the drop-in client and the proxy through them)::

    plan_turn()          decide: task signals, scorer + rules, tools capability, tier=
      run.first_tier()   the tier to try first
      ... the driver calls the backend (retries, breaker) and reports back:
      run.record_error() one failed try            run.after_error()  -> next tier or None
      run.after_draft()  a draft: gate it, record   -> next tier or None (done)
      run.streamed()     a draft streamed straight through to the caller (done)
    run.conclude(exc)    freeze the trace (once: the driver hands it to the task and sinks)
    run.outcome()        -> RoutedResult, or AllTiersFailed / GateFailed

The engine never calls a backend, sleeps, reads a socket or writes a trace: the driver
(:class:`~tiered_router.engine._dispatch.Dispatcher`) does, and tells the engine what happened.
What the engine needs from its surroundings (the policy, the gate, the scorer, the clock,
capability lookups) comes in through :class:`EnginePorts`. ``conclude`` hands out a turn's
trace once, so every turn's trace is emitted exactly once, whichever way it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from tiered_router._types import OTHER_TIER, Tier
from tiered_router.engine._context import EnginePorts
from tiered_router.engine._offered import (
    DROPPED_CALLS,
    call_problems,
    checked_verdict,
    without_calls,
)
from tiered_router.engine._recording import build_record
from tiered_router.engine._result import Kept, RoutedResult, outcome
from tiered_router.engine.resilience import Deadline
from tiered_router.exceptions import (
    BackendError,
    BackendUnavailable,
    _describe,
)
from tiered_router.pricing import cost_of
from tiered_router.routing import Decision
from tiered_router.trace import Attempt, AttemptRole, EscalationReason, TierFailure, Trace

if TYPE_CHECKING:
    from tiered_router.engine._context import TaskHooks
    from tiered_router.gate import Verdict
    from tiered_router.policy._schema import Policy
    from tiered_router.turn import Completion, Turn

__all__ = [
    "LIFTED_TEXT_CALLS",
    "EnginePorts",
    "Kept",
    "RoutedResult",
    "TurnRun",
]

LIFTED_TEXT_CALLS = "tool calls written as text returned as tool_calls"
"""The conversion recorded when a draft's text calls are returned as real tool calls."""

_ESCALATING: frozenset[EscalationReason] = frozenset(
    {"gate_failed", "backend_error", "circuit_open", "drafts_disagree", "deferred"}
)
"""The reasons that make a fast turn ``escalated`` (``hedged`` and the frontier's do not)."""
_DRAFT_FAILURES: frozenset[TierFailure] = frozenset({"gate_failed", "drafts_disagree", "deferred"})
_FRONTIER_REASON: dict[TierFailure, EscalationReason] = {
    "backend_error": "frontier_backend_error",
    "circuit_open": "circuit_open",
}
"""A frontier failure's escalation reason: only those two send a turn down to the fast tier."""


class TurnRun:
    """The state of one routed turn; see the module docstring for the steps.

    Only the machine changes a turn: drivers, flights, the panel and the monitor read it
    through read-only views (``attempts``, ``errors``, ``tried``, ``decision``, ``kept``)
    and say what happened through intents (``after_draft``, ``hedge_started``, ``keep``,
    ``cancel_tier``, ``redecide``...); ``tests/test_engine_house.py`` checks the source.
    """

    def __init__(
        self,
        ports: EnginePorts,
        turn: Turn,
        decision: Decision,
        deadline: Deadline,
        *,
        started: float,
        task: TaskHooks | None = None,
        escalate: bool = True,
    ) -> None:
        self.ports: Final = ports
        self.escalate: Final = escalate
        self._policy = ports.policy
        self._turn = turn
        self.deadline: Final = deadline
        self.started: Final = started
        self.task: Final = task
        self._decision = decision
        self._attempts: list[Attempt] = []
        self._errors: list[BackendError] = []
        self._escalations: list[EscalationReason] = []
        self._tries: dict[str, int] = {}
        self._tried: set[Tier] = set()
        self._kept: Kept | None = None
        self._interrupted: str | None = None
        self._drafts: dict[int, Completion] = {}  # attempt index -> draft, for recording
        self._panel: dict[str, Any] | None = None  # what a draft panel found
        self._roles: dict[Tier, AttemptRole] = {}  # a tier's calls' role while not "call"
        self._cancelling: set[Tier] = set()  # tiers whose calls the driver is cancelling
        self._trace: Trace | None = None
        # backend -> release of its in-flight count, while a call on it is under way
        self._holds: dict[str, Callable[[], None]] = {}

    # what the turn holds so far (read-only views) -----------------------------------------

    @property
    def turn(self) -> Turn:
        """The turn (its metadata grows only by :meth:`annotate`)."""
        return self._turn

    def annotate(self, metadata: Mapping[str, Any]) -> None:
        """Add ``metadata`` to the turn's, which its trace carries (the monitor's verdict)."""
        self._turn = self._turn.with_updates(metadata={**self._turn.metadata, **metadata})

    @property
    def policy(self) -> Policy:
        """The policy the turn runs under (changed only by :meth:`redecide`)."""
        return self._policy

    @property
    def decision(self) -> Decision:
        """The routing decision (changed only by :meth:`redecide`, before any call)."""
        return self._decision

    @property
    def attempts(self) -> Sequence[Attempt]:
        """The attempts so far, in order."""
        return self._attempts

    @property
    def errors(self) -> Sequence[BackendError]:
        """The backend errors so far, in order."""
        return self._errors

    @property
    def tried(self) -> Set[Tier]:
        """The tiers that have had their turn (a hedge alone does not count)."""
        return self._tried

    @property
    def kept(self) -> Kept | None:
        """The draft kept as the answer so far, if any."""
        return self._kept

    def redecide(self, decision: Decision, *, policy: Policy | None = None) -> None:
        """Change the decision before any call (capacity, the quality monitor).

        ``policy``: a stricter one for this turn (the monitor's tightened drafts).
        """
        if self._attempts:
            raise RuntimeError("a turn is redecided only before its first call")
        self._decision = decision
        if policy is not None:
            self._policy = policy

    # the in-flight count ----------------------------------------------------------------

    def hold(self, backend: str, acquire: Callable[[str], Callable[[], None]]) -> None:
        """Count a call on ``backend`` as in flight until its attempt is recorded."""
        if backend not in self._holds:
            self._holds[backend] = acquire(backend)

    def release_hold(self, backend: str) -> None:
        """Stop counting ``backend``'s call as in flight without recording an attempt.

        For a sync call given up after the turn traced it (:class:`~tiered_router.engine.
        _dispatch.Abandoned`).
        """
        self._release(backend)

    def _release(self, backend: str | None = None) -> None:
        for name in [backend] if backend is not None else list(self._holds):
            release = self._holds.pop(name, None)
            if release is not None:
                release()

    # which tier next ------------------------------------------------------------------------

    def usable(self, tier: Tier) -> bool:
        """Whether ``tier``'s backend can serve this turn (tools, what its dialect expresses)."""
        return self.ports.capability_gap(self._policy.backend_for(tier), self._turn) is None

    def first_tier(self) -> Tier:
        """The tier to call first."""
        return self._decision.tier

    def route_around(self, tier: Tier) -> Tier | None:
        """The tier to try when ``tier``'s breaker refuses the call, if the policy allows one."""
        other = OTHER_TIER[tier]
        if not self.escalate or (tier == "fast" and not self._policy.escalation.on_backend_error):
            return None
        if other in self._tried or not self.usable(other):
            return None
        return other

    def next_tier(self, tier: Tier, reason: TierFailure) -> Tier | None:
        """The tier to try after ``tier`` failed for ``reason``, if any (no side effects)."""
        if reason == "circuit_open":
            return self.route_around(tier)
        other = OTHER_TIER[tier]
        if not self.escalate or other in self._tried or not self.usable(other):
            return None
        if tier == "fast":
            esc = self._policy.escalation
            allowed = esc.on_gate_failure if reason in _DRAFT_FAILURES else esc.on_backend_error
            return other if allowed else None
        # a frontier draft is never sent down to the fast tier; a frontier error may be
        return other if reason == "backend_error" else None

    def move_on(self, tier: Tier, reason: TierFailure) -> Tier | None:
        """Record why ``tier`` failed when another tier takes over; return that tier."""
        nxt = self.next_tier(tier, reason)
        if nxt is not None:
            self._escalations.append(reason if tier == "fast" else _FRONTIER_REASON[reason])
        return nxt

    def will_gate_again(self, tier: Tier) -> bool:
        """Whether a failing draft from ``tier`` could still be replaced (or raised)."""
        return (
            self.next_tier(tier, "gate_failed") is not None
            or self._policy.escalation.when_frontier_fails_gate == "raise"
        )

    # one call -------------------------------------------------------------------------------

    def _attempt(
        self, tier: Tier, backend: str, model: str, latency: float, **fields: Any
    ) -> Attempt:
        self._release(backend)
        index = self._tries.get(backend, 0)
        self._tries[backend] = index + 1
        role = fields.setdefault("role", self._roles.get(tier, "call"))
        if role != "hedge":  # a hedge is not the tier's turn: the fast side may still escalate
            self._tried.add(tier)
        return Attempt(
            tier=tier, backend=backend, model=model, try_index=index, latency_s=latency, **fields
        )

    def add_attempt(
        self,
        tier: Tier,
        backend: str,
        model: str,
        latency: float,
        *,
        output: Completion | None = None,
        **fields: Any,
    ) -> None:
        """Record one attempt (a panel's draft, a cancelled call) with the given fields.

        ``output``: the draft it returned, kept for the trace's record.
        """
        if output is not None:
            self._drafts[len(self._attempts)] = output
        self._attempts.append(self._attempt(tier, backend, model, latency, **fields))

    def draft_failed(self, backend: str, model: str, exc: BackendError, latency: float) -> None:
        """Record a panel's draft that failed (a missing vote; its error is the turn's too)."""
        self._errors.append(exc)
        self.add_attempt("fast", backend, model, latency, role="draft", error=_describe(exc))

    # what a flight or a panel reports -------------------------------------------------------

    def hedge_started(self) -> None:
        """The hedged frontier call starts: its attempts have role ``hedge``."""
        self._roles["frontier"] = "hedge"

    def hedge_over(self) -> None:
        """The race is over: a frontier call is the tier's own turn again."""
        self._roles.pop("frontier", None)

    def hedge_won(self) -> None:
        """The hedge answered first with a draft the gate accepted (:meth:`after_draft` kept it)."""
        self._escalations.append("hedged")

    def hedge_took_over(self) -> None:
        """The fast side escalated and the hedge's outcome is the frontier tier's turn."""
        self._tried.add("frontier")

    def cancel_tier(self, tier: Tier) -> None:
        """The driver is cancelling ``tier``'s calls: each is traced as cancelled."""
        self._cancelling.add(tier)

    def is_cancelling(self, tier: Tier) -> bool:
        """Whether the driver is cancelling ``tier``'s calls."""
        return tier in self._cancelling

    def panel_found(self, summary: dict[str, Any]) -> None:
        """What the turn's draft panel found (the trace's ``panel``)."""
        self._panel = summary

    def lift(self, completion: Completion) -> Completion:
        """``completion`` with the tool calls its whole text wrote returned as real calls."""
        lifted = self.ports.gate.lift(completion, self._turn)
        if lifted is not completion:
            return replace(lifted, conversions=(*lifted.conversions, LIFTED_TEXT_CALLS))
        return completion

    def gated(self, completion: Completion) -> tuple[Completion, Verdict | None]:
        """A fast ``completion`` lifted (see :meth:`lift`), and its verdict.

        The verdict is the gate's, failed by the offered-calls floor
        (:func:`~tiered_router.engine._offered.call_problems`) whatever the gate checks: a
        panel's draft passes the same floor as a single draft.
        """
        completion = self.lift(completion)
        verdict = self.ports.gate.evaluate(completion, self._turn)
        return completion, checked_verdict(verdict, call_problems(completion, self._turn))

    def keep(
        self,
        tier: Tier,
        completion: Completion,
        verdict: Verdict | None,
        *,
        backend: str | None = None,
    ) -> Completion:
        """Keep ``completion`` as the turn's answer so far; return what is kept.

        Every path that returns a draft (single, panel, hedge, stream) keeps it here, so
        calls to tools the turn did not offer (or outside its ``tool_choice``, or with
        arguments that are not a JSON object) never reach the caller: they are taken off,
        and the verdict fails on them. ``backend``: a panel draft's own backend, when it is
        not the tier's.
        """
        problems = call_problems(completion, self._turn)
        if problems:
            completion = without_calls(completion)
        self._kept = Kept(tier, completion, checked_verdict(verdict, problems), backend=backend)
        return completion

    def record_error(
        self, tier: Tier, backend: str, model: str, exc: BackendError, latency: float
    ) -> None:
        """Record one failed try (the driver may retry the same backend next)."""
        self._errors.append(exc)
        if isinstance(exc, BackendUnavailable):  # refused by its breaker: no call was made
            role = self._roles.get(tier, "call")
            self._attempts.append(
                Attempt(tier=tier, backend=backend, model="", error=_describe(exc), role=role)
            )
            return
        self._attempts.append(self._attempt(tier, backend, model, latency, error=_describe(exc)))

    def after_error(self, tier: Tier, exc: BackendError) -> Tier | None:
        """``tier`` gave up (its retries are spent): return the next tier, or ``None``."""
        reason: TierFailure = (
            "circuit_open" if isinstance(exc, BackendUnavailable) else "backend_error"
        )
        return self.move_on(tier, reason)

    def record_draft(
        self, tier: Tier, backend: str, model: str, completion: Completion, latency: float
    ) -> Verdict | None:
        """Gate and record a draft without keeping it as the answer; return its verdict."""
        verdict: Verdict | None = None
        if tier == "fast" or self._policy.gate.check_frontier:
            verdict = self.ports.gate.evaluate(completion, self._turn)
        # calls to tools not offered, or arguments not JSON, fail whatever the gate checks
        problems = call_problems(completion, self._turn)
        verdict = checked_verdict(verdict, problems)
        config = self.ports.backend_config(backend)
        cost = cost_of(completion.usage, config.price) if config is not None else 0.0
        self._drafts[len(self._attempts)] = completion
        self._attempts.append(
            self._attempt(
                tier,
                backend,
                model,
                latency,
                usage=completion.usage,
                cost=cost,
                verdict=verdict,
                conversions=(*completion.conversions, DROPPED_CALLS)
                if problems
                else completion.conversions,
            )
        )
        return verdict

    def after_draft(
        self, tier: Tier, backend: str, model: str, completion: Completion, latency: float
    ) -> Tier | None:
        """Gate and record ``completion`` from ``tier``; return the next tier, or ``None``.

        The draft is kept as the answer when it passes, or when it fails and no tier is
        left to try (the verdict is in the trace; ``finish`` may raise ``GateFailed``).
        Tool calls the draft wrote as its whole text (which the gate judges as calls) come
        back as real ``tool_calls``, so the caller's agent loop can run them; the attempt's
        ``conversions`` say so.
        """
        completion = self.lift(completion)
        verdict = self.record_draft(tier, backend, model, completion, latency)
        if verdict is None or verdict.passed:
            self.keep(tier, completion, verdict)
            return None
        nxt = self.move_on(tier, "gate_failed")
        if nxt is None or self._kept is None:
            # keep the failing draft until a better one comes: nothing is lost (but calls
            # the caller did not offer, or cannot parse, never reach it)
            self.keep(tier, completion, verdict)
        return nxt

    def streamed(
        self, tier: Tier, backend: str, model: str, completion: Completion, latency: float
    ) -> None:
        """Record a draft streamed straight through: it is the answer, whatever the gate says.

        The verdict goes in the trace.
        """
        verdict = self.record_draft(tier, backend, model, completion, latency)
        self.keep(tier, completion, verdict)

    # the end --------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the turn's trace has been emitted."""
        return self._trace is not None

    def trace(self) -> Trace:
        """The trace of the turn as it stands (the emitted one once the turn ended)."""
        if self._trace is not None:
            return self._trace
        kept = self._kept
        escalated = self._decision.tier == "fast" and any(
            e in _ESCALATING for e in self._escalations
        )
        return Trace(
            turn_id=self._turn.id,
            decision=self._decision,
            attempts=tuple(self._attempts),
            tier=kept.tier if kept else None,
            backend=(kept.backend or self._policy.backend_for(kept.tier)) if kept else None,
            escalated=escalated,
            escalations=tuple(self._escalations),
            verdict=kept.verdict if kept else None,
            latency_s=self.ports.now() - self.started,
            metadata=self._turn.metadata,
            interrupted=self._interrupted,
            record=build_record(self.ports.record, self._turn, self._drafts, len(self._attempts)),
            panel=self._panel,
        )

    def conclude(self, exc: BaseException | None = None) -> Trace | None:
        """Freeze the turn's trace: return it the first time, ``None`` ever after.

        The driver hands the returned trace to the task and the sinks, so every turn's trace
        is emitted exactly once, whichever way the turn ends.

        Args:
            exc: What ended the turn when it did not run to its end (cancelled, abandoned,
                an unexpected error); it sets the trace's ``interrupted``.
        """
        self._release()
        if self._trace is not None:
            return None
        if exc is not None:
            self._interrupted = (
                "abandoned" if isinstance(exc, GeneratorExit) else type(exc).__name__
            )
        self._trace = self.trace()
        return self._trace

    def outcome(self) -> RoutedResult:
        """The concluded turn's result, or its typed error (:func:`.outcome`)."""
        if self._trace is None:
            raise RuntimeError("conclude() the turn before asking for its outcome")
        return outcome(self, self._trace)

    def record_cut(
        self, tier: Tier, backend: str, model: str, exc: BaseException, latency: float
    ) -> None:
        """Record a call cut short by anything but a backend error (cancelled, abandoned).

        Its error is the interruption.
        """
        if tier in self._cancelling:  # the turn was decided without this call
            self._attempts.append(self._attempt(tier, backend, model, latency, cancelled=True))
            return
        kind = "abandoned" if isinstance(exc, GeneratorExit) else type(exc).__name__
        error = {"type": type(exc).__name__, "message": f"the call was cut short ({kind})"}
        self._attempts.append(self._attempt(tier, backend, model, latency, error=error))
