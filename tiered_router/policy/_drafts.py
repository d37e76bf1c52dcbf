"""Draft panels in the policy: the ``drafts:`` section.

A panel sends a fast turn to ``k`` drafts and accepts an answer only when at least
``min_agreement`` of them give the same one (:mod:`tiered_router.panels` says what "the
same" means); otherwise the turn escalates with reason ``drafts_disagree``.

Example:
    ```yaml
    drafts:
      k: 3                      # fast drafts per turn
      backends: [mercury]       # one backend sampled k times, or several used in turn
      min_agreement: 0.67       # 2 of 3
    ```
"""

from __future__ import annotations

from pydantic import Field

from tiered_router.policy._base import Model

__all__ = ["DraftsConfig"]


class DraftsConfig(Model):
    """A panel of fast drafts whose agreement decides escalation.

    Example:
        ```python
        DraftsConfig(k=3, backends=["mercury"], min_agreement=0.67)
        ```
    """

    k: int = Field(default=1, ge=1, le=16)
    """Fast drafts per turn (1: a single draft, no panel)."""
    backends: list[str] = Field(default_factory=list)
    """Backends that draft, used in turn (draft ``i`` goes to ``backends[i % len]``); empty:
    the fast tier's backend for every draft."""
    min_agreement: float = Field(default=0.67, gt=0, le=1)
    """Share of the ``k`` drafts that must give the majority answer (compared to two
    decimals: 2 of 3 meets 0.67)."""
