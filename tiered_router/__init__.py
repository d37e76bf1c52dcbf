"""tiered_router: route an agent's model calls between a fast diffusion tier and a frontier tier."""

from __future__ import annotations

__version__ = "0.1.0"
