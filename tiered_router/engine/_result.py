"""What a routed turn returns: :class:`RoutedResult`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.gate import Verdict
    from tiered_router.routing import Decision
    from tiered_router.trace import Trace
    from tiered_router.turn import Completion

__all__ = ["RoutedResult"]


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
