"""Shared type names and the ``UNSET`` sentinel.

Accepted input unions get a name here and are normalised once, at the boundary.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any, Literal, Union

__all__ = ["UNSET", "BackendKind", "Message", "PolicySource", "Tier", "Unset"]

Tier = Literal["fast", "frontier"]
"""The two tiers: ``fast`` (diffusion) and ``frontier`` (autoregressive)."""

TIERS: tuple[Tier, Tier] = ("fast", "frontier")

OTHER_TIER: dict[Tier, Tier] = {"fast": "frontier", "frontier": "fast"}
"""The tier a turn moves to from each tier (escalation, routing around an open breaker)."""

BackendKind = Literal["diffusion", "autoregressive"]

Message = dict[str, Any]
"""One chat message in OpenAI's shape: ``{"role": ..., "content": ..., ...}``."""

PolicySource = Union[str, "os.PathLike[str]", Mapping[str, Any]]
"""What :func:`tiered_router.load_policy` accepts: a path, YAML text, or a mapping."""


class Unset(enum.Enum):
    """Type of :data:`UNSET`: "not given", as opposed to ``None`` ("turned off")."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset.UNSET
