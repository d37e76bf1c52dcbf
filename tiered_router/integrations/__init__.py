"""Agent-framework adapters, each an optional extra imported only when used.

- LangChain / LangGraph: ``langchain.TieredChatModel``
  (``pip install ".[langchain]"`` from a checkout)
- OpenAI Agents SDK: ``openai_agents.TieredAgentsModel`` and ``TieredModelProvider``
  (``pip install ".[openai-agents]"`` from a checkout)
- pydantic-ai: ``pydantic_ai.TieredPydanticAIModel``
  (``pip install ".[pydantic-ai]"`` from a checkout)

Import from the submodule (``from tiered_router.integrations.langchain import
TieredChatModel``) or from here (``from tiered_router.integrations import TieredChatModel``):
either way the framework is imported on first use, never when ``tiered_router`` is, and a
missing framework raises an ImportError that names the extra to install.

Wing (docs/architecture.md): owns the framework adapters; may import the router, ``engine``,
``openai``, ``routing``, ``trace`` and the root's shared values. Nothing in the package imports
it; a new framework is a module here and an extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router.integrations.langchain import TieredChatModel
    from tiered_router.integrations.openai_agents import TieredAgentsModel, TieredModelProvider
    from tiered_router.integrations.pydantic_ai import TieredPydanticAIModel

__all__ = ["TieredAgentsModel", "TieredChatModel", "TieredModelProvider", "TieredPydanticAIModel"]

_WHERE = {
    "TieredChatModel": "langchain",
    "TieredAgentsModel": "openai_agents",
    "TieredModelProvider": "openai_agents",
    "TieredPydanticAIModel": "pydantic_ai",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
