"""One routed turn in progress: which tier next, what was tried, what the gate said.

:class:`TurnRun` holds the escalation logic once; the router's async and sync paths (and the
routed streams) drive it and differ only in how they wait and call the backend.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_router._recording import build_record
from tiered_router._types import Tier
from tiered_router.backends._base import Backend, CompletionRequest
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GateFailed,
    _describe,
)
from tiered_router.gate import Verdict
from tiered_router.pricing import cost_of
from tiered_router.resilience import Deadline
from tiered_router.routing import Decision
from tiered_router.trace import Attempt, Trace
from tiered_router.turn import Completion, Turn

if TYPE_CHECKING:
    from tiered_router.router import Router

__all__ = ["RoutedResult", "TurnRun"]

logger = logging.getLogger("tiered_router.router")

_OTHER: dict[Tier, Tier] = {"fast": "frontier", "frontier": "fast"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedResult:
    """What a routed turn returns.

    Attributes:
        completion: The completion returned to the caller.
        tier: The tier that produced it (``fast`` or ``frontier``).
        escalated: ``True`` when a fast draft failed the gate or the fast backend failed.
        trace: Everything the router decided and tried.
    """

    completion: Completion
    tier: Tier
    escalated: bool
    trace: Trace

    @property
    def decision(self) -> Decision:
        """The routing decision (same as ``trace.decision``)."""
        return self.trace.decision

    @property
    def verdict(self) -> Verdict | None:
        """The gate's verdict on the returned completion."""
        return self.trace.verdict


