"""Queue- and canvas-aware latency, and the ``capacity.<backend>`` rule.

A diffusion server that runs one request at a time (SGLang in dLLM mode, by default) looks
fast until it is busy: at concurrency 100 SGLang's own cookbook measured a mean time to first
token of 84 s. A canvas-based model bills whole canvases: a 20-token reply from
DiffusionGemma costs the same 256-token canvas as a long one. So the expected seconds of a
call on a backend are::

    service = measured EWMA latency                       (once the backend has answered)
            | ttft_s + ceil(tokens / canvas) * canvas / tokens_per_s      (before that)
    wait    = ceil((in_flight + own - 1 - max_concurrency + 1) / max_concurrency) * service
    total   = wait + service

``own`` is the number of calls the turn itself sends the backend: one, or a panel's drafts
(``k`` drafts on a one-slot server are ``k`` queued calls; one request with ``n`` choices is
one). The last of them must fit.

``in_flight`` is the router's own count of calls on that backend (:class:`InFlight`, kept by
the router's latency tracker: held from the moment the dispatcher calls the backend until
the engine records the attempt).
When a fast turn's ``total`` would not fit in what is left of its deadline (or of its task's
latency budget) the router sends it to the frontier tier before any call, with rule
``capacity.<backend>``. A backend without ``max_concurrency`` is never queued. A panel sent
anyway (a pinned turn, a frontier that cannot take the turn) may see its queued drafts time
out: at most ``k - max_concurrency`` such timeouts per backend are the turn's own doing and
neutral for the breaker (:class:`~tiered_router.engine._flight_plan.OwnQueue`).

Example:
    ```python
    est = estimate(backend="llada", in_flight=3, max_concurrency=1, service_s=1.0)
    est.total_s                        # 4.0: three ahead of it, then its own second
    over_capacity(est, left_s=2.5)     # the reason string: it goes to the frontier
    ```

"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tiered_router.engine._machine import TurnRun
    from tiered_router.policy import LatencyModel

__all__ = [
    "InFlight",
    "QueueEstimate",
    "estimate",
    "expected_call",
    "over_capacity",
    "route_by_capacity",
    "service_seconds",
]


class _Measured(Protocol):
    @property
    def latency_s(self) -> float: ...


class TrackerView(Protocol):
    """What the capacity check reads of :class:`~tiered_router.engine._latency.LatencyTracker`.

    (That module imports this one: the tracker keeps an :class:`InFlight` count.)
    """

    @property
    def in_flight(self) -> InFlight:
        """The calls in flight per backend."""
        ...

    def measured(self, backend: str) -> _Measured | None:
        """The backend's measured averages, or ``None`` before its first call."""
        ...


