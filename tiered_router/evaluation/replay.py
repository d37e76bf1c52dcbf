"""Replay: a backend that serves recorded outcomes, and a simulated clock for their latency.

A :class:`ReplayBackend` answers a turn with what one recorded model answered on it: it
finds the dataset row by the turn's id (the row id; the turn's ``metadata["row_id"]``), or
else by the content of the conversation, and returns that model's outcome as a
:class:`~tiered_router.Completion`. It advances a :class:`SimulatedClock` by the call's
latency, so the :class:`~tiered_router.Router` built with ``clock=sim_clock`` measures
simulated time in every :class:`~tiered_router.trace.Attempt`::

    clock = SimulatedClock()
    fast = ReplayBackend("fast", dataset, model="mixtral", clock=clock,
                         latency=LatencyModel(ttft_s=0.2, tokens_per_s=1000))
    router = Router(policy, backends={"fast": fast, ...}, clock=clock,
                    sleep=clock.sleep, asleep=clock.asleep)

Latency of a call: the recorded ``latency_s`` when the outcome has one (unless
``prefer_recorded=False``), else ``ttft_s + output_tokens / tokens_per_s`` from the
backend's latency model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tiered_router._types import BackendKind
from tiered_router.backends._base import CompletionRequest
from tiered_router.evaluation.dataset import Dataset, Outcome
from tiered_router.exceptions import BackendError, BackendTimeout, PolicyError
from tiered_router.policy._schema import BackendConfig, LatencyModel
from tiered_router.turn import Completion

__all__ = ["ReplayBackend", "SimulatedClock", "replay_backend_factory", "simulated_latency"]


class SimulatedClock:
    """A clock that only moves when told to: a callable returning the simulated time.

    Pass it as the router's ``clock`` (and its ``sleep`` / ``asleep`` as the router's, so
    retry backoff is simulated too); replay backends advance it by each call's latency.

    Args:
        start: The time to start at, seconds.

    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        """Return the current simulated time, seconds."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward.

        Raises:
            ValueError: When ``seconds`` is negative.

        """
        if seconds < 0:
            raise ValueError(f"SimulatedClock.advance: cannot go back in time ({seconds})")
        self._now += seconds

    def sleep(self, seconds: float) -> None:
        """Sync sleep that only advances the clock."""
        self.advance(max(0.0, seconds))

    async def asleep(self, seconds: float) -> None:
        """Async sleep that only advances the clock."""
        self.advance(max(0.0, seconds))

    def __repr__(self) -> str:
        return f"SimulatedClock(now={self._now:.6f})"


def simulated_latency(
    outcome: Outcome, latency: LatencyModel | None, *, prefer_recorded: bool = True
) -> float:
    """Return the latency of replaying ``outcome``, seconds.

    The recorded latency when there is one (and ``prefer_recorded``), else
    ``ttft_s + output_tokens / tokens_per_s`` (the default :class:`LatencyModel` when
    ``latency`` is ``None``).
    """
    if prefer_recorded and outcome.latency_s is not None:
        return outcome.latency_s
    model = latency or LatencyModel()
    return model.ttft_s + outcome.output_tokens() / model.tokens_per_s


