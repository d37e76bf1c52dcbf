"""The policy's verification sections: draft panels (``drafts:``) and hedged calls (``hedge:``).

A panel sends ``k`` fast drafts of one turn concurrently and accepts the majority answer
when enough of them give it (:mod:`tiered_router.panels` says what "the same answer" is);
otherwise the turn escalates with reason ``drafts_disagree``. A hedge starts the frontier
call while the fast side is still undecided; the first acceptable answer wins. Both are off
unless their section is given. The full reference is ``docs/policy.md``.

Example:
    ```yaml
    drafts:
      k: 3                        # fast drafts per turn, sent concurrently
      backends: [mercury]         # sampled k times; several names are used in turn
      min_agreement: 0.67         # share of drafts that must give the majority answer
      variants:                   # per-draft instructions (mixed prompts beat repeated ones)
        - ""
        - "Think step by step before you answer."
      when: [tools, json, answer] # which turns get a panel; the others get one draft
      panel_above: 0.4            # a turn scored at or below it gets one draft and the gate
      kinds:                      # per kind of turn, what calibrate chose (optional)
        tools: {k: 4, min_agreement: 0.75}
        answer: {k: 3, min_agreement: 1.0, backends: [mercury]}
      deferral:                   # a model fitted by `tiered-router fit-scorer` (optional)
        path: deferral.json
        threshold: 0.35           # escalate an accepted panel answer scored above it
    hedge:
      after_s: 1.5                # start the frontier call 1.5 s into the fast side...
      band: 0.05                  # ...or at once when the score is this close to the threshold
    ```

"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tiered_router.policy._base import FieldErrors, Loc, Model

__all__ = [
    "PANEL_TURNS",
    "DeferralConfig",
    "DraftsConfig",
    "HedgeConfig",
    "KindDrafts",
    "PanelTurn",
    "TurnKind",
    "in_zone",
]

PanelTurn = Literal["tools", "json", "answer", "all"]
"""A kind of turn that gets a panel: ``tools`` (tools offered), ``json`` (a JSON
``response_format``), ``answer`` (the prompt asks for a checkable final answer: options,
a number, ``\\boxed{}``, "the answer is"), ``all`` (every fast turn)."""

PANEL_TURNS: tuple[PanelTurn, ...] = ("tools", "json", "answer", "all")
_DEFAULT_WHEN: tuple[PanelTurn, ...] = ("tools", "json", "answer")


TurnKind = Literal["tools", "json", "answer"]
"""A kind of turn ``drafts.kinds`` can set a panel for (a turn is the first it matches:
:func:`tiered_router.panels.turn_kind`)."""


def in_zone(score: float | None, above: float | None) -> bool:
    """Whether a turn scored ``score`` is in the one-draft zone that ends at ``above``.

    What ``panel_above`` means, for the engine and every replay of it: at or below ``above``;
    ``None`` or ``0`` is no zone, and an unknown score is never in one.
    """
    return above is not None and above > 0 and score is not None and score <= above


class KindDrafts(Model):
    """The panel of one kind of turn (``drafts.kinds.<kind>``): what ``calibrate`` chose.

    Unset fields are the ``drafts:`` section's own.
    """

    k: int | None = Field(default=None, ge=1, le=16)
    """Drafts for this kind of turn (1: one draft and the gate)."""
    min_agreement: float | None = Field(default=None, gt=0, le=1)
    """Share of the drafts that must give the majority answer."""
    backends: list[str] | None = None
    """Fast backends drafting this kind of turn, used in turn."""
    deferral_threshold: float | None = Field(default=None, ge=0, le=1)
    """This kind's ``drafts.deferral.threshold`` (``calibrate --write`` sets it)."""
    panel_above: float | None = Field(default=None, ge=0, le=1)
    """This kind's ``drafts.panel_above`` (unset: the section's; ``0``: no zone for this kind,
    whatever the section's; ``calibrate --write`` sets it)."""


class DeferralConfig(Model):
    """A deferral model asked after the panel (``drafts.deferral``).

    The model (``tiered-router fit-scorer`` on a policy with ``drafts:``) reads the turn's
    prompt features and what the drafts say beyond their majority, and returns P(the
    panel's answer is wrong); an answer the panel would accept is escalated with reason
    ``deferred`` when that score is above ``threshold``. With a deferral model the panel
    waits for every draft (the signals are computed over all ``k``).
    """

    path: str = Field(min_length=1)
    """The model file (JSON) ``fit-scorer --output`` wrote; relative to the working directory."""
    threshold: float = Field(default=1.0, ge=0, le=1)
    """Escalate when the deferral score is above it (1.0: never; ``calibrate`` chooses it)."""