class InFlight:
    """The router's own count of calls in flight per backend (thread-safe)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InFlight({dict(sorted(self._counts.items()))!r})"

    def count(self, backend: str) -> int:
        """Calls on ``backend`` now."""
        return self._counts.get(backend, 0)

    def acquire(self, backend: str) -> Callable[[], None]:
        """Count one call on ``backend``; return its release (calling it twice is harmless)."""
        with self._lock:
            self._counts[backend] = self._counts.get(backend, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if not released:
                    released = True
                    self._counts[backend] -= 1

        return release


def service_seconds(
    model: LatencyModel, *, output_tokens: int, canvas_tokens: int | None = None
) -> float:
    """Seconds one call takes by the latency model; a canvas server bills whole canvases."""
    tokens = max(1, output_tokens)
    if canvas_tokens:
        tokens = math.ceil(tokens / canvas_tokens) * canvas_tokens
    return model.ttft_s + tokens / model.tokens_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueEstimate:
    """The expected seconds of one more call on a backend.

    Attributes:
        backend: The backend's name.
        in_flight: Calls on it now (the router's own count).
        max_concurrency: Calls it runs at once.
        service_s: Seconds one call takes once it runs (measured, else the model).
        wait_s: Seconds the call would wait for a slot.
        own: Calls the turn itself sends (a panel's drafts): they queue behind each other.
    """

    backend: str
    in_flight: int
    max_concurrency: int
    service_s: float
    wait_s: float
    own: int = 1
    """Calls the turn itself sends the backend (a panel's drafts); the last one is estimated."""

    @property
    def total_s(self) -> float:
        """Wait plus service."""
        return self.wait_s + self.service_s


def estimate(
    *, backend: str, in_flight: int, max_concurrency: int, service_s: float, own: int = 1
) -> QueueEstimate:
    """Return the queue-aware estimate of the turn's ``own`` calls, its last one (pure).

    ``own`` calls from one turn (a panel's drafts on one backend) are ``own`` calls the
    backend's queue serves: the last waits behind the others as behind anyone's.
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency!r}")
    ahead = max(0, in_flight + max(own, 1) - 1 - max_concurrency + 1)
    waves = math.ceil(ahead / max_concurrency)
    return QueueEstimate(
        backend=backend,
        in_flight=in_flight,
        max_concurrency=max_concurrency,
        service_s=service_s,
        wait_s=waves * service_s,
        own=max(own, 1),
    )


def over_capacity(
    est: QueueEstimate, *, left_s: float | None, what: str = "deadline"
) -> str | None:
    """Return why the call would not fit in ``left_s`` seconds, or ``None`` when it fits."""
    if left_s is None or est.total_s <= left_s:
        return None
    own = f" + the turn's own {est.own} drafts" if est.own > 1 else ""
    return (
        f"capacity.{est.backend}: {est.in_flight} call(s) in flight{own} on "
        f"{est.max_concurrency} slot(s): ~{est.wait_s:.2f} s queued + ~{est.service_s:.2f} s = "
        f"~{est.total_s:.2f} s, {max(left_s, 0.0):.2f} s left of the turn's {what}"
    )


def _output_tokens(run: TurnRun) -> int:
    params = run.turn.params
    for key in ("max_tokens", "max_completion_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, run.policy.task.expected_output_tokens)
    return run.policy.task.expected_output_tokens


def expected_call(
    run: TurnRun, backend: str, *, latency: TrackerView, own: int = 1
) -> QueueEstimate | None:
    """The queue-aware estimate of ``run``'s ``own`` calls on ``backend`` (its last one).

    ``None`` when the backend's ``max_concurrency`` is not known (its queue is not modelled).
    """
    config = run.ports.backend_config(backend)
    if config is None or config.max_concurrency is None:
        return None
    measured = latency.measured(backend)
    if measured is not None:
        service = measured.latency_s
    else:
        from tiered_router.policy import LatencyModel

        model = config.latency or LatencyModel()
        service = service_seconds(
            model, output_tokens=_output_tokens(run), canvas_tokens=config.canvas_tokens
        )
    return estimate(
        backend=backend,
        in_flight=latency.in_flight.count(backend),
        max_concurrency=config.max_concurrency,
        service_s=service,
        own=own,
    )


def _own_calls(run: TurnRun) -> dict[str, int]:
    """The calls the turn's fast side sends each backend: its panel's drafts, or one."""
    if run.policy.drafts is not None:
        from tiered_router.engine._panel_plan import own_calls, turn_panel

        plan = turn_panel(run)
        if plan is not None:
            return own_calls(plan)
    return {run.decision.backend: 1}


def route_by_capacity(run: TurnRun, *, latency: TrackerView) -> TurnRun:
    """Send a fast turn to the frontier before any call when the fast queue would make it late.

    Late means: the estimate (queue wait plus service) is past what is left of the turn's
    deadline, or of its task's latency budget. A turn's panel is planned with it: ``k``
    drafts on a backend are ``k`` calls its queue serves, and the last must fit too. A
    pinned turn, a turn whose frontier backend cannot take it, and a backend without
    ``max_concurrency`` are left alone.

    Returns:
        ``run``, its decision changed (rule ``capacity.<backend>``) when over capacity.
    """
    decision = run.decision
    if decision.tier != "fast" or decision.rule == "pinned" or not run.usable("frontier"):
        return run
    for backend, own in _own_calls(run).items():
        est = expected_call(run, backend, latency=latency, own=own)  # None: no queue modelled
        why = None if est is None else _late(run, est)
        if est is not None and why is not None:
            run.redecide(
                replace(
                    decision,
                    tier="frontier",
                    backend=run.policy.backend_for("frontier"),
                    rule=f"capacity.{est.backend}",
                    reasons=(why, *decision.reasons),
                )
            )
            break
    return run


def _late(run: TurnRun, est: QueueEstimate) -> str | None:
    """Why ``est`` does not fit the turn's deadline or its task's latency budget, if so."""
    why = over_capacity(est, left_s=run.deadline.remaining(run.ports.now()))
    task = run.task
    if why is None and task is not None and task.max_latency_s is not None:
        left = task.max_latency_s - task.elapsed_s
        why = over_capacity(est, left_s=left, what="task's latency budget")
    return why
