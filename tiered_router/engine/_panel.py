"""A draft panel's plan and state: which drafts to send, and what their answers decide.

The panel is pure, like the machine it serves: :func:`plan_panel` says whether a turn gets
a panel and what each draft is (backend, prompt variant); :class:`Panel` takes the drafts
as the driver reports them (:meth:`Panel.arrived`, :meth:`Panel.failed`), tallies their
answer keys (:func:`tiered_router.panels.tally`) and says when the outcome is decided;
:meth:`Panel.settle` writes every draft into the turn (each an ``Attempt`` with role
``draft``, its answer key, cost and, for the ones still running, ``cancelled``) and returns
the next tier:

- the drafts agree, on the answer and on its exact form (what the caller would receive:
  :func:`tiered_router.panels.exact_form`): the first of those drafts to arrive that passes
  the gate and the offered-calls floor is the answer (the others are in the trace); none
  passes -> ``gate_failed``;
- no draft has a checkable answer (prose): the panel says so and the gate decides alone;
- they disagree, or agree only once normalised -> escalation with reason
  ``drafts_disagree``;
- every draft failed -> ``backend_error`` (``circuit_open`` when every breaker refused);
- with a deferral model (``drafts.deferral``), an answer the panel would accept is scored
  over the turn and every draft (:func:`tiered_router.scoring.deferral.deferral_features`,
  each answered draft gated); a score above the kind's threshold escalates with reason
  ``deferred`` (the panel then waits for every draft: the signals count all ``k``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tiered_router.engine._hedge import Percentile, hedge_delay
from tiered_router.engine._offered import DROPPED_CALLS, call_problems
from tiered_router.exceptions import (
    BackendError,
    BackendResponseError,
    BackendUnavailable,
    _describe,
)
from tiered_router.panels import (
    AnswerKey,
    DraftView,
    Tally,
    answer_key,
    draft_text,
    exact_form,
    panel_kinds,
    tally,
    turn_kind,
)
from tiered_router.pricing import cost_of

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.engine._machine import TurnRun
    from tiered_router.gate import Verdict
    from tiered_router.policy import Policy
    from tiered_router.scoring.deferral import DeferralModel
    from tiered_router.turn import Completion, Turn

__all__ = [
    "DraftSpec",
    "FlightPlan",
    "Panel",
    "PanelPlan",
    "draft_turn",
    "own_calls",
    "panel_kinds",
    "plan_flight",
    "plan_panel",
    "turn_kind",
    "turn_panel",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftSpec:
    """One draft of a panel.

    Attributes:
        index: The draft's position (0-based).
        backend: The backend drafting it.
        variant: The instruction added to its system prompt (``""``: none).
    """

    index: int
    backend: str
    variant: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelPlan:
    """The drafts of one turn's panel and how to count them."""

    drafts: tuple[DraftSpec, ...]
    min_agreement: float
    early: bool
    temperature: float | None
    n: bool = False
    """Sample every draft in one request with ``n = k`` (one backend, one prompt, a
    dialect that takes ``n`` and does not decode greedily)."""
    deferral: tuple[DeferralModel, float] | None = None
    """The deferral model asked after the panel, and the threshold for this turn's kind."""

    @property
    def k(self) -> int:
        """The panel's size."""
        return len(self.drafts)


def plan_panel(
    policy: Policy,
    turn: Turn,
    *,
    usable: Any,
    multiple_choices: Any = None,
    deferral: DeferralModel | None = None,
) -> PanelPlan | None:
    """The panel of a fast turn, or ``None`` for a single draft (pure).

    Args:
        policy: The policy (its ``drafts:``).
        turn: The turn.
        usable: ``usable(backend) -> bool``: whether a backend can take the turn at all.
        multiple_choices: ``(backend) -> bool``: whether its server samples ``n`` choices
            in one request (its dialect says so); ``None``: never ask for ``n``.
        deferral: The loaded ``drafts.deferral`` model (the router reads it once).
    """
    drafts = policy.drafts
    if drafts is None:
        return None
    kind = turn_kind(turn)
    if kind not in drafts.kinds and not panel_kinds(turn).intersection(drafts.when):
        return None
    k, min_agreement, backends = drafts.for_kind(kind)
    if k < 2:
        return None
    names = [n for n in (backends or [policy.tiers.fast]) if usable(n)]
    if not names:
        return None
    variants = drafts.variants or [""]
    specs = tuple(
        DraftSpec(index=i, backend=names[i % len(names)], variant=variants[i % len(variants)])
        for i in range(k)
    )
    same_prompt = len(set(names)) == 1 and len({v for v in variants}) == 1
    threshold = drafts.deferral_threshold(kind)
    defer = None
    # the model reads this panel's signals only if it was fitted on a panel of this size
    if deferral is not None and threshold is not None and deferral.panel.get("k", k) == k:
        defer = (deferral, threshold)
    return PanelPlan(
        drafts=specs,
        min_agreement=min_agreement,
        early=drafts.early and defer is None,
        deferral=defer,
        temperature=drafts.temperature,
        n=drafts.n
        and same_prompt
        and multiple_choices is not None
        and bool(multiple_choices(names[0])),
    )


def draft_turn(
    turn: Turn, spec: DraftSpec, *, temperature: float | None, n: int | None = None
) -> Turn:
    """The turn draft ``spec`` sends: its variant in the system prompt, its temperature.

    ``n``: the whole panel in one request (``n`` choices).
    """
    messages = _with_variant(list(turn.messages), spec.variant) if spec.variant else turn.messages
    params = dict(turn.params)
    if temperature is not None:
        params["temperature"] = temperature
    if n is not None:
        params["n"] = n
    if not spec.variant and temperature is None and n is None:
        return turn
    return replace(turn, messages=messages, params=params)