class ReplayBackend:
    """A backend that serves a recorded model's outcomes from a dataset.

    Args:
        name: The backend's policy name.
        dataset: Where the recorded outcomes are.
        model: The outcome key to replay (the recorded model's name).
        clock: Advanced by each call's simulated latency; ``None`` leaves time alone.
        latency: Latency model for outcomes without a recorded latency.
        prefer_recorded: Use recorded latencies when present (``False``: always the model).
        kind: ``diffusion`` or ``autoregressive`` (for traces and reports).
        supports_tools: ``False`` keeps tool turns away from it.

    Raises:
        BackendError: From a call, when the turn has no row in the dataset, the row has no
            outcome for ``model``, or the recorded call failed (``BackendTimeout`` for a
            recorded ``timeout``). None of these is retried.

    """

    def __init__(
        self,
        name: str,
        dataset: Dataset,
        *,
        model: str,
        clock: SimulatedClock | None = None,
        latency: LatencyModel | None = None,
        prefer_recorded: bool = True,
        kind: BackendKind = "autoregressive",
        supports_tools: bool = True,
    ) -> None:
        self.name = name
        self.model = model
        self.kind: BackendKind = kind
        self.supports_tools = supports_tools
        self.dataset = dataset
        self.clock = clock
        self.latency = latency
        self.prefer_recorded = prefer_recorded
        self.calls = 0

    def __repr__(self) -> str:
        return f"ReplayBackend({self.name!r}, model={self.model!r}, rows={len(self.dataset)})"

    def outcome_for(self, request: CompletionRequest) -> Outcome:
        """Return the recorded outcome answering ``request`` (no clock movement).

        Raises:
            BackendError: When there is no row or no outcome for this backend's model.

        """
        row = self.dataset.find(row_id=request.turn_id or None, messages=request.messages)
        if row is None:
            raise BackendError(
                f"no recorded row for turn {request.turn_id!r} in dataset {self.dataset.name!r}",
                backend=self.name,
            )
        outcome = row.outcomes.get(self.model)
        if outcome is None:
            raise BackendError(
                f"row {row.id!r} has no recorded outcome for model {self.model!r}",
                backend=self.name,
            )
        return outcome

    def complete(self, request: CompletionRequest) -> Completion:
        """Return the recorded completion, advancing the clock by its latency."""
        self.calls += 1
        outcome = self.outcome_for(request)
        seconds = simulated_latency(outcome, self.latency, prefer_recorded=self.prefer_recorded)
        if outcome.error is not None:
            if self.clock is not None:
                self.clock.advance(seconds)
            if "timeout" in outcome.error.lower():
                raise BackendTimeout(f"recorded failure: {outcome.error}", backend=self.name)
            raise BackendError(f"recorded failure: {outcome.error}", backend=self.name)
        if request.timeout_s is not None and seconds > request.timeout_s:
            if self.clock is not None:
                self.clock.advance(request.timeout_s)
            raise BackendTimeout(
                f"simulated latency {seconds:.3f}s exceeds the {request.timeout_s:.3f}s left",
                backend=self.name,
            )
        if self.clock is not None:
            self.clock.advance(seconds)
        return outcome.completion(model=self.model, backend=self.name)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Async twin of :meth:`complete` (no real waiting either way)."""
        return self.complete(request)


def replay_backend_factory(
    name: str, config: BackendConfig, /, *, env: Mapping[str, str] | None = None
) -> ReplayBackend:
    """Build a :class:`ReplayBackend` from a policy's backend (``type: replay``).

    Options (``options:`` in the backend's YAML): ``data`` (required), a dataset file or a
    data name as accepted by :func:`~tiered_router.evaluation.sources.load_data`;
    ``outcome_model``, the recorded model to replay (default: the backend's ``model``);
    ``prefer_recorded_latency`` (default true). ``env`` is accepted for the registry's
    factory signature and not used (replay needs no secrets). Built this way the backend
    has no simulated clock, so traces show the (tiny) real time; ``tiered-router eval``
    injects one.

    Example:
        ```yaml
        backends:
          fast:
            type: replay
            model: gpt-4o-mini-2024-07-18-FC
            options: {data: bfcl}
        ```

    Raises:
        PolicyError: When ``data`` is missing or cannot be loaded, or the model is unknown.

    """
    from tiered_router.evaluation.dataset import DatasetError
    from tiered_router.evaluation.sources import load_data

    options: Mapping[str, Any] = config.options
    data = options.get("data")
    if not isinstance(data, (str, os.PathLike)):
        raise PolicyError(
            "a replay backend needs options.data (a dataset file or data name)",
            field=f"backends.{name}.options.data",
        )
    model = options.get("outcome_model") or config.model
    try:
        dataset = load_data(os.fspath(data))
    except DatasetError as exc:
        raise PolicyError(str(exc), field=f"backends.{name}.options.data") from exc
    if not isinstance(model, str) or model not in dataset.models:
        raise PolicyError(
            f"model {model!r} has no outcomes in {dataset.name!r}; known: "
            + ", ".join(dataset.models),
            field=f"backends.{name}.model",
        )
    return ReplayBackend(
        name,
        dataset,
        model=model,
        latency=config.latency,
        prefer_recorded=bool(options.get("prefer_recorded_latency", True)),
        kind=config.kind or "autoregressive",
        supports_tools=config.tools,
    )
