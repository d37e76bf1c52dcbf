"""The router's monitor, built only when the policy has a ``monitor:`` section."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tiered_router.engine._shadow import ShadowRunner
    from tiered_router.monitor._monitor import Monitor
    from tiered_router.policy._schema import Policy

__all__ = ["build_monitor"]


class RouterParts(Protocol):
    """What the monitor takes from its router."""

    @property
    def policy(self) -> Policy:
        """The policy (its ``monitor:`` section)."""
        ...

    @property
    def state(self) -> Any:
        """The state store (the memory and safe stores keep the monitor's windows)."""
        ...

    def now(self) -> float:
        """The router's clock, seconds."""
        ...


def build_monitor(router: RouterParts, *, shadows: ShadowRunner) -> Monitor | None:
    """A :class:`~tiered_router.monitor.Monitor` for the router, ``None`` without ``monitor:``.

    The monitor's modules are imported here, on first use: a router without a monitor
    never loads them.
    """
    if router.policy.monitor is None:
        return None
    from tiered_router.monitor._monitor import Monitor

    return Monitor(router.policy, store=router.state, shadows=shadows, clock=router.now)
