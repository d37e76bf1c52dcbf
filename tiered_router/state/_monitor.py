"""The quality monitor's shared figures: a sliding window of compared turns per turn kind.

The monitor (:mod:`tiered_router.monitor`) compares a sampled share of accepted fast answers
with the frontier's answer to the same turn, and records each comparison here: matched or
not. A store keeps, per kind, the last ``window`` comparisons (oldest dropped first), their
count and how many matched, and the state the figures put the kind in. The state is a pure
function of those counts and :class:`MonitorRules` (:func:`judge`); the store keeps the last
state only to say, atomically, which record changed it, so that a fleet logs each change
once.

The bound is the Wilson score lower bound of the matched share (one-sided, at the rules'
``z``: 1.645 for a confidence of 0.95), see :func:`wilson_lower`.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "MONITOR_STATES",
    "MonitorStore",
    "MonitorRules",
    "MonitorSnapshot",
    "MonitorState",
    "MonitorWindows",
    "judge",
    "perfect_needs",
    "wilson_lower",
]

MonitorState = Literal["ok", "below_target", "enforcing"]
"""A turn kind's state: ``ok`` (bound at or above target, or too few comparisons to judge),
``below_target`` (bound below target; measured only), ``enforcing`` (bound below target and
the policy tightens the kind)."""

MONITOR_STATES: tuple[MonitorState, ...] = ("ok", "below_target", "enforcing")


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorRules:
    """How a kind's comparisons are judged (from the policy's ``monitor:`` section).

    Attributes:
        window: Comparisons kept per kind (the newest ones).
        min_compared: Comparisons needed before the kind is judged at all.
        target: Least matched share the bound must reach.
        z: The normal quantile of the one-sided confidence (1.645 for 0.95).
        enforce: Whether a kind below target is ``enforcing`` (else ``below_target``).
        ttl_s: Lifetime of a shared store's keys after their last update.
    """

    window: int = 500
    min_compared: int = 30
    target: float = 0.97
    z: float = 1.6448536269514722
    enforce: bool = False
    ttl_s: float = 7 * 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorSnapshot:
    """One kind's figures.

    Attributes:
        kind: The turn kind (``tools``, ``json``, ``final``...).
        compared: Comparisons in the window.
        matched: Those that matched.
        total: Comparisons ever recorded for the kind (in this store).
        state: What the figures say (see :data:`MonitorState`).
        previous: The state before this record (a snapshot read: the same as ``state``).
    """

    kind: str
    compared: int = 0
    matched: int = 0
    total: int = 0
    state: MonitorState = "ok"
    previous: MonitorState = "ok"

    @property
    def changed(self) -> bool:
        """Whether the record that returned this snapshot changed the kind's state."""
        return self.state != self.previous

    @property
    def matched_share(self) -> float:
        """Matched over compared (0 before the first comparison)."""
        return self.matched / self.compared if self.compared else 0.0


def wilson_lower(matched: int, compared: int, z: float) -> float:
    """The Wilson score lower bound of a binomial share (one-sided at quantile ``z``).

    ``(p + z²/2n - z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = matched / compared``;
    0 when nothing was compared. The Redis store's script computes the same expression.
    """
    if compared <= 0:
        return 0.0
    n = float(compared)
    p = matched / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(max(p * (1 - p) / n + z2 / (4 * n * n), 0.0))
    return max((centre - spread) / (1 + z2 / n), 0.0)


def perfect_needs(target: float, z: float) -> int:
    """The fewest comparisons whose bound can reach ``target`` (all of them matched).

    ``n / (n + z²) >= target`` from :func:`wilson_lower` with ``p = 1``: ``n >= z²·target /
    (1 - target)``. Fewer comparisons cannot tell a good kind from a bad one, so the monitor
    never judges a kind on fewer (its ``min_compared`` is at least this).
    """
    if target >= 1:
        return 2**31 - 1
    return max(1, math.ceil(z * z * target / (1 - target) - 1e-9))


def judge(compared: int, matched: int, rules: MonitorRules) -> MonitorState:
    """The state a kind's figures put it in (pure)."""
    if compared < rules.min_compared:
        return "ok"
    if wilson_lower(matched, compared, rules.z) >= rules.target:
        return "ok"
    return "enforcing" if rules.enforce else "below_target"


@dataclass(slots=True)
class _Window:
    bits: deque[bool]
    matched: int = 0
    total: int = 0
    state: MonitorState = "ok"


class MonitorWindows:
    """The in-process monitor windows (kept by :class:`~tiered_router.state.MemoryStateStore`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: dict[str, _Window] = {}

    def record(self, kind: str, matched: bool, *, rules: MonitorRules) -> MonitorSnapshot:
        """Add one comparison to ``kind``'s window; return the figures after it."""
        with self._lock:
            w = self._kinds.get(kind)
            if w is None:
                w = self._kinds[kind] = _Window(bits=deque())
            w.bits.append(matched)
            w.matched += matched
            w.total += 1
            while len(w.bits) > rules.window:
                w.matched -= w.bits.popleft()
            previous = w.state
            w.state = judge(len(w.bits), w.matched, rules)
            return MonitorSnapshot(
                kind=kind,
                compared=len(w.bits),
                matched=w.matched,
                total=w.total,
                state=w.state,
                previous=previous,
            )

    def snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Read ``kind``'s figures."""
        with self._lock:
            w = self._kinds.get(kind)
            if w is None:
                return MonitorSnapshot(kind=kind)
            bits = list(w.bits)[-rules.window :]
            matched = sum(bits)
            state = judge(len(bits), matched, rules)
            return MonitorSnapshot(
                kind=kind,
                compared=len(bits),
                matched=matched,
                total=w.total,
                state=state,
                previous=state,
            )


@runtime_checkable
class MonitorStore(Protocol):
    """A state store that keeps the monitor's windows (memory, Redis and the safe wrapper do).

    A :class:`~tiered_router.state.StateStore` of your own without these methods still
    works: the monitor then keeps its windows in this process.
    """

    def monitor_record(self, kind: str, matched: bool, *, rules: MonitorRules) -> MonitorSnapshot:
        """Add one comparison to ``kind``'s window (atomically); return the figures after it."""
        ...

    def monitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Read ``kind``'s figures."""
        ...

    async def amonitor_record(
        self, kind: str, matched: bool, *, rules: MonitorRules
    ) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_record`."""
        ...

    async def amonitor_snapshot(self, kind: str, *, rules: MonitorRules) -> MonitorSnapshot:
        """Async twin of :meth:`monitor_snapshot`."""
        ...