class TurnRun:
    """The state of one routed turn, shared by the async and the sync path."""

    def __init__(
        self, router: Router, turn: Turn, decision: Decision, deadline: Deadline, *, started: float
    ) -> None:
        self.router = router
        self.policy = router.policy
        self.turn = turn
        self.decision = decision
        self.deadline = deadline
        self.started = started
        self.attempts: list[Attempt] = []
        self.errors: list[BackendError] = []
        self.escalations: list[str] = []
        self.tries: dict[str, int] = {}
        self.last: tuple[Tier, Completion, Verdict | None] | None = None
        self.returned: tuple[Tier, Completion, Verdict | None] | None = None
        self.tried: set[Tier] = set()
        self.drafts: dict[int, Completion] = {}  # attempt index -> draft, for recording

    # which tier next ------------------------------------------------------------------------

    def usable(self, tier: Tier) -> bool:
        return self.router.capability_gap(self.policy.backend_for(tier), self.turn) is None

    def first_tier(self) -> Tier:
        return self.decision.tier

    def route_around(self, tier: Tier) -> Tier | None:
        """The tier to try when ``tier``'s breaker refuses the call, if the policy allows one."""
        other = _OTHER[tier]
        if tier == "fast" and not self.policy.escalation.on_backend_error:
            return None
        if other in self.tried or not self.usable(other):
            return None
        return other

    def next_tier(self, tier: Tier, reason: str) -> Tier | None:
        """The tier to try after ``tier`` failed for ``reason``, if any (no side effects)."""
        other = _OTHER[tier]
        if reason == "circuit_open":
            return self.route_around(tier)
        if other in self.tried or not self.usable(other):
            return None
        if tier == "fast":
            esc = self.policy.escalation
            allowed = esc.on_gate_failure if reason == "gate_failed" else esc.on_backend_error
            return other if allowed else None
        # a frontier draft is never sent down to the fast tier; a frontier error may be
        return other if reason == "backend_error" else None

    def _next_after_failure(self, tier: Tier, reason: str) -> Tier | None:
        nxt = self.next_tier(tier, reason)
        if nxt is not None and reason == "circuit_open":
            self.escalations.append(reason)
        elif nxt is not None:
            self.escalations.append(reason if tier == "fast" else f"frontier_{reason}")
        return nxt

    def after_error(self, tier: Tier, exc: BackendError) -> Tier | None:
        reason = "circuit_open" if isinstance(exc, BackendUnavailable) else "backend_error"
        nxt = self._next_after_failure(tier, reason)
        if nxt is None and self.last is not None:
            self.returned = self.last  # an earlier draft failed the gate: keep it, lose nothing
        return nxt

    def after_draft(self, tier: Tier, completion: Completion) -> Tier | None:
        assert self.last is not None
        verdict = self.last[2]
        if verdict is None or verdict.passed:
            self.returned = self.last
            return None
        nxt = self._next_after_failure(tier, "gate_failed")
        if nxt is None:
            self.returned = self.last
        return nxt

    # one call -------------------------------------------------------------------------------

    def max_retries(self, name: str) -> int:
        config = self.router.backend_config(name)
        return config.max_retries if config is not None else 0

    def request(self, name: str) -> CompletionRequest:
        config = self.router.backend_config(name)
        per_call = config.timeout_s if config is not None else None
        left = self.deadline.remaining(self.router._clock())
        if left is not None and left <= 0:
            raise BackendTimeout("the turn's deadline has passed", backend=name)
        timeout = per_call if left is None else (left if per_call is None else min(per_call, left))
        return CompletionRequest.from_turn(self.turn, timeout_s=timeout)

    def _attempt(self, tier: Tier, backend: Backend, latency: float, **fields: Any) -> Attempt:
        name = backend.name
        index = self.tries.get(name, 0)
        self.tries[name] = index + 1
        self.tried.add(tier)
        return Attempt(
            tier=tier,
            backend=name,
            model=backend.model,
            try_index=index,
            latency_s=latency,
            **fields,
        )

    def record_error(self, tier: Tier, backend: Backend, exc: BackendError, latency: float) -> None:
        self.errors.append(exc)
        if isinstance(exc, BackendUnavailable):  # refused by its breaker: no call was made
            self.attempts.append(
                Attempt(tier=tier, backend=backend.name, model="", error=_describe(exc))
            )
            return
        self.attempts.append(self._attempt(tier, backend, latency, error=_describe(exc)))

    def record_draft(
        self, tier: Tier, backend: Backend, completion: Completion, latency: float
    ) -> None:
        verdict: Verdict | None = None
        if tier == "fast" or self.policy.gate.check_frontier:
            verdict = self.router.gate.evaluate(completion, self.turn)
        config = self.router.backend_config(backend.name)
        cost = cost_of(completion.usage, config.price) if config is not None else 0.0
        self.drafts[len(self.attempts)] = completion
        self.attempts.append(
            self._attempt(
                tier,
                backend,
                latency,
                usage=completion.usage,
                cost=cost,
                verdict=verdict,
                conversions=completion.conversions,
            )
        )
        self.last = (tier, completion, verdict)

    # the end --------------------------------------------------------------------------------

    def trace(self, latency: float) -> Trace:
        """The trace of the turn as it stands."""
        returned = self.returned
        escalated = self.decision.tier == "fast" and any(
            e in ("gate_failed", "backend_error", "circuit_open") for e in self.escalations
        )
        return Trace(
            turn_id=self.turn.id,
            decision=self.decision,
            attempts=tuple(self.attempts),
            tier=returned[0] if returned else None,
            backend=self.policy.backend_for(returned[0]) if returned else None,
            escalated=escalated,
            escalations=tuple(self.escalations),
            verdict=returned[2] if returned else None,
            latency_s=latency,
            metadata=self.turn.metadata,
            record=build_record(self.router.record, self.turn, self.drafts, len(self.attempts)),
        )

    def finish(self, latency: float) -> RoutedResult:
        returned = self.returned
        trace = self.trace(latency)
        escalated = trace.escalated
        if returned is None:
            self.router._emit(trace)
            tried = ", ".join(sorted({a.backend for a in self.attempts})) or "none"
            raise AllTiersFailed(
                f"no tier produced a completion for turn {self.turn.id} (tried: {tried}); "
                f"last error: {self.errors[-1] if self.errors else 'none'}",
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
            escalated,
            len(self.attempts),
        )
        if (
            verdict is not None
            and not verdict.passed
            and self.policy.escalation.when_frontier_fails_gate == "raise"
        ):
            self.router._emit(trace)
            raise GateFailed(
                f"the {tier} draft of turn {self.turn.id} failed the gate: "
                + "; ".join(verdict.reasons),
                verdict=verdict,
                attempts=self.attempts,
                trace=trace,
            )
        self.router._emit(trace)
        return RoutedResult(completion=completion, tier=tier, escalated=escalated, trace=trace)
