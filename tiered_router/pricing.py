"""Cost of a call from the policy's per-backend prices."""

from __future__ import annotations

from tiered_router.policy import Price
from tiered_router.turn import Usage

__all__ = ["cost_of"]


def cost_of(usage: Usage, price: Price) -> float:
    """Return the cost in US dollars of ``usage`` at ``price`` (per million tokens).

    Cached input tokens are billed at ``cached_input_per_mtok`` when the price has one,
    else as plain input.
    """
    cached = usage.cached_input_tokens if price.cached_input_per_mtok is not None else 0
    plain_in = usage.input_tokens - cached
    total = (
        plain_in * price.input_per_mtok
        + cached * (price.cached_input_per_mtok or 0.0)
        + usage.output_tokens * price.output_per_mtok
    )
    return total / 1_000_000
