"""Backends: the model endpoints behind the tiers.

``openai_compat`` speaks to any OpenAI-compatible server (Mercury 2, OpenAI, vLLM, SGLang,
Ollama, ...); ``presets`` fills in known endpoints and names each one's dialect profile
(``_dialect``: what request shape its server accepts; ``docs/backends.md``); the registry maps
a policy's ``type`` to a factory and builds backends from presets. Nothing here imports the
``openai`` SDK or the HTTP library until a backend first sends a request.

Wing (docs/architecture.md): owns the backends, presets, dialects and the backend registry;
may import ``_http``, ``calls``, ``policy`` (schema), ``pricing``, the root's shared values and
``evaluation.replay``. A new server: a preset; a new protocol: ``register_backend_type``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tiered_router.backends._base import Backend, CompletionRequest, StreamingBackend

if TYPE_CHECKING:
    from tiered_router.backends._dialect import DialectProfile
    from tiered_router.backends._profiles import DIALECTS
    from tiered_router.backends.openai_compat import OpenAICompatBackend
    from tiered_router.backends.presets import (
        PRESETS,
        Preset,
        resolve_config,
    )
    from tiered_router.backends.registry import (
        BackendFactory,
        BackendRegistry,
        backend_types,
        build_backend,
        from_preset,
        local_diffusion,
        mercury2,
        openai_backend,
        register_backend_type,
    )

__all__ = [
    "DIALECTS",
    "PRESETS",
    "Backend",
    "BackendFactory",
    "BackendRegistry",
    "CompletionRequest",
    "DialectProfile",
    "OpenAICompatBackend",
    "Preset",
    "StreamingBackend",
    "backend_types",
    "build_backend",
    "from_preset",
    "local_diffusion",
    "mercury2",
    "openai_backend",
    "register_backend_type",
    "resolve_config",
]

_LAZY = {
    "OpenAICompatBackend": "openai_compat",
    "DIALECTS": "_profiles",
    "DialectProfile": "_dialect",
    **dict.fromkeys(
        (
            "PRESETS",
            "Preset",
            "resolve_config",
        ),
        "presets",
    ),
    **dict.fromkeys(
        (
            "BackendFactory",
            "BackendRegistry",
            "backend_types",
            "build_backend",
            "from_preset",
            "local_diffusion",
            "mercury2",
            "openai_backend",
            "register_backend_type",
        ),
        "registry",
    ),
}


def __getattr__(name: str) -> Any:
    """Import the backend implementations on first use: the router needs only the protocol."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered_router.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tiered_router.backends.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
