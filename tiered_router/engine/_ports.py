"""The router's adapter to the engine: what a turn needs from its surroundings.

:class:`RouterPorts` is the :class:`~tiered_router.engine._machine.EnginePorts` the router
hands the engine (the policy, the gate, the scorer, the clock, capability lookups, where
traces go) and the :class:`~tiered_router._task_types.TaskHost` it hands a task. It lives
apart from :class:`~tiered_router.Router` so that the router's public face is what a caller
uses (``decide``, ``complete``, ``stream``, ``task``...), not what the engine asks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend
    from tiered_router.engine._latency import LatencyTracker
    from tiered_router.engine._recording import RecordOption
    from tiered_router.gate import QualityGate
    from tiered_router.policy._schema import BackendConfig, Policy
    from tiered_router.scoring import Score, Scorer
    from tiered_router.scoring.deferral import DeferralModel
    from tiered_router.state import StateStore
    from tiered_router.trace import Trace, TraceSink
    from tiered_router.turn import Turn

__all__ = ["RouterPorts"]

logger = logging.getLogger("tiered_router.router")


class RouterPorts:
    """What the engine and a task ask of a router, answered from the router's parts.

    Args:
        policy: The routing policy.
        gate: The quality gate.
        scorer: The scorer.
        record: Whether (and how) traces record requests and outputs.
        clock: The router's clock, seconds.
        backends: The router's backends by name (those injected, and those built so far).
        state: Where breakers and task totals live.
        latency: Measured latency per backend.
        sinks: Where finished traces go.
        deferral: The panels' deferral model (``drafts.deferral``), loaded once.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        gate: QualityGate,
        scorer: Scorer,
        record: RecordOption,
        clock: Callable[[], float],
        backends: Mapping[str, Backend],
        state: StateStore,
        latency: LatencyTracker,
        sinks: Sequence[TraceSink],
        deferral: DeferralModel | None = None,
    ) -> None:
        self.policy = policy
        self.gate = gate
        self.record = record
        self.state = state
        self.latency = latency
        self.deferral = deferral
        self._scorer = scorer
        self._clock = clock
        self._backends = backends
        self._sinks = sinks
        self._configs: dict[str, BackendConfig | None] = {}
        # backend -> its dialect profile, resolved once: a turn asks up to three times
        self._dialects: dict[str, object] = {}

    def score(self, turn: Turn) -> Score:
        """Score ``turn`` with the router's scorer (pure)."""
        return self._scorer.score(turn)

    def now(self) -> float:
        """The router's clock, seconds."""
        return self._clock()

    def emit(self, trace: Trace) -> None:
        """Hand a finished trace to every sink; a failing sink is logged, never raised."""
        self.latency.observe(trace)
        for sink in self._sinks:
            try:
                sink.emit(trace)
            except Exception:  # a broken sink must not lose the turn it reports
                logger.exception("trace sink %r failed on turn %s", sink, trace.turn_id)

    def backend_config(self, name: str) -> BackendConfig | None:
        """Backend ``name``'s policy config with its preset applied, if it has one."""
        if name in self._configs:
            return self._configs[name]
        config = self.policy.backends.get(name)
        if config is not None and config.type == "openai":
            from tiered_router.backends.presets import resolve_config
            from tiered_router.pricing import warn_unpriced

            config = resolve_config(config, backend=name, prices=self.policy.prices)
            if "price" not in config.model_fields_set:
                warn_unpriced(name, model=config.model, base_url=config.base_url)
        self._configs[name] = config
        return config

    def supports_tools(self, name: str) -> bool:
        """Whether backend ``name`` may be sent a turn with tools (its ``tools`` setting)."""
        injected = self._backends.get(name)
        if injected is not None:
            return injected.supports_tools
        config = self.backend_config(name)
        return config.tools if config is not None else True

    def capability_gap(self, name: str, turn: Turn) -> tuple[str, str] | None:
        """Return ``(what, why)`` when backend ``name`` cannot take ``turn``, else ``None``.

        ``what`` is ``tools`` for a ``tools: false`` backend, or what its dialect cannot
        express (``images``, ``tools``, ``response_format``, ``n``). Pure: builds nothing.
        """
        from tiered_router.backends._dialect import DialectProfile, capability_gap

        if turn.tools and not self.supports_tools(name):
            return "tools", f"backend {name!r} cannot call tools (tools: false)"
        dialect = self._dialect(name)
        if not isinstance(dialect, DialectProfile):
            return None
        return capability_gap(
            dialect,
            messages=turn.messages,
            tools=turn.openai_tools(),
            response_format=turn.response_format,
            params=turn.params,
        )

    def multiple_choices(self, name: str) -> bool:
        """Whether backend ``name``'s server samples ``n`` choices in one request.

        Its dialect profile says so (``multiple_choices``, and not ``greedy``); a backend
        without a profile is never asked for ``n``.
        """
        from tiered_router.backends._dialect import DialectProfile

        dialect = self._dialect(name)
        return (
            isinstance(dialect, DialectProfile) and dialect.multiple_choices and not dialect.greedy
        )

    def _dialect(self, name: str) -> object:
        injected = self._backends.get(name)
        if injected is not None:
            return getattr(injected, "dialect", None)
        if name in self._dialects:
            return self._dialects[name]
        config = self.backend_config(name)
        dialect: object = None
        if config is not None and config.type == "openai":
            from tiered_router.backends.presets import dialect_for

            dialect = dialect_for(config, backend=name)  # a PolicyError is raised, not kept
        self._dialects[name] = dialect
        return dialect