class DraftsConfig(Model):
    """Draft panels: verify fast drafts by their agreement (see the module docstring).

    With one backend (and no ``variants``) the panel samples the same prompt ``k`` times; on
    a server that decodes greedily (SGLang's LLaDA2 / SDAR ignore ``temperature``) the
    drafts would be identical and their agreement would say nothing, so such a policy is
    refused at load: give ``variants`` or a second backend.
    """

    k: int = Field(default=1, ge=1, le=16)
    """Fast drafts per turn, sent concurrently (1: a single draft, no panel)."""
    backends: list[str] = Field(default_factory=list)
    """Fast backends drafting, used in turn (draft ``i`` goes to ``backends[i % len]``); empty:
    the fast tier's backend, sampled ``k`` times."""
    min_agreement: float = Field(default=0.67, gt=0, le=1)
    """Share of the ``k`` drafts that must give the majority answer for it to be accepted
    (compared to two decimals: 2 of 3 meets 0.67)."""
    variants: list[str] = Field(default_factory=list)
    """Per-draft instructions added to the system prompt (draft ``i`` gets
    ``variants[i % len]``; ``""`` leaves its prompt as it is)."""
    when: list[PanelTurn] = Field(default_factory=lambda: list(_DEFAULT_WHEN))
    """Which fast turns get a panel (any listed kind matches); the others get one draft."""
    early: bool = True
    """Decide as soon as the outcome cannot change (with ``k: 3``, two equal drafts accept)
    and cancel the drafts still running (they are traced as cancelled)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature sent with each draft (``None``: the turn's own, or the server's)."""
    n: bool = True
    """Sample a same-prompt panel (one backend, no variants) in one request with ``n = k``
    where the backend's dialect takes ``n``; ``false`` sends ``k`` requests (early decision
    can then cancel the slow ones)."""

    panel_above: float | None = Field(default=None, ge=0, le=1)
    """A fast turn whose routing score is at or below this gets one draft and the gate; the
    panel is for the turns above it (the ones the scorer is less sure of). ``None`` or ``0``:
    every fast turn of a kind with a panel gets it. ``tiered-router calibrate`` chooses it
    per kind (``kinds.<kind>.panel_above``)."""

    deferral: DeferralConfig | None = None
    """A deferral model asked after the panel (see :class:`DeferralConfig`)."""

    kinds: dict[TurnKind, KindDrafts] = Field(default_factory=dict)
    """Per kind of turn (``tools``, ``json``, ``answer``), its own ``k``, ``min_agreement``
    and ``backends`` (``tiered-router calibrate --write`` sets them); a kind listed here gets
    its panel whether or not ``when`` lists it, and ``k: 1`` gives it one draft."""

    @property
    def max_k(self) -> int:
        """The most drafts any turn gets (what a budget reserves)."""
        return max([self.k, *(o.k for o in self.kinds.values() if o.k is not None)])

    def for_kind(self, kind: str) -> tuple[int, float, list[str]]:
        """``(k, min_agreement, backends)`` of a turn of ``kind`` (``k < 2``: no panel).

        ``kind`` is :func:`tiered_router.panels.turn_kind` of the turn; ``when`` is not
        consulted here (the caller checks it for kinds ``kinds`` does not name).
        """
        own = self.kinds.get(kind)  # type: ignore[call-overload]
        if own is None:
            return self.k, self.min_agreement, list(self.backends)
        k = own.k if own.k is not None else self.k
        agreement = own.min_agreement if own.min_agreement is not None else self.min_agreement
        backends = own.backends if own.backends is not None else self.backends
        return k, agreement, list(backends)

    def panel_above_for(self, kind: str) -> float | None:
        """The ``panel_above`` of a turn of ``kind`` (its ``kinds`` entry's, else the section's)."""
        own = self.kinds.get(kind)  # type: ignore[call-overload]
        if own is not None and own.panel_above is not None:
            return float(own.panel_above)
        return self.panel_above

    def deferral_threshold(self, kind: str) -> float | None:
        """The deferral threshold of a turn of ``kind`` (``None``: no deferral model)."""
        if self.deferral is None:
            return None
        own = self.kinds.get(kind)  # type: ignore[call-overload]
        if own is not None and own.deferral_threshold is not None:
            return float(own.deferral_threshold)
        return self.deferral.threshold

    @model_validator(mode="after")
    def _coherent(self) -> DraftsConfig:
        problems: list[tuple[Loc, str]] = []
        if len(set(self.backends)) != len(self.backends):
            problems.append((("backends",), "names a backend twice; list each once"))
        for kind, own in self.kinds.items():
            if own.backends is not None and len(set(own.backends)) != len(own.backends):
                problems.append(
                    (("kinds", kind, "backends"), "names a backend twice; list each once")
                )
        if len(self.variants) > self.k:
            problems.append(
                (("variants",), f"{len(self.variants)} variants for k={self.k} drafts: at most k")
            )
        if problems:
            raise FieldErrors(problems)
        return self


class HedgeConfig(Model):
    """Hedged escalation: start the frontier call while the fast side is undecided.

    At least one trigger is needed. With several, the earliest applies: ``band`` (at once
    when the turn's score is within ``band`` of the threshold), ``after_s`` (a fixed delay),
    ``after_percentile`` (the fast backend's measured latency at that percentile; until it
    has ``min_samples`` calls, ``after_s`` or no hedge). The first acceptable answer wins;
    the other call is cancelled and traced, its cost counted when its usage arrived.
    """

    after_s: float | None = Field(default=None, ge=0)
    """Start the frontier call this many seconds after the fast side started."""
    after_percentile: float | None = Field(default=None, gt=0, lt=100)
    """Start it when the fast side has run longer than this percentile of the fast backend's
    measured latencies (``95``: the 95th percentile)."""
    min_samples: int = Field(default=20, ge=1)
    """Measured fast calls needed before ``after_percentile`` applies."""
    band: float | None = Field(default=None, ge=0, le=1)
    """Start the frontier call at once when ``|score - threshold| <= band``."""

    @model_validator(mode="after")
    def _some_trigger(self) -> HedgeConfig:
        if self.after_s is None and self.after_percentile is None and self.band is None:
            raise FieldErrors(
                [((), "give at least one trigger: after_s, after_percentile or band")]
            )
        return self
