"""Run a whole policy over recorded outcomes with replay backends and a simulated clock.

Each row is routed by a real :class:`~tiered_router.Router` built from the policy (its
scorer, rules, gate and escalation), whose tier backends are replaced by
:class:`~tiered_router.evaluation.replay.ReplayBackend` s serving the dataset's two models.
That run is the row's *headline* outcome at the policy's threshold. For the threshold sweep
each row is also run down the path it did not take (a router without rules, with a
constant score that forces the tier), so every row has a fast-path and a frontier-path
outcome: two router runs per row in all, never one per threshold.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tiered_router._types import Tier
from tiered_router.evaluation.dataset import Dataset, DatasetError, EvalRow, Outcome
from tiered_router.evaluation.replay import ReplayBackend, SimulatedClock
from tiered_router.evaluation.sweep import PathOutcome, RowRun
from tiered_router.exceptions import AllTiersFailed, GateFailed
from tiered_router.gate import QualityGate, Verdict
from tiered_router.policy._schema import GateConfig, Policy
from tiered_router.pricing import cost_of
from tiered_router.router import Router
from tiered_router.scoring import Score, Scorer
from tiered_router.trace import Attempt, Trace
from tiered_router.turn import Completion, Turn

__all__ = ["PriceSource", "Replay", "run_rows", "score_rows"]

PriceSource = Literal["data", "policy"]
"""Where costs come from: the recorded / list prices of the data, or the policy's prices."""


