"""The drop-in wing: ``TieredOpenAI`` / ``AsyncTieredOpenAI`` with openai-python's surface.

Owns ``_client`` (the clients and ``wrap_openai``), ``_resources`` (``chat.completions``,
``models``, ...), ``_streams`` (chunk streams), ``_compat`` (openai's errors, raw responses,
``parse``) and ``_wire`` (requests in, completions out, as plain dicts: the proxy shares it and it
never imports the SDK). Imports the router and the root values.

The clients need the openai SDK (the ``openai`` extra); they are imported on first use, so that
``tiered_router.openai._wire`` serves the proxy where the SDK is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.openai._client import (
        AsyncTieredOpenAI,
        AsyncTieredStream,
        TieredOpenAI,
        TieredStream,
        UnknownModel,
        wrap_openai,
    )

__all__ = [
    "AsyncTieredOpenAI",
    "AsyncTieredStream",
    "TieredOpenAI",
    "TieredStream",
    "UnknownModel",
    "wrap_openai",
]


def __getattr__(name: str) -> Any:
    # raises the ImportError that names the extra when the SDK is missing
    if name in __all__:
        from tiered_router.openai import _client

        return getattr(_client, name)
    raise AttributeError(f"module 'tiered_router.openai' has no attribute {name!r}")
