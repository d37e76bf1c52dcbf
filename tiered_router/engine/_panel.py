"""A draft panel's state: what its drafts' answers decide, written into the turn.

The panel is pure, like the machine it serves. Its plan (which drafts to send) is
:mod:`tiered_router.engine._panel_plan`; :class:`Panel` takes the drafts
as the driver reports them (:meth:`Panel.arrived`, :meth:`Panel.failed`), tallies their
answer keys (:func:`tiered_router.panels.tally`) and says when the outcome is decided;
:meth:`Panel.settle` writes every draft into the turn (each an ``Attempt`` with role
``draft``, its answer key, cost and, for the ones still running, ``cancelled``) and returns
the next tier:

- the drafts agree, on the answer and on its exact form (what the caller would receive:
  :func:`tiered_router.panels.exact_form`): the first of those drafts to arrive that passes
  the gate and the offered-calls floor is the answer (the others are in the trace), with
  only the parts its majority gave too (text beside calls, before the answer, thinking,
  reasoning: :func:`tiered_router.panels.majority_only`); none passes -> ``gate_failed``;
- no draft has a checkable answer (prose): the panel says so and the gate decides alone;
- they disagree, or agree only once normalised -> escalation with reason
  ``drafts_disagree``;
- every draft failed -> ``backend_error`` (``circuit_open`` when every breaker refused);
- with a deferral model (``drafts.deferral``), an answer the panel would accept is scored
  over the turn and every draft (:func:`tiered_router.scoring.deferral.deferral_features`,
  each answered draft gated); a score above the kind's threshold escalates with reason
  ``deferred`` (the panel then waits for every draft: the signals count all ``k``).

A draft kept when the panel did not confirm it (``drafts_disagree``, ``deferred``) fails the
check ``panel`` (:func:`~tiered_router.engine._offered.unconfirmed`): it is never returned
as verified, and ``when_frontier_fails_gate: raise`` raises ``GateFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tiered_router.engine._offered import DROPPED_CALLS, call_problems, unconfirmed
from tiered_router.engine._panel_plan import DraftSpec, PanelPlan
from tiered_router.exceptions import (
    BackendError,
    BackendResponseError,
    BackendUnavailable,
)
from tiered_router.panels import (
    AnswerKey,
    DraftView,
    Tally,
    answer_key,
    draft_text,
    exact_form,
    majority_only,
    needed_votes,
    tally,
)
from tiered_router.pricing import cost_of

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.engine._machine import TurnRun
    from tiered_router.gate import Verdict
    from tiered_router.trace import TierFailure
    from tiered_router.turn import Completion, Turn

__all__ = ["Panel"]


@dataclass(frozen=True, slots=True)
class _Arrival:
    spec: DraftSpec
    model: str
    latency: float
    completion: Completion | None = None
    error: BackendError | None = None


class Panel:
    """The drafts of one panel as they come in (see the module docstring)."""

    def __init__(self, plan: PanelPlan, turn: Turn) -> None:
        self.plan = plan
        self.turn = turn
        self.keys: list[AnswerKey | None] = [None] * plan.k
        self.exact: list[str | None] = [None] * plan.k  # what each draft would return
        self.arrivals: list[_Arrival] = []  # in arrival order
        self._failed: set[int] = set()

    def arrived(self, spec: DraftSpec, model: str, completion: Completion, latency: float) -> None:
        """Draft ``spec`` answered."""
        self.keys[spec.index] = answer_key(completion, self.turn)
        self.exact[spec.index] = exact_form(completion, self.turn)
        self.arrivals.append(_Arrival(spec, model, latency, completion=completion))

    def take(self, specs: tuple[DraftSpec, ...], value: Any, model: str, latency: float) -> None:
        """The answer of one request for ``specs``: one draft, or ``n`` choices in order."""
        if isinstance(value, BackendError):
            for spec in specs:
                self.failed(spec, model, value, latency)
            return
        choices = [value.completion_only(), *value.alternatives] if len(specs) > 1 else [value]
        for i, spec in enumerate(specs):
            if i < len(choices):
                self.arrived(spec, model, choices[i], latency)
            else:
                missing = BackendResponseError(
                    f"the server sent {len(choices)} choices for n={len(specs)}",
                    backend=spec.backend,
                )
                self.failed(spec, model, missing, latency)

    def failed(self, spec: DraftSpec, model: str, exc: BackendError, latency: float) -> None:
        """Draft ``spec`` failed (it counts against agreement)."""
        self._failed.add(spec.index)
        self.arrivals.append(_Arrival(spec, model, latency, error=exc))

    def tally(self) -> Tally:
        """What the drafts in so far say."""
        return tally(
            self.keys,
            k=self.plan.k,
            min_agreement=self.plan.min_agreement,
            failed=self._failed,
            exact=self.exact,  # the panel returns words the majority gave, never merged ones
        )

    @property
    def finished(self) -> bool:
        """Every draft answered or failed."""
        return len(self.arrivals) == self.plan.k

    def decided(self) -> bool:
        """Whether the driver may stop waiting (early decision, or every draft in)."""
        if self.finished:
            return True
        return self.plan.early and self.tally().decided

    # -- settling into the turn ----------------------------------------------------------

    def abandon(
        self,
        run: TurnRun,
        cancelled: list[tuple[DraftSpec, str, float]],
        *,
        reason: str = "the hedged frontier call answered first",
    ) -> None:
        """Record the drafts of a panel the turn no longer needs.

        A hedge answered first, or the turn itself was cut short (the caller cancelled it):
        the drafts that answered are traced with their cost, the others as cancelled.
        """
        index_of = self._record_all(run, {}, cancelled)
        result = self.tally()
        run.panel_found(
            {
                **self._summary(result, index_of, bool(self.arrivals)),
                "agreed": False,
                "reason": reason,
            }
        )

    def _record_all(
        self,
        run: TurnRun,
        verdicts: dict[int, tuple[Completion, Verdict | None]],
        cancelled: list[tuple[DraftSpec, str, float]],
    ) -> dict[int, int]:
        index_of: dict[int, int] = {}
        for arrival in self.arrivals:
            index_of[arrival.spec.index] = len(run.attempts)
            self._record(run, arrival, verdicts.get(arrival.spec.index))
        for spec, model, latency in cancelled:
            index_of[spec.index] = len(run.attempts)
            run.add_attempt("fast", spec.backend, model, latency, role="draft", cancelled=True)
        return index_of

    def settle(self, run: TurnRun, cancelled: list[tuple[DraftSpec, str, float]]) -> Tier | None:
        """Record every draft in ``run`` and return the next tier (``None``: answered).

        Args:
            run: The turn.
            cancelled: The drafts still running when the panel was decided, as
                ``(spec, model, latency)``; they are traced as cancelled.
        """
        result = self.tally()
        answered = [a for a in self.arrivals if a.completion is not None]
        candidates, reason = self._candidates(answered, result)
        verdicts: dict[int, tuple[Completion, Verdict | None]] = {}
        chosen = _choose(run, candidates, verdicts)
        deferred = self._deferred(run, chosen, verdicts)  # (score, threshold), if asked
        if chosen is not None and deferred is not None and deferred[0] > deferred[1]:
            # kept (below) until the frontier answers
            candidates, chosen, reason = [chosen], None, "deferred"
        index_of = self._record_all(run, verdicts, cancelled)
        summary = self._summary(result, index_of, bool(answered))
        if deferred is not None:
            summary["deferral"] = {"score": round(deferred[0], 4), "threshold": deferred[1]}
        run.panel_found(summary)
        if chosen is not None:
            self._keep(run, chosen, verdicts[chosen.spec.index])
            return None
        nxt = run.move_on("fast", reason)
        if run.kept is None and answered:
            # keep a draft (the majority's first) until a better one comes: nothing is lost,
            # and run.keep takes off calls the floor refuses
            first = candidates[0] if candidates else self._leader(answered, result)
            # a draft the panel did not confirm is never kept as verified
            self._keep(run, first, verdicts.get(first.spec.index), why=_doubt(reason, result))
        return nxt

    def _keep(
        self,
        run: TurnRun,
        arrival: _Arrival,
        gated: tuple[Completion, Verdict | None] | None,
        *,
        why: str | None = None,
    ) -> None:
        if gated is None:
            assert arrival.completion is not None
            gated = run.gated(arrival.completion)
        verdict = gated[1] if why is None else unconfirmed(gated[1], why)
        run.keep("fast", gated[0], verdict, backend=arrival.spec.backend)

    def _candidates(
        self, answered: list[_Arrival], result: Tally
    ) -> tuple[list[_Arrival], TierFailure]:
        """The drafts the gate may pick from, in arrival order, and the reason if none passes."""
        if not answered:
            refused = all(isinstance(a.error, BackendUnavailable) for a in self.arrivals)
            return [], "circuit_open" if refused else "backend_error"
        if result.agreed:
            members = set(result.members)
            return self._majority_only([a for a in answered if a.spec.index in members]), (
                "gate_failed"
            )
        if not result.comparable:
            return answered, "gate_failed"  # prose: the panel cannot judge, the gate decides
        return [], "drafts_disagree"

    def _majority_only(self, members: list[_Arrival]) -> list[_Arrival]:
        """The members with only the parts enough of them gave; those that lose none first."""
        needed = needed_votes(self.plan.k, self.plan.min_agreement)
        given = [a.completion for a in members if a.completion is not None]
        said = majority_only(given, self.turn, needed=needed, k=self.plan.k)
        pairs = sorted(zip(members, said, strict=True), key=lambda p: p[1] is not p[0].completion)
        return [a if d is a.completion else replace(a, completion=d) for a, d in pairs]

    def _deferred(
        self,
        run: TurnRun,
        chosen: _Arrival | None,
        verdicts: dict[int, tuple[Completion, Verdict | None]],
    ) -> tuple[float, float] | None:
        """The deferral model's score of an answer the panel would accept, and its threshold."""
        if chosen is None or self.plan.deferral is None:
            return None
        model, threshold = self.plan.deferral
        return model.score(self.turn, self.views(run, verdicts)), threshold

    def views(
        self, run: TurnRun, verdicts: dict[int, tuple[Completion, Verdict | None]]
    ) -> list[DraftView]:
        """Every draft in draft order for the deferral model, each answer gated (``verdicts``)."""
        by_index = {a.spec.index: a for a in self.arrivals}
        out: list[DraftView] = []
        for i in range(self.plan.k):
            arrival = by_index.get(i)
            if arrival is None or arrival.completion is None:
                out.append(DraftView(key=None))
                continue
            if i not in verdicts:
                verdicts[i] = run.gated(arrival.completion)
            verdict = verdicts[i][1]
            passed = None if verdict is None else verdict.passed
            out.append(
                DraftView(key=self.keys[i], text=draft_text(arrival.completion), passed=passed)
            )
        return out

    def _leader(self, answered: list[_Arrival], result: Tally) -> _Arrival:
        for arrival in answered:
            if arrival.spec.index in result.members:
                return arrival
        return answered[0]

    def _record(
        self,
        run: TurnRun,
        arrival: _Arrival,
        gated: tuple[Completion, Verdict | None] | None,
    ) -> None:
        spec = arrival.spec
        if arrival.error is not None:
            run.draft_failed(spec.backend, arrival.model, arrival.error, arrival.latency)
            return
        completion = arrival.completion
        assert completion is not None
        config = run.ports.backend_config(spec.backend)
        key = self.keys[spec.index]
        conversions = completion.conversions
        if gated is not None:
            completion = gated[0]
            conversions = completion.conversions
            if call_problems(completion, run.turn):  # as a single draft's attempt says
                conversions = (*conversions, DROPPED_CALLS)
        run.add_attempt(
            "fast",
            spec.backend,
            arrival.model,
            arrival.latency,
            output=completion,
            role="draft",
            usage=completion.usage,
            cost=cost_of(completion.usage, config.price) if config is not None else 0.0,
            verdict=gated[1] if gated is not None else None,
            conversions=conversions,
            answer_key=_key_dict(key),
        )

    def _summary(self, result: Tally, index_of: dict[int, int], answered: bool) -> dict[str, Any]:
        majority = result.majority
        return {
            "k": self.plan.k,
            "min_agreement": self.plan.min_agreement,
            "agreed": result.agreed,
            "comparable": result.comparable,
            "majority": None if majority is None else majority.value,
            "kind": None if majority is None else majority.kind,
            "share": round(result.share, 4),
            "members": [index_of[i] for i in result.members if i in index_of],
            "reason": result.reason if answered else "every draft failed",
        }


def _doubt(reason: str, result: Tally) -> str | None:
    """Why the panel did not confirm the draft it keeps (``None``: it did not judge it)."""
    if reason == "deferred":
        return "deferred by the deferral model"
    return result.reason if reason == "drafts_disagree" else None


def _key_dict(key: AnswerKey | None) -> dict[str, str] | None:
    if key is None:
        return None
    return {"kind": key.kind, "value": key.value, "detail": key.detail}


def _choose(
    run: TurnRun,
    candidates: list[_Arrival],
    verdicts: dict[int, tuple[Completion, Verdict | None]],
) -> _Arrival | None:
    """The first candidate the gate and the offered-calls floor accept (each gated once)."""
    for arrival in candidates:
        assert arrival.completion is not None
        verdicts[arrival.spec.index] = gated = run.gated(arrival.completion)
        if gated[1] is None or gated[1].passed:
            return arrival
    return None
