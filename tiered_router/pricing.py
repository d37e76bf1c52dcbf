"""What a call costs: the built-in price table, its overrides, and :func:`cost_of`.

A backend's price comes from, first to last:

1. its own ``price:`` in the policy;
2. the policy's ``prices:`` section (model name -> price), which overrides the table;
3. its preset's price (Mercury 2's, or zero for a self-hosted ``local-diffusion`` server);
4. the built-in table below, by preset (endpoint) and model name (a dated snapshot such as
   ``gpt-4o-2024-08-06`` also finds ``gpt-4o``).

A backend with none of these costs $0 in traces, budgets and ``/metrics``; the router then
logs one warning naming the backend, once per process, so the undercount is never silent.

The table lists US dollars per million tokens as published on :data:`PRICES_AS_OF`. Prices
change: check your provider's page and override in YAML when they differ.

Example:
    ```yaml
    prices:                                   # policy-wide overrides, by model name
      gpt-5.2: {input_per_mtok: 1.75, cached_input_per_mtok: 0.175, output_per_mtok: 14}
    backends:
      local: {preset: local-diffusion, model: LLaDA2.0-mini, price: {input_per_mtok: 0.05}}
    ```

"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tiered_router.turn import Usage

if TYPE_CHECKING:
    from tiered_router.policy._schema import Price

    PRICE_TABLE: Mapping[tuple[str, str], Price]
    """The built-in prices by ``(preset, model)``, US dollars per million tokens."""

__all__ = [
    "PRICES_AS_OF",
    "PRICES_SOURCE",
    "PRICE_TABLE",
    "ListedPrice",
    "cost_of",
    "listed_price",
    "table_rows",
    "warn_unpriced",
]

logger = logging.getLogger(__name__)

PRICES_AS_OF = "2026-11-23"
"""When the table's prices were read."""

