"""The router's monitor, built only when the policy has a ``monitor:`` section."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.engine._shadow import ShadowRunner
    from tiered_router.monitor._monitor import Monitor
    from tiered_router.policy._schema import Policy

__all__ = ["build_monitor"]


def build_monitor(
    policy: Policy, *, store: Any, shadows: ShadowRunner, clock: Callable[[], float]
) -> Monitor | None:
    """A :class:`~tiered_router.monitor.Monitor` for ``policy``, ``None`` without ``monitor:``.

    The monitor's modules are imported here, on first use: a router without a monitor
    never loads them. ``store`` is the router's state store (the memory and safe stores keep
    the monitor's windows).
    """
    if policy.monitor is None:
        return None
    from tiered_router.monitor._monitor import Monitor

    return Monitor(policy, store=store, shadows=shadows, clock=clock)