def _with_variant(messages: list[Any], variant: str) -> list[Any]:
    """``messages`` with ``variant`` added to the system prompt; the operator's text stays.

    A string gets the variant after a blank line, a list of content parts gets it as one
    more text part, an empty prompt becomes the variant; any other form is left as it is and
    the variant follows it as a system message of its own.
    """
    if not messages or messages[0].get("role") != "system":
        return [{"role": "system", "content": variant}, *messages]
    first = dict(messages[0])
    content = first.get("content")
    if isinstance(content, str) and content:
        first["content"] = f"{content}\n\n{variant}"
    elif isinstance(content, list) and content:
        first["content"] = [*content, {"type": "text", "text": variant}]
    elif not content:
        first["content"] = variant
    else:
        return [messages[0], {"role": "system", "content": variant}, *messages[1:]]
    return [first, *messages[1:]]


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
        run.panel = {
            **self._summary(result, index_of, bool(self.arrivals)),
            "agreed": False,
            "reason": reason,
        }

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
        verdicts: dict[int, tuple[Completion, Verdict | None]] = {}
        candidates: list[_Arrival] = []
        if not answered:
            reason = "backend_error"
            if all(isinstance(a.error, BackendUnavailable) for a in self.arrivals):
                reason = "circuit_open"
        elif result.agreed:
            members = set(result.members)
            candidates = [a for a in answered if a.spec.index in members]
            reason = "gate_failed"
        elif not result.comparable:
            candidates = answered  # prose: the panel cannot judge, the gate decides
            reason = "gate_failed"
        else:
            reason = "drafts_disagree"
        chosen: tuple[_Arrival, Completion, Verdict | None] | None = None
        for arrival in candidates:
            assert arrival.completion is not None
            # the gate and the offered-calls floor, as for a single draft
            completion, verdict = run.gated(arrival.completion)
            verdicts[arrival.spec.index] = (completion, verdict)
            if verdict is None or verdict.passed:
                chosen = (arrival, completion, verdict)
                break
        deferred: dict[str, float] | None = None
        if chosen is not None and self.plan.deferral is not None:
            model, threshold = self.plan.deferral
            score = model.score(self.turn, self.views(run, verdicts))
            deferred = {"score": round(score, 4), "threshold": threshold}
            if score > threshold:  # kept (below) until the frontier answers
                candidates, chosen, reason = [chosen[0]], None, "deferred"
        index_of = self._record_all(run, verdicts, cancelled)
        run.panel = self._summary(result, index_of, bool(answered))
        if deferred is not None:
            run.panel["deferral"] = deferred
        if chosen is not None:
            run.served_by = (chosen[0].spec.backend, run.keep("fast", chosen[1], chosen[2]))
            return None
        nxt = run.move_on("fast", reason)
        if run.returned is None and answered:
            # keep a draft (the majority's first) until a better one comes: nothing is lost,
            # and run.keep takes off calls the floor refuses
            first = candidates[0] if candidates else self._leader(answered, result)
            kept = verdicts.get(first.spec.index)
            if kept is None:
                assert first.completion is not None
                kept = run.gated(first.completion)
            run.served_by = (first.spec.backend, run.keep("fast", kept[0], kept[1]))
        return nxt

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
            run.errors.append(arrival.error)
            run.add_attempt(
                "fast",
                spec.backend,
                arrival.model,
                arrival.latency,
                role="draft",
                error=_describe(arrival.error),
            )
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
        run.drafts[len(run.attempts)] = completion
        run.add_attempt(
            "fast",
            spec.backend,
            arrival.model,
            arrival.latency,
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


def _key_dict(key: AnswerKey | None) -> dict[str, str] | None:
    if key is None:
        return None
    return {"kind": key.kind, "value": key.value, "detail": key.detail}


FlightPlan = tuple["PanelPlan | None", "float | None"]
"""A fast turn's panel (``None``: one draft) and hedge delay (``None``: no hedge)."""


def turn_panel(run: TurnRun) -> PanelPlan | None:
    """The panel ``run``'s fast side would send (``None``: one draft); pure."""
    if run.policy.drafts is None or not run.escalate:  # a shadow run: one call, as documented
        return None
    return plan_panel(
        run.policy,
        run.turn,
        usable=lambda name: run.ports.capability_gap(name, run.turn) is None,
        multiple_choices=getattr(run.ports, "multiple_choices", None),
        deferral=getattr(run.ports, "deferral", None),
    )


def own_calls(plan: PanelPlan) -> dict[str, int]:
    """The requests a panel sends each backend: one per draft, or one for all (``n``)."""
    if plan.n:
        return {plan.drafts[0].backend: 1}
    counts: dict[str, int] = {}
    for spec in plan.drafts:
        counts[spec.backend] = counts.get(spec.backend, 0) + 1
    return counts


def plan_flight(run: TurnRun, *, percentile: Percentile) -> FlightPlan | None:
    """The concurrent plan of a turn starting on the fast tier, ``None`` for the usual path."""
    policy = run.policy
    if (policy.drafts is None and policy.hedge is None) or run.first_tier() != "fast":
        return None
    if not run.escalate:  # a shadow run: one call, as documented
        return None
    panel = turn_panel(run)
    hedge = hedge_delay(run, percentile=percentile)
    if panel is None and hedge is None:
        return None
    return panel, hedge
