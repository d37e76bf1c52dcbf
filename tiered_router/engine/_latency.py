"""Measured latencies per backend, replacing the latency models as calls come in.

An agent task's latency is ``Σ tokens_i / throughput_i + tool time``. Before a backend has
answered, the router only has its latency model (``ttft_s + output_tokens / tokens_per_s``,
from the policy, else its preset's dialect profile: Mercury 2 about 1,000 tok/s, LLaDA-8B
on dlmserve about 33 tok/s at batch 1). Every successful call then updates an exponentially
weighted moving average (EWMA) of that backend's measured latency and output tokens, and
the estimate uses the measurement from then on. A canvas server's model bills whole canvases,
and a backend with a known ``max_concurrency`` adds the wait for a slot, from the router's
own count of calls in flight (:attr:`LatencyTracker.in_flight`).

Example:
    ```python
    tracker = LatencyTracker(alpha=0.3)
    tracker.observe(trace)                         # the router does this for every turn
    tracker.expected("llada", model, output_tokens=256)
    ```

"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiered_router.engine._capacity import InFlight, estimate, service_seconds

if TYPE_CHECKING:
    from tiered_router.policy._schema import LatencyModel
    from tiered_router.trace import Trace

__all__ = ["LatencyTracker", "Measured"]

_RECENT = 256


@dataclass(frozen=True, slots=True)
class Measured:
    """The moving averages of one backend.

    Attributes:
        latency_s: EWMA of the call latency, seconds.
        output_tokens: EWMA of the output tokens per call.
        calls: Calls measured.
    """

    latency_s: float
    output_tokens: float
    calls: int

    @property
    def tokens_per_s(self) -> float:
        """Measured throughput (output tokens over latency); 0 when nothing was produced."""
        return self.output_tokens / self.latency_s if self.latency_s > 0 else 0.0


class LatencyTracker:
    """EWMA of the measured latency of each backend (thread-safe).

    Args:
        alpha: Weight of the newest measurement, in (0, 1].
    """

    def __init__(self, *, alpha: float = 0.3) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.in_flight = InFlight()
        """The router's own count of calls in flight per backend (the queue)."""
        self._by_backend: dict[str, Measured] = {}
        self._recent: dict[str, deque[float]] = {}  # the last latencies, for percentiles
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LatencyTracker(alpha={self.alpha}, backends={sorted(self._by_backend)})"

    def observe(self, trace: Trace) -> None:
        """Take every successful attempt of a finished turn into its backend's averages."""
        for attempt in trace.attempts:
            if attempt.ok:
                self.record(attempt.backend, attempt.latency_s, attempt.usage.output_tokens)

    def record(self, backend: str, latency_s: float, output_tokens: int) -> None:
        """Take one measured call into ``backend``'s averages."""
        a = self.alpha
        with self._lock:
            old = self._by_backend.get(backend)
            if old is None:
                new = Measured(latency_s, float(output_tokens), 1)
            else:
                new = Measured(
                    a * latency_s + (1 - a) * old.latency_s,
                    a * output_tokens + (1 - a) * old.output_tokens,
                    old.calls + 1,
                )
            self._by_backend[backend] = new
            recent = self._recent.get(backend)
            if recent is None:
                recent = self._recent[backend] = deque(maxlen=_RECENT)
            recent.append(latency_s)

    def percentile(self, backend: str, q: float, *, min_samples: int = 1) -> float | None:
        """The ``q``-th percentile (0-100) of ``backend``'s recent latencies, seconds.

        ``None`` until ``min_samples`` calls were measured. Nearest rank over the last
        calls (at most 256).
        """
        with self._lock:
            recent = sorted(self._recent.get(backend, ()))
        if not recent or len(recent) < min_samples:
            return None
        rank = max(0, min(len(recent) - 1, -(-len(recent) * q // 100) - 1))
        return recent[int(rank)]

    def measured(self, backend: str) -> Measured | None:
        """The averages of ``backend``, or ``None`` before its first successful call."""
        return self._by_backend.get(backend)

    def expected(
        self,
        backend: str,
        model: LatencyModel,
        *,
        output_tokens: int,
        canvas_tokens: int | None = None,
        max_concurrency: int | None = None,
    ) -> float:
        """Expected seconds of one call: its queue wait plus its service time.

        The service time is the measured average once there is one, else the model (whole
        canvases on a canvas server); the wait counts the calls in flight on the backend
        when its ``max_concurrency`` is known (see :mod:`tiered_router.engine._capacity`).

        Args:
            backend: The backend's name.
            model: Its latency model (policy, else its dialect profile's defaults).
            output_tokens: Output tokens expected, for the model.
            canvas_tokens: Tokens one canvas holds, for the model (``None``: per token).
            max_concurrency: Calls the backend runs at once (``None``: no queue).
        """
        found = self._by_backend.get(backend)
        if found is not None:
            service = found.latency_s
        else:
            service = service_seconds(
                model, output_tokens=output_tokens, canvas_tokens=canvas_tokens
            )
        if max_concurrency is None:
            return service
        return estimate(
            backend=backend,
            in_flight=self.in_flight.count(backend),
            max_concurrency=max_concurrency,
            service_s=service,
        ).total_s
