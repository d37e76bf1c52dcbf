"""The monitor wing: quality you can watch on your own traffic (the policy's ``monitor:``).

A share of accepted fast answers is also sent to the frontier tier in the background and the
two answers are compared by the panels' "same answer" key, per turn kind; the matched share
over a sliding window and its Wilson score lower bound are kept in the state store (shared
by a fleet on Redis), and with ``enforce: true`` a kind whose bound falls below ``target``
is tightened until it recovers. ``Router.quality()`` returns the figures; ``/metrics``,
traces and ``tiered-router monitor TRACES.jsonl`` show them. See ``docs/monitor.md``.

The wing reads what the engine reports (a turn's run when it ends, the shadow runner's
background calls) and sets a turn's decision before its first call, like the capacity rule;
the engine's state machine knows nothing of it.

Example:
    ```python
    router = Router.from_yaml("policy.yaml")        # with a monitor: section
    result = await router.acomplete(turn)          # result.shadowed: compared in the background
    router.quality()["tools"].lower_bound          # 0.962
    ```

Wing (docs/architecture.md): may import ``_types``, ``turn``, ``policy/``, ``panels/``,
``routing``, ``trace``, ``state/`` and ``engine/``; the router imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.monitor._kinds import Comparison, compare_answers, turn_kind
    from tiered_router.monitor._monitor import Monitor, Sampler, random_sampler
    from tiered_router.monitor._quality import SHADOW_OUTCOMES, KindQuality
    from tiered_router.state import wilson_lower

__all__ = [
    "SHADOW_OUTCOMES",
    "Comparison",
    "KindQuality",
    "Monitor",
    "Sampler",
    "compare_answers",
    "random_sampler",
    "turn_kind",
    "wilson_lower",
]

_HOMES = {
    "Comparison": "_kinds",
    "compare_answers": "_kinds",
    "turn_kind": "_kinds",
    "Monitor": "_monitor",
    "Sampler": "_monitor",
    "random_sampler": "_monitor",
    "SHADOW_OUTCOMES": "_quality",
    "KindQuality": "_quality",
}


def __getattr__(name: str) -> Any:
    # lazy: the router imports this wing's builder; a router without monitor: loads no more
    import importlib

    if name == "wilson_lower":
        from tiered_router.state import wilson_lower

        return wilson_lower
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tiered_router.monitor' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tiered_router.monitor.{home}"), name)
