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

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from tiered_router._types import OTHER_TIER, Tier
from tiered_router.backends._base import CompletionRequest
from tiered_router.engine._offered import (
    DROPPED_CALLS,
    call_problems,
    checked_verdict,
    without_calls,
)
from tiered_router.engine._recording import RecordOption, build_record
from tiered_router.engine._result import RoutedResult
from tiered_router.engine.resilience import Deadline
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GateFailed,
    _describe,
)
from tiered_router.pricing import cost_of
from tiered_router.routing import Decision
from tiered_router.trace import Attempt, AttemptRole, Trace

if TYPE_CHECKING:
    from tiered_router.engine._context import TaskHooks
    from tiered_router.gate import QualityGate, Verdict
    from tiered_router.policy._schema import BackendConfig, Policy
    from tiered_router.scoring import Score
    from tiered_router.turn import Completion, Turn

__all__ = [
    "LIFTED_TEXT_CALLS",
    "EnginePorts",
    "RoutedResult",
    "TurnRun",
]

logger = logging.getLogger("tiered_router.router")

LIFTED_TEXT_CALLS = "tool calls written as text returned as tool_calls"
"""The conversion recorded when a draft's text calls are returned as real tool calls."""

_ESCALATING = frozenset(
    {"gate_failed", "backend_error", "circuit_open", "drafts_disagree", "deferred"}
)
_DRAFT_FAILURES = frozenset({"gate_failed", "drafts_disagree", "deferred"})


class EnginePorts(Protocol):
    """What the engine needs from its surroundings (the router provides it)."""

    @property
    def policy(self) -> Policy:
        """The routing policy."""
        ...

    @property
    def gate(self) -> QualityGate:
        """The quality gate drafts are checked with."""
        ...

    def score(self, turn: Turn) -> Score:
        """Score a turn (pure)."""
        ...

    def now(self) -> float:
        """The router's clock, seconds."""
        ...

    def capability_gap(self, backend: str, turn: Turn) -> tuple[str, str] | None:
        """``(what, why)`` when backend ``backend`` cannot take ``turn`` at all, else ``None``."""
        ...

    @property
    def record(self) -> RecordOption:
        """Whether (and how) traces record the turn's request and outputs."""
        ...

    def backend_config(self, backend: str) -> BackendConfig | None:
        """Backend ``backend``'s policy config (preset applied), if it has one."""
        ...


