"""A draft panel's plan: whether a turn gets a panel, and what each draft is (pure).

:func:`plan_panel` reads the policy's ``drafts:`` (per turn kind: ``k``, ``min_agreement``,
backends, variants, the deferral model, ``panel_above``: the score at or below which a turn
gets one draft) and the backends' capabilities, and says which
drafts to send (:class:`DraftSpec`: backend, prompt variant) and how to count them
(:class:`PanelPlan`); :func:`draft_turn` is the turn one draft sends. The plan is read
before any call: by the flights (:mod:`tiered_router.engine._flight_plan`), by the capacity
rule (a panel's drafts queue behind each other: :func:`own_calls`) and by calibration. The
panel's state once the drafts answer is :mod:`tiered_router.engine._panel`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tiered_router.panels import panel_kinds, turn_kind
from tiered_router.policy._drafts import in_zone

if TYPE_CHECKING:
    from tiered_router.engine._machine import TurnRun
    from tiered_router.policy import Policy
    from tiered_router.policy._drafts import DraftsConfig
    from tiered_router.scoring.deferral import DeferralModel
    from tiered_router.turn import Turn

__all__ = [
    "DraftSpec",
    "PanelPlan",
    "draft_turn",
    "own_calls",
    "panel_kinds",
    "panel_shape",
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
    usable: Callable[[str], bool],
    multiple_choices: Callable[[str], bool] | None = None,
    deferral: DeferralModel | None = None,
    score: float | None = None,
) -> PanelPlan | None:
    """The panel of a fast turn, or ``None`` for a single draft (pure).

    Args:
        policy: The policy (its ``drafts:``).
        turn: The turn.
        usable: ``usable(backend) -> bool``: whether a backend can take the turn at all.
        multiple_choices: ``(backend) -> bool``: whether its server samples ``n`` choices
            in one request (its dialect says so); ``None``: never ask for ``n``.
        deferral: The loaded ``drafts.deferral`` model (the router reads it once).
        score: The turn's routing score: at or below the kind's ``panel_above`` the turn
            gets one draft (:func:`panel_shape`; ``None``: the panel whatever the score).
    """
    drafts = policy.drafts
    shape = None if drafts is None else panel_shape(drafts, turn, score)
    if drafts is None or shape is None:
        return None
    kind, k, min_agreement, backends = shape
    names = [n for n in (backends or [policy.tiers.fast]) if usable(n)]
    if not names:
        return None
    variants = drafts.variants or [""]
    defer = _deferral(drafts, kind, k, deferral)
    return PanelPlan(
        drafts=_specs(names, variants, k),
        min_agreement=min_agreement,
        early=drafts.early and defer is None,
        deferral=defer,
        temperature=drafts.temperature,
        n=drafts.n and _one_request(names, variants, multiple_choices),
    )


def panel_shape(
    drafts: DraftsConfig, turn: Turn, score: float | None = None
) -> tuple[str, int, float, list[str]] | None:
    """``(kind, k, min_agreement, backends)`` of ``turn``'s panel, or ``None`` for one draft.

    Pure, and blind to the backends' capabilities (:func:`plan_panel` checks those): the kind
    must get a panel (``drafts.kinds`` names it, or ``drafts.when`` matches), of two drafts or
    more, and the turn must be scored above the kind's ``panel_above`` (``None`` or ``0``: no
    zone; ``score`` ``None``: the zone is not applied).
    """
    kind = turn_kind(turn)
    if kind not in drafts.kinds and not panel_kinds(turn).intersection(drafts.when):
        return None
    k, min_agreement, backends = drafts.for_kind(kind)
    if k < 2:
        return None
    if in_zone(score, drafts.panel_above_for(kind)):
        return None  # the scorer is sure enough of this turn: one draft and the gate
    return kind, k, min_agreement, backends


def _specs(names: list[str], variants: list[str], k: int) -> tuple[DraftSpec, ...]:
    """``k`` drafts, round-robin over the backends and the prompt variants."""
    return tuple(
        DraftSpec(index=i, backend=names[i % len(names)], variant=variants[i % len(variants)])
        for i in range(k)
    )


def _deferral(
    drafts: DraftsConfig, kind: str, k: int, model: DeferralModel | None
) -> tuple[DeferralModel, float] | None:
    """The deferral model and this kind's threshold, when the panel asks it."""
    threshold = drafts.deferral_threshold(kind)
    # the model reads this panel's signals only if it was fitted on a panel of this size
    if model is None or threshold is None or model.panel.get("k", k) != k:
        return None
    return model, threshold


def _one_request(
    names: list[str], variants: list[str], multiple_choices: Callable[[str], bool] | None
) -> bool:
    """Whether a panel is sampled in one request (one backend, one prompt, ``n`` choices)."""
    if len(set(names)) != 1 or len(set(variants)) != 1 or multiple_choices is None:
        return False
    return bool(multiple_choices(names[0]))


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


def turn_panel(run: TurnRun) -> PanelPlan | None:
    """The panel ``run``'s fast side would send (``None``: one draft); pure."""
    if run.policy.drafts is None or not run.escalate:  # a shadow run: one call, as documented
        return None
    return plan_panel(
        run.policy,
        run.turn,
        usable=lambda name: run.ports.capability_gap(name, run.turn) is None,
        multiple_choices=run.ports.multiple_choices,
        deferral=run.ports.deferral,
        score=run.decision.score,
    )


def own_calls(plan: PanelPlan) -> dict[str, int]:
    """The requests a panel sends each backend: one per draft, or one for all (``n``)."""
    if plan.n:
        return {plan.drafts[0].backend: 1}
    counts: dict[str, int] = {}
    for spec in plan.drafts:
        counts[spec.backend] = counts.get(spec.backend, 0) + 1
    return counts