PRICES_SOURCE = (
    "Inception's Mercury 2 price from its documentation; every other price from LiteLLM's "
    "model price table (model_prices_and_context_window_backup.json in the litellm 1.109.1 "
    "package, read on 2026-11-23), which tracks the providers' public price pages"
)
"""Where the table's prices come from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedPrice:
    """One row of the built-in price table.

    Attributes:
        preset: The endpoint preset the price applies to (``openai``, ``anthropic``, ...).
        model: The model name as sent to that endpoint.
        price: The price in US dollars per million tokens.

    """

    preset: str
    model: str
    price: Price


@functools.cache
def _rows() -> tuple[tuple[str, str, Price], ...]:
    # built on first use: the policy schema (pydantic) stays off the `import Router` path
    from tiered_router.policy._schema import Price

    def _p(inp: float, out: float, cached: float | None = None) -> Price:
        return Price(input_per_mtok=inp, output_per_mtok=out, cached_input_per_mtok=cached)

    return (
        # Inception (PROVIDERS.md: $0.25 in, $0.025 cached in, $0.75 out)
        ("mercury-2", "mercury-2", _p(0.25, 0.75, 0.025)),
        # OpenAI
        ("openai", "gpt-5.4", _p(2.50, 15.00, 0.25)),
        ("openai", "gpt-5.4-mini", _p(0.75, 4.50, 0.075)),
        ("openai", "gpt-5.4-nano", _p(0.20, 1.25, 0.02)),
        ("openai", "gpt-5.2", _p(1.75, 14.00, 0.175)),
        ("openai", "gpt-5.1", _p(1.25, 10.00, 0.125)),
        ("openai", "gpt-5", _p(1.25, 10.00, 0.125)),
        ("openai", "gpt-5-mini", _p(0.25, 2.00, 0.025)),
        ("openai", "gpt-5-nano", _p(0.05, 0.40, 0.005)),
        ("openai", "gpt-4.1", _p(2.00, 8.00, 0.50)),
        ("openai", "gpt-4.1-mini", _p(0.40, 1.60, 0.10)),
        ("openai", "gpt-4.1-nano", _p(0.10, 0.40, 0.025)),
        ("openai", "gpt-4o", _p(2.50, 10.00, 1.25)),
        ("openai", "gpt-4o-mini", _p(0.15, 0.60, 0.075)),
        ("openai", "o3", _p(2.00, 8.00, 0.50)),
        ("openai", "o4-mini", _p(1.10, 4.40, 0.275)),
        # Anthropic (OpenAI-compatible endpoint)
        ("anthropic", "claude-opus-4-5", _p(5.00, 25.00, 0.50)),
        ("anthropic", "claude-sonnet-4-6", _p(3.00, 15.00, 0.30)),
        ("anthropic", "claude-sonnet-4-5", _p(3.00, 15.00, 0.30)),
        ("anthropic", "claude-haiku-4-5", _p(1.00, 5.00, 0.10)),
        # Google Gemini (OpenAI-compatible endpoint)
        ("gemini", "gemini-3.1-pro-preview", _p(2.00, 12.00, 0.20)),
        ("gemini", "gemini-3-flash-preview", _p(0.50, 3.00, 0.05)),
        ("gemini", "gemini-3.1-flash-lite", _p(0.25, 1.50, 0.025)),
        ("gemini", "gemini-2.5-pro", _p(1.25, 10.00, 0.125)),
        ("gemini", "gemini-2.5-flash", _p(0.30, 2.50, 0.03)),
        ("gemini", "gemini-2.5-flash-lite", _p(0.10, 0.40, 0.01)),
        # open models on common hosts
        ("together", "openai/gpt-oss-120b", _p(0.15, 0.60)),
        ("together", "openai/gpt-oss-20b", _p(0.05, 0.20)),
        ("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo", _p(1.04, 1.04)),
        ("together", "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo", _p(0.18, 0.18)),
        ("together", "deepseek-ai/DeepSeek-V3.1", _p(0.60, 1.70)),
        ("together", "moonshotai/Kimi-K2-Instruct", _p(1.00, 3.00)),
        ("groq", "openai/gpt-oss-120b", _p(0.15, 0.60, 0.075)),
        ("groq", "openai/gpt-oss-20b", _p(0.075, 0.30, 0.0375)),
        ("fireworks", "accounts/fireworks/models/gpt-oss-120b", _p(0.15, 0.60, 0.015)),
        ("fireworks", "accounts/fireworks/models/gpt-oss-20b", _p(0.07, 0.30, 0.035)),
        ("fireworks", "accounts/fireworks/models/deepseek-v3p1", _p(0.56, 1.68)),
        ("fireworks", "accounts/fireworks/models/qwen3-235b-a22b-instruct-2507", _p(0.22, 0.88)),
        ("fireworks", "accounts/fireworks/models/kimi-k2-instruct-0905", _p(0.60, 2.50)),
        ("deepinfra", "openai/gpt-oss-120b", _p(0.037, 0.17)),
        ("deepinfra", "openai/gpt-oss-20b", _p(0.03, 0.14)),
        ("deepinfra", "meta-llama/Llama-3.3-70B-Instruct-Turbo", _p(0.10, 0.32)),
        ("deepinfra", "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo", _p(0.02, 0.04)),
        ("deepinfra", "deepseek-ai/DeepSeek-V3.1", _p(0.25, 0.95, 0.216)),
        ("deepinfra", "Qwen/Qwen3-235B-A22B-Instruct-2507", _p(0.09, 0.55)),
        ("deepinfra", "moonshotai/Kimi-K2-Instruct-0905", _p(0.50, 2.00, 0.40)),
    )


@functools.cache
def _table() -> Mapping[tuple[str, str], Price]:
    return MappingProxyType({(preset, model): price for preset, model, price in _rows()})


def __getattr__(name: str) -> Any:
    """``PRICE_TABLE``: the built-in prices by ``(preset, model)``, US dollars per million tokens.

    Built on first use, like the rows it is made of.
    """
    if name == "PRICE_TABLE":
        return _table()
    raise AttributeError(f"module 'tiered_router.pricing' has no attribute {name!r}")


_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


def listed_price(preset: str | None, model: str | None) -> Price | None:
    """Return the built-in price of ``model`` on the endpoint ``preset``, or ``None``.

    A dated snapshot name (``gpt-4o-2024-08-06``, ``claude-haiku-4-5-20251001``) falls back
    to its undated name.

    Example:
        ```python
        listed_price("openai", "gpt-4o-mini-2024-07-18").output_per_mtok   # 0.6
        ```

    """
    if preset is None or not model:
        return None
    found = _table().get((preset, model))
    if found is None:
        found = _table().get((preset, _SNAPSHOT.sub("", model)))
    return found


def table_rows() -> tuple[ListedPrice, ...]:
    """Return the built-in table as rows, in the order listed."""
    return tuple(ListedPrice(preset=p, model=m, price=price) for p, m, price in _rows())


_warned: set[tuple[str, str | None, str | None]] = set()
_warned_lock = threading.Lock()


def warn_unpriced(backend: str, *, model: str | None, base_url: str | None) -> bool:
    """Log one warning (once per process) that ``backend`` has no price; return if it did.

    Args:
        backend: The backend's policy name.
        model: Its model.
        base_url: Its endpoint (``None``: the SDK's default).

    """
    key = (backend, model, base_url)
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    logger.warning(
        "backend %r (model %r) has no price: its calls count as $0 in traces, budgets and "
        "metrics; set price: {input_per_mtok: ..., output_per_mtok: ...} on the backend or "
        "the model under prices: in the policy",
        backend,
        model,
    )
    return True


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
