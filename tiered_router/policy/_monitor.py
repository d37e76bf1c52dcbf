"""The policy's ``monitor:`` section: quality you can watch on your own traffic.

A share of accepted fast answers is also sent to the frontier tier in the background; the
two answers are compared by the panels' "same answer" key per turn kind, and the matched
share's lower confidence bound is compared with ``target``. With ``enforce: true`` a kind
whose bound falls below target is tightened until it is back above. The statistics, the
reaction time and what "matches the frontier" means are in ``docs/monitor.md``.

Example:
    ```yaml
    monitor:
      shadow_rate: 0.05      # share of accepted fast answers also sent to the frontier
      target: 0.97           # least share of them that must match the frontier's answer
      confidence: 0.95       # the lower confidence bound of that share is compared
      enforce: true          # act when the bound falls below target (false: measure only)
      window: 500            # the last 500 compared turns of each kind
      min_compared: 30       # judge a kind only once it has 30 comparisons
      explore: 0.1           # while enforcing, 10 % of the kind's turns still go fast
      tighten: frontier      # frontier | drafts (a stricter panel: tighten_drafts)
    ```

"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from tiered_router.policy._base import FieldErrors, Model

__all__ = ["MONITOR_KINDS", "MonitorConfig", "MonitorKind", "TightenDrafts"]

MonitorKind = Literal["tools", "json", "final", "prose"]
"""A turn kind the monitor keeps figures for: ``tools`` (tools offered), ``json`` (a JSON
``response_format``), ``final`` (the prompt asks for a checkable final answer), ``prose``
(anything else: never comparable, only counted)."""

MONITOR_KINDS: tuple[MonitorKind, ...] = ("tools", "json", "final", "prose")
_COMPARABLE: tuple[MonitorKind, ...] = ("tools", "json", "final")


class TightenDrafts(Model):
    """The stricter panel a kind gets while enforcing with ``tighten: drafts``."""

    k: int = Field(default=5, ge=2, le=16)
    """Fast drafts per turn."""
    min_agreement: float = Field(default=1.0, gt=0, le=1)
    """Share of them that must give the same answer."""


class MonitorConfig(Model):
    """The quality monitor (see the module docstring and ``docs/monitor.md``)."""

    shadow_rate: float = Field(default=0.05, ge=0, le=1)
    """Share of accepted fast answers (chosen by a hash of the turn id) that are also sent
    to the frontier tier in the background and compared."""
    target: float = Field(default=0.97, gt=0, le=1)
    """Least share of accepted fast answers that must match the frontier's."""
    confidence: float = Field(default=0.95, ge=0.5, lt=1)
    """Confidence of the one-sided lower bound (Wilson score) compared with ``target``."""
    enforce: bool = False
    """Tighten a kind whose bound is below target (``false``: measure and report only)."""
    window: int = Field(default=500, ge=10, le=100_000)
    """Comparisons kept per kind: the bound is over the newest ``window`` of them."""
    min_compared: int = Field(default=30, ge=1)
    """Comparisons a kind needs before it is judged (until then it is ``ok``); never fewer
    than a perfect record needs to clear the target, ``ceil(z²·target / (1 - target))``
    (88 for target 0.97 at confidence 0.95)."""
    explore: float = Field(default=0.1, ge=0, le=1)
    """While a kind is enforcing, the share of its turns that still go fast as usual; every
    one of them is shadowed, so the bound can recover."""
    tighten: Literal["frontier", "drafts"] = "frontier"
    """What an enforcing kind's other turns get: the frontier tier, or a stricter draft
    panel (``tighten_drafts``)."""
    tighten_drafts: TightenDrafts = Field(default_factory=TightenDrafts)
    """The panel of ``tighten: drafts``."""
    kinds: list[MonitorKind] = Field(default_factory=lambda: list(_COMPARABLE))
    """Which kinds are shadowed. ``prose`` answers are never comparable: listing it spends
    shadow calls that are only counted (``not_comparable``)."""
    refresh_s: float = Field(default=1.0, ge=0)
    """How long a worker acts on the kinds' states it last read from a shared store before
    reading them again (``0``: on every turn)."""

    @model_validator(mode="after")
    def _coherent(self) -> MonitorConfig:
        from statistics import NormalDist

        z = NormalDist().inv_cdf(self.confidence)
        needs = math.ceil(z * z * self.target / (1 - self.target) - 1e-9) if self.target < 1 else 0
        if self.target >= 1 or needs > self.window:
            raise FieldErrors(
                [
                    (
                        ("window",),
                        f"{self.window} comparisons cannot show target {self.target:g} at "
                        f"confidence {self.confidence:g}: even all of them matched give a lower "
                        f"bound under it; make the window at least "
                        f"{needs if self.target < 1 else 'larger (target 1 is never shown)'}"
                        " or lower target / confidence",
                    )
                ]
            )
        if self.min_compared > self.window:
            raise FieldErrors(
                [
                    (
                        ("min_compared",),
                        f"{self.min_compared} is more than the window ({self.window}): "
                        "the kind would never be judged",
                    )
                ]
            )
        if len(set(self.kinds)) != len(self.kinds):
            raise FieldErrors([(("kinds",), "names a kind twice; list each once")])
        return self
