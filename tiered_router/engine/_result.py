"""A turn's answer: the draft kept so far, and what the concluded turn returns or raises.

:class:`Kept` is the draft a turn keeps until a better one comes. :func:`outcome` reads a
concluded turn (:class:`Concluded`: a :class:`~tiered_router.engine._machine.TurnRun`):
the draft it kept is the result, unless the policy says a failing one is raised
(``GateFailed``); a turn that kept none raises ``AllTiersFailed`` with each backend's own
last error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tiered_router.exceptions import AllTiersFailed, GateFailed

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tiered_router._types import Tier
    from tiered_router.exceptions import BackendError
    from tiered_router.gate import Verdict
    from tiered_router.policy._schema import Policy
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt, Trace
    from tiered_router.turn import Completion, Turn

__all__ = ["Concluded", "Kept", "RoutedResult", "outcome"]

logger = logging.getLogger("tiered_router.router")


@dataclass(frozen=True, slots=True)
class Kept:
    """The draft a turn keeps as its answer so far (the one returned when the turn ends).

    Attributes:
        tier: The tier that drafted it.
        completion: The draft, as the caller would get it.
        verdict: The gate's verdict on it (``None``: not gated).
        backend: The backend that drafted it when it is not the tier's own (a panel's
            draft from another fast backend); ``None``: the tier's backend.
    """

    tier: Tier
    completion: Completion
    verdict: Verdict | None
    backend: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedResult:
    """What a routed turn returns.

    Attributes:
        completion: The completion returned to the caller.
        tier: The tier that produced it (``fast`` or ``frontier``).
        escalated: ``True`` when a fast draft failed the gate or the fast backend failed.
        trace: Everything the router decided and tried.
        shadowed: The quality monitor sent the turn to the frontier tier too, in the
            background, to compare the answers (``monitor:``; the caller's answer is this one).
    """

    completion: Completion
    tier: Tier
    escalated: bool
    trace: Trace
    shadowed: bool = False

    @property
    def decision(self) -> Decision:
        """The routing decision (same as ``trace.decision``)."""
        return self.trace.decision

    @property
    def verdict(self) -> Verdict | None:
        """The gate's verdict on the returned completion."""
        return self.trace.verdict


class Concluded(Protocol):
    """What :func:`outcome` reads of a concluded turn (a ``TurnRun``)."""

    @property
    def policy(self) -> Policy:
        """The routing policy."""
        ...

    @property
    def turn(self) -> Turn:
        """The turn."""
        ...

    @property
    def decision(self) -> Decision:
        """The routing decision."""
        ...

    @property
    def kept(self) -> Kept | None:
        """The draft kept as the answer, if any."""
        ...

    @property
    def attempts(self) -> Sequence[Attempt]:
        """Every attempt, in order."""
        ...

    @property
    def errors(self) -> Sequence[BackendError]:
        """Every backend error, in order."""
        ...


def outcome(run: Concluded, trace: Trace) -> RoutedResult:
    """The result of ``run``, concluded with ``trace``.

    Raises:
        AllTiersFailed: No tier produced a completion; carries every attempt.
        GateFailed: The kept draft failed the gate and the policy says ``raise``.
    """
    kept = run.kept
    if kept is None:
        # the backends tried, in the order they were first tried
        tried = ", ".join(dict.fromkeys(a.backend for a in run.attempts)) or "none"
        # each backend's own last error: the first tier's failure is not hidden behind
        # the next one's
        last = {getattr(e, "backend", "?"): e for e in run.errors}
        errors = "; ".join(str(e) for e in last.values()) or "none"
        raise AllTiersFailed(
            f"no tier produced a completion for turn {run.turn.id} (tried: {tried}); "
            f"{'error' if len(last) < 2 else 'errors'}: {errors}",
            attempts=list(run.attempts),
            errors=list(run.errors),
            trace=trace,
        )
    if logger.isEnabledFor(logging.INFO):  # its arguments are not even read otherwise
        logger.info(
            "routed %s tier=%s score=%.2f rule=%s escalated=%s attempts=%d",
            run.turn.id,
            kept.tier,
            run.decision.score,
            run.decision.rule,
            trace.escalated,
            len(run.attempts),
        )
    verdict = kept.verdict
    if (
        verdict is not None
        and not verdict.passed
        and run.policy.escalation.when_frontier_fails_gate == "raise"
    ):
        raise GateFailed(
            f"the {kept.tier} draft of turn {run.turn.id} failed the gate: "
            + "; ".join(verdict.reasons),
            verdict=verdict,
            attempts=list(run.attempts),
            trace=trace,
        )
    return RoutedResult(
        completion=kept.completion, tier=kept.tier, escalated=trace.escalated, trace=trace
    )