class TurnRun:
    """The state of one routed turn; see the module docstring for the steps."""

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
        self.ports = ports
        self.escalate = escalate
        self.policy = ports.policy
        self.turn = turn
        self.decision = decision
        self.deadline = deadline
        self.started = started
        self.task = task
        self.attempts: list[Attempt] = []
        self.errors: list[BackendError] = []
        self.escalations: list[str] = []
        self.tries: dict[str, int] = {}
        self.tried: set[Tier] = set()
        self.returned: tuple[Tier, Completion, Verdict | None] | None = None
        self.interrupted: str | None = None
        self.drafts: dict[int, Completion] = {}  # attempt index -> draft, for recording
        self.panel: dict[str, Any] | None = None  # what a draft panel found
        self.served_by: tuple[str, Completion] | None = None  # a panel draft's own backend
        self.roles: dict[Tier, AttemptRole] = {}  # a tier's calls' role while not "call"
        self.cancelling: set[Tier] = set()  # tiers whose calls the driver is cancelling
        self._trace: Trace | None = None
        # backend -> release of its in-flight count, while a call on it is under way
        self._holds: dict[str, Callable[[], None]] = {}

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
        return self.ports.capability_gap(self.policy.backend_for(tier), self.turn) is None

    def first_tier(self) -> Tier:
        """The tier to call first."""
        return self.decision.tier

    def route_around(self, tier: Tier) -> Tier | None:
        """The tier to try when ``tier``'s breaker refuses the call, if the policy allows one."""
        other = OTHER_TIER[tier]
        if not self.escalate or (tier == "fast" and not self.policy.escalation.on_backend_error):
            return None
        if other in self.tried or not self.usable(other):
            return None
        return other

    def next_tier(self, tier: Tier, reason: str) -> Tier | None:
        """The tier to try after ``tier`` failed for ``reason``, if any (no side effects)."""
        if reason == "circuit_open":
            return self.route_around(tier)
        other = OTHER_TIER[tier]
        if not self.escalate or other in self.tried or not self.usable(other):
            return None
        if tier == "fast":
            esc = self.policy.escalation
            allowed = esc.on_gate_failure if reason in _DRAFT_FAILURES else esc.on_backend_error
            return other if allowed else None
        # a frontier draft is never sent down to the fast tier; a frontier error may be
        return other if reason == "backend_error" else None

    def move_on(self, tier: Tier, reason: str) -> Tier | None:
        """Record why ``tier`` failed when another tier takes over; return that tier."""
        nxt = self.next_tier(tier, reason)
        if nxt is not None:
            prefix = "frontier_" if tier == "frontier" and reason != "circuit_open" else ""
            self.escalations.append(prefix + reason)
        return nxt

    def will_gate_again(self, tier: Tier) -> bool:
        """Whether a failing draft from ``tier`` could still be replaced (or raised)."""
        return (
            self.next_tier(tier, "gate_failed") is not None
            or self.policy.escalation.when_frontier_fails_gate == "raise"
        )

    # one call -------------------------------------------------------------------------------

    def max_retries(self, name: str) -> int:
        """Retries allowed on backend ``name``."""
        config = self.ports.backend_config(name)
        return config.max_retries if config is not None else 0

    def request(self, name: str, *, turn: Turn | None = None) -> CompletionRequest:
        """The request for backend ``name``, with what is left of the deadline as timeout.

        ``turn`` replaces the turn's own (a panel draft's variant).

        Raises:
            BackendTimeout: The turn's deadline has passed.
        """
        config = self.ports.backend_config(name)
        per_call = config.timeout_s if config is not None else None
        left = self.deadline.remaining(self.ports.now())
        if left is not None and left <= 0:
            raise BackendTimeout("the turn's deadline has passed", backend=name)
        timeout = per_call if left is None else (left if per_call is None else min(per_call, left))
        return CompletionRequest.from_turn(
            turn or self.turn,
            timeout_s=timeout,
            output_tokens=self.policy.task.expected_output_tokens,
        )

    def _attempt(
        self, tier: Tier, backend: str, model: str, latency: float, **fields: Any
    ) -> Attempt:
        self._release(backend)
        index = self.tries.get(backend, 0)
        self.tries[backend] = index + 1
        role = fields.setdefault("role", self.roles.get(tier, "call"))
        if role != "hedge":  # a hedge is not the tier's turn: the fast side may still escalate
            self.tried.add(tier)
        return Attempt(
            tier=tier, backend=backend, model=model, try_index=index, latency_s=latency, **fields
        )

    def add_attempt(
        self, tier: Tier, backend: str, model: str, latency: float, **fields: Any
    ) -> None:
        """Record one attempt (a panel's draft, a cancelled call) with the given fields."""
        self.attempts.append(self._attempt(tier, backend, model, latency, **fields))

    def lift(self, completion: Completion) -> Completion:
        """``completion`` with the tool calls its whole text wrote returned as real calls."""
        lifted = self.ports.gate.lift(completion, self.turn)
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
        verdict = self.ports.gate.evaluate(completion, self.turn)
        return completion, checked_verdict(verdict, call_problems(completion, self.turn))

    def keep(self, tier: Tier, completion: Completion, verdict: Verdict | None) -> Completion:
        """Keep ``completion`` as the turn's answer so far; return what is kept.

        Every path that returns a draft (single, panel, hedge, stream) keeps it here, so
        calls to tools the turn did not offer (or outside its ``tool_choice``, or with
        arguments that are not a JSON object) never reach the caller: they are taken off,
        and the verdict fails on them.
        """
        problems = call_problems(completion, self.turn)
        if problems:
            completion = without_calls(completion)
        self.returned = (tier, completion, checked_verdict(verdict, problems))
        return completion

    def record_error(
        self, tier: Tier, backend: str, model: str, exc: BackendError, latency: float
    ) -> None:
        """Record one failed try (the driver may retry the same backend next)."""
        self.errors.append(exc)
        if isinstance(exc, BackendUnavailable):  # refused by its breaker: no call was made
            role = self.roles.get(tier, "call")
            self.attempts.append(
                Attempt(tier=tier, backend=backend, model="", error=_describe(exc), role=role)
            )
            return
        self.attempts.append(self._attempt(tier, backend, model, latency, error=_describe(exc)))

    def after_error(self, tier: Tier, exc: BackendError) -> Tier | None:
        """``tier`` gave up (its retries are spent): return the next tier, or ``None``."""
        reason = "circuit_open" if isinstance(exc, BackendUnavailable) else "backend_error"
        return self.move_on(tier, reason)

    def record_draft(
        self, tier: Tier, backend: str, model: str, completion: Completion, latency: float
    ) -> Verdict | None:
        """Gate and record a draft without keeping it as the answer; return its verdict."""
        verdict: Verdict | None = None
        if tier == "fast" or self.policy.gate.check_frontier:
            verdict = self.ports.gate.evaluate(completion, self.turn)
        # calls to tools not offered, or arguments not JSON, fail whatever the gate checks
        problems = call_problems(completion, self.turn)
        verdict = checked_verdict(verdict, problems)
        config = self.ports.backend_config(backend)
        cost = cost_of(completion.usage, config.price) if config is not None else 0.0
        self.drafts[len(self.attempts)] = completion
        self.attempts.append(
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
        if nxt is None or self.returned is None:
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
        returned = self.returned
        escalated = self.decision.tier == "fast" and any(e in _ESCALATING for e in self.escalations)
        return Trace(
            turn_id=self.turn.id,
            decision=self.decision,
            attempts=tuple(self.attempts),
            tier=returned[0] if returned else None,
            backend=self._served_backend(returned),
            escalated=escalated,
            escalations=tuple(self.escalations),
            verdict=returned[2] if returned else None,
            latency_s=self.ports.now() - self.started,
            metadata=self.turn.metadata,
            interrupted=self.interrupted,
            record=build_record(self.ports.record, self.turn, self.drafts, len(self.attempts)),
            panel=self.panel,
        )

    def _served_backend(
        self, returned: tuple[Tier, Completion, Verdict | None] | None
    ) -> str | None:
        if returned is None:
            return None
        if self.served_by is not None and self.served_by[1] is returned[1]:
            return self.served_by[0]  # a panel's draft from another fast backend
        return self.policy.backend_for(returned[0])

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
            self.interrupted = "abandoned" if isinstance(exc, GeneratorExit) else type(exc).__name__
        self._trace = self.trace()
        return self._trace

    def tried_backends(self) -> list[str]:
        """The backends tried, in the order they were first tried."""
        return list(dict.fromkeys(a.backend for a in self.attempts))

    def outcome(self) -> RoutedResult:
        """The concluded turn's result.

        Raises:
            AllTiersFailed: No tier produced a completion; carries every attempt.
            GateFailed: The kept draft failed the gate and the policy says ``raise``.
        """
        returned = self.returned
        trace = self._trace
        if trace is None:
            raise RuntimeError("conclude() the turn before asking for its outcome")
        if returned is None:
            tried = ", ".join(self.tried_backends()) or "none"
            # each backend's own last error: the first tier's failure is not hidden behind
            # the next one's
            last = {getattr(e, "backend", "?"): e for e in self.errors}
            errors = "; ".join(str(e) for e in last.values()) or "none"
            raise AllTiersFailed(
                f"no tier produced a completion for turn {self.turn.id} (tried: {tried}); "
                f"{'error' if len(last) < 2 else 'errors'}: {errors}",
                attempts=self.attempts,
                errors=self.errors,
                trace=trace,
            )
        tier, completion, verdict = returned
        logger.info(
            "routed %s tier=%s score=%.2f rule=%s escalated=%s attempts=%d",
            self.turn.id,
            tier,
            self.decision.score,
            self.decision.rule,
            trace.escalated,
            len(self.attempts),
        )
        if (
            verdict is not None
            and not verdict.passed
            and self.policy.escalation.when_frontier_fails_gate == "raise"
        ):
            raise GateFailed(
                f"the {tier} draft of turn {self.turn.id} failed the gate: "
                + "; ".join(verdict.reasons),
                verdict=verdict,
                attempts=self.attempts,
                trace=trace,
            )
        return RoutedResult(
            completion=completion, tier=tier, escalated=trace.escalated, trace=trace
        )

    def record_cut(
        self, tier: Tier, backend: str, model: str, exc: BaseException, latency: float
    ) -> None:
        """Record a call cut short by anything but a backend error (cancelled, abandoned).

        Its error is the interruption.
        """
        if tier in self.cancelling:  # the turn was decided without this call
            self.attempts.append(self._attempt(tier, backend, model, latency, cancelled=True))
            return
        kind = "abandoned" if isinstance(exc, GeneratorExit) else type(exc).__name__
        error = {"type": type(exc).__name__, "message": f"the call was cut short ({kind})"}
        self.attempts.append(self._attempt(tier, backend, model, latency, error=error))