class _ConstantScorer:
    """Scores every turn the same (forces a tier in the sweep's runs)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def score(self, turn: Turn) -> Score:
        return Score(value=self.value, reasons=("forced for the threshold sweep",))


class _RecordedGate(QualityGate):
    """The policy's gate, except that a draft whose answer was not recorded passes unchecked.

    Some sources keep only the label of an answer (RouteLLM's MMLU): there is no text for the
    checks to look at, so judging it would judge a placeholder.
    """

    def __init__(self, config: GateConfig, dataset: Dataset) -> None:
        super().__init__(config.checks, text_tool_calls=config.text_tool_calls)
        self._dataset = dataset

    def evaluate(self, completion: Completion, turn: Turn) -> Verdict:
        """Return the gate's verdict, or a pass when the answer was not recorded."""
        row = self._dataset.get(turn.id)
        outcome = row.outcomes.get(completion.model) if row is not None else None
        if outcome is not None and not outcome.recorded:
            return Verdict(passed=True)
        return super().evaluate(completion, turn)


@dataclass(frozen=True, kw_only=True)
class Replay:
    """A policy bound to a dataset: which recorded model plays each tier, and how to price.

    Attributes:
        policy: The policy.
        dataset: The recorded outcomes.
        fast_model: Outcome key replayed by the fast tier.
        frontier_model: Outcome key replayed by the frontier tier.
        prices: ``data`` (recorded cost, else the data's list price, else the policy's) or
            ``policy`` (always the policy's prices times the tokens).
        recorded_latency: Use recorded latencies where the data has them (else, and when
            ``False``, the backends' latency models).

    """

    policy: Policy
    dataset: Dataset
    fast_model: str
    frontier_model: str
    prices: PriceSource = "data"
    recorded_latency: bool = True

    @classmethod
    def bind(
        cls,
        policy: Policy,
        dataset: Dataset,
        *,
        fast_model: str | None = None,
        frontier_model: str | None = None,
        prices: PriceSource = "data",
        recorded_latency: bool = True,
    ) -> Replay:
        """Pick the models: explicit, else the dataset's pair, else the policy backends' models.

        Raises:
            DatasetError: When a model is not found in the data.

        """
        chosen: dict[Tier, str] = {}
        wanted: tuple[tuple[Tier, str | None, str | None], ...] = (
            ("fast", fast_model, dataset.fast_model),
            ("frontier", frontier_model, dataset.frontier_model),
        )
        for tier, explicit, default in wanted:
            config = policy.backends[policy.backend_for(tier)]
            from_policy = config.options.get("outcome_model") or config.model
            model = explicit or default or from_policy
            if not model or model not in dataset.models:
                raise DatasetError(
                    f"{dataset.name}: no outcomes for the {tier} tier's model {model!r}; "
                    f"known: {', '.join(dataset.models)}"
                )
            chosen[tier] = model
        return cls(
            policy=policy,
            dataset=dataset,
            fast_model=chosen["fast"],
            frontier_model=chosen["frontier"],
            prices=prices,
            recorded_latency=recorded_latency,
        )

    def model_of(self, tier: Tier) -> str:
        """Return the recorded model replayed by ``tier``."""
        return self.fast_model if tier == "fast" else self.frontier_model

    def outcome_cost(self, outcome: Outcome, model: str, backend: str | None = None) -> float:
        """Cost of one recorded answer, US dollars, by the price rule of :attr:`prices`."""
        usage = outcome.usage or Completion(text=outcome.text or "").usage
        if self.prices == "data":
            if outcome.cost is not None:
                return outcome.cost
            price = self.dataset.prices.get(model)
            if price is not None:
                return cost_of(usage, price)
        config = self.policy.backends.get(backend) if backend else None
        return cost_of(usage, config.price) if config is not None else 0.0

    def router(self, policy: Policy, *, scorer: Scorer | None = None) -> Router:
        """Build a router over replay backends with its own simulated clock.

        The router takes one fast draft per turn: a policy's draft panel is replayed from the
        recorded drafts afterwards (:func:`~tiered_router.evaluation.panel.apply_panel`), and
        its hedge is not replayed (a recorded outcome has one latency, not a race).
        """
        if policy.drafts is not None or policy.hedge is not None:
            policy = policy.model_copy(update={"drafts": None, "hedge": None})
        clock = SimulatedClock()
        gate = _RecordedGate(policy.gate, self.dataset)
        backends = {}
        for tier in ("fast", "frontier"):
            name = policy.backend_for(tier)
            config = policy.backends[name]
            backends[name] = ReplayBackend(
                name,
                self.dataset,
                model=self.model_of(tier),
                clock=clock,
                latency=config.latency,
                prefer_recorded=self.recorded_latency,
                kind=config.kind or ("diffusion" if tier == "fast" else "autoregressive"),
                supports_tools=config.tools,
            )
        return Router(
            policy,
            backends=backends,
            scorer=scorer,
            gate=gate,
            clock=clock,
            sleep=clock.sleep,
            asleep=clock.asleep,
            rng=random.Random(0),
        )

    def forced(self, tier: Tier) -> Router:
        """Build a router without rules that sends every turn to ``tier`` first."""
        scoring = self.policy.scoring.model_copy(
            update={"threshold": 1.0 if tier == "fast" else 0.0}
        )
        policy = self.policy.model_copy(update={"rules": [], "scoring": scoring})
        return self.router(policy, scorer=_ConstantScorer(0.0 if tier == "fast" else 1.0))

    def path(self, router: Router, row: EvalRow) -> tuple[PathOutcome, Trace]:
        """Route one row and read its outcome from the trace."""
        error: str | None = None
        try:
            trace = router.complete(row.turn).trace
        except (AllTiersFailed, GateFailed) as exc:
            assert isinstance(exc.trace, Trace)  # the engine's errors carry the turn's Trace
            trace = exc.trace
            error = f"{type(exc).__name__}: {exc}"
        tier = trace.tier if error is None else None
        quality = 0.0
        if tier is not None:
            answer = row.outcomes.get(self.model_of(tier))
            quality = answer.quality if answer is not None else 0.0
        fast_failed: tuple[str, ...] = ()
        for a in trace.attempts:
            if a.tier == "fast" and a.verdict is not None and not a.verdict.passed:
                fast_failed = a.verdict.failed_checks
                break
        outcome = PathOutcome(
            quality=quality,
            cost=sum(self._attempt_cost(row, a) for a in trace.attempts),
            latency_s=trace.latency_s,
            tier=tier,
            frontier_called=any(_called(a) for a in trace.attempts if a.tier == "frontier"),
            escalated=trace.escalated,
            escalations=trace.escalations,
            failed_checks=fast_failed,
            error=error,
        )
        return outcome, trace

    def _attempt_cost(self, row: EvalRow, attempt: Attempt) -> float:
        if attempt.error is not None:
            return 0.0
        outcome = row.outcomes.get(attempt.model)
        if outcome is None:
            return attempt.cost
        return self.outcome_cost(outcome, attempt.model, attempt.backend)


def _called(attempt: Attempt) -> bool:
    # a circuit-open placeholder records a tier that was skipped, not called
    return not (attempt.error is not None and attempt.error.get("type") == "BackendUnavailable")


def run_rows(replay: Replay, *, progress: Callable[[int], None] | None = None) -> list[RowRun]:
    """Run every row of the replay's dataset through its policy, both paths.

    Args:
        replay: The policy bound to its data.
        progress: Called with 1 after each row (for a progress bar).

    Returns:
        One :class:`RowRun` per row, in dataset order.

    """
    gate = QualityGate.from_config(replay.policy.gate)
    runs: list[RowRun] = []
    with (
        replay.router(replay.policy) as main,
        replay.forced("fast") as fast,
        replay.forced("frontier") as frontier,
    ):
        forced = {"fast": fast, "frontier": frontier}
        for row in replay.dataset.rows:
            runs.append(_run_row(replay, main, forced, gate, row))
            if progress is not None:
                progress(1)
    return runs


def _run_row(
    replay: Replay, main: Router, forced: dict[str, Router], gate: QualityGate, row: EvalRow
) -> RowRun:
    headline, trace = replay.path(main, row)
    decision = trace.decision
    paths: dict[str, PathOutcome] = {}
    if decision.rule is None:
        paths[decision.tier] = headline
    for tier in ("fast", "frontier"):
        if tier not in paths:
            paths[tier] = replay.path(forced[tier], row)[0]
    fast_name = replay.policy.backend_for("fast")
    fast_outcome = row.outcomes.get(replay.fast_model)
    frontier_outcome = row.outcomes.get(replay.frontier_model)
    verdict = None
    if fast_outcome is not None and fast_outcome.recorded and fast_outcome.error is None:
        draft = fast_outcome.completion(model=replay.fast_model, backend=fast_name)
        verdict = gate.evaluate(draft, row.turn).passed
    return RowRun(
        row_id=row.id,
        task_id=row.task_id,
        score=decision.score,
        rule=decision.rule,
        decided=decision.tier,
        headline=headline,
        fast=paths["fast"],
        frontier=paths["frontier"],
        fast_label=fast_outcome.quality if fast_outcome is not None else 0.0,
        frontier_label=frontier_outcome.quality if frontier_outcome is not None else 0.0,
        fast_only_cost=(
            replay.outcome_cost(fast_outcome, replay.fast_model, fast_name)
            if fast_outcome is not None
            else 0.0
        ),
        fast_verdict=verdict,
    )


def score_rows(replay: Replay, rows: Sequence[EvalRow] | None = None) -> list[float]:
    """Return the policy scorer's value for each row (no model call)."""
    with replay.router(replay.policy) as router:
        return [router.decide(r.turn).score for r in rows or replay.dataset.rows]
