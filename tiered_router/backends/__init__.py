"""Backends: the model endpoints behind the tiers.

``openai_compat`` speaks to any OpenAI-compatible server (Mercury 2, OpenAI, vLLM, SGLang,
Ollama, ...); ``presets`` fills in known endpoints; the registry maps a policy's ``type`` to a
factory.
"""

from __future__ import annotations

from tiered_router.backends._base import Backend, CompletionRequest, StreamingBackend

__all__ = ["Backend", "CompletionRequest", "StreamingBackend"]
