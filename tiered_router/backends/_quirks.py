"""Provider quirks: the small differences of one provider's OpenAI-compatible API.

A :class:`Quirks` says what a provider refuses or treats differently (roles, fields, ranges,
``tool_choice`` values); the backend adjusts a request to it and records every change.
:mod:`tiered_router.backends.presets` re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tiered_router.backends._profiles import GENERIC_DIFFUSION

__all__ = [
    "LOCAL_DIFFUSION_QUIRKS",
    "MERCURY_QUIRKS",
    "NO_QUIRKS",
    "QUIRKS",
    "Quirks",
    "resolve_quirks",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Quirks:
    """How one provider differs from OpenAI, and what the backend does about it.

    Out-of-range values are clamped into range with one warning per backend and field
    (the choice that keeps an agent running: a temperature of 0 becomes 0.5, the closest
    the provider allows). With ``strict=True`` they raise :class:`~tiered_router.CapabilityError`
    instead, which the router can escalate.

    Example:
        ```python
        backend = OpenAICompatBackend("m", model="mercury-2", quirks=MERCURY_QUIRKS.with_strict())
        ```

    Attributes:
        name: A label for logs and reprs.
        developer_to_system: Send ``developer`` messages as ``system`` messages.
        temperature_range: Allowed ``temperature``, inclusive.
        max_stop: Most ``stop`` sequences allowed; extra ones are dropped.
        max_tokens_range: Allowed ``max_tokens``, inclusive; ``max_completion_tokens`` is
            sent as ``max_tokens`` (the provider documents only the latter).
        extra_body_fields: Request fields moved from params into ``extra_body``.
        drop_fields: Request fields never sent (Mercury's ``diffusing`` streams drafts that
            replace each other, which an agent cannot use).
        simple_tool_choice: Only ``tool_choice`` ``auto`` and ``required`` are accepted:
            ``none`` is sent as no tools, a named function as ``required`` with only that tool
            (the same meaning either way).
        strict: Raise instead of clamping or dropping.
        stream_usage: Ask for usage in streams (``stream_options.include_usage``).
        tolerate_unfinished_stream: Accept a stream that ends without a ``finish_reason``
            (some small servers send the whole answer in one chunk and stop).

    """

    name: str = "none"
    developer_to_system: bool = False
    temperature_range: tuple[float, float] | None = None
    max_stop: int | None = None
    max_tokens_range: tuple[int, int] | None = None
    extra_body_fields: frozenset[str] = frozenset()
    drop_fields: frozenset[str] = frozenset()
    strict: bool = False
    simple_tool_choice: bool = False
    stream_usage: bool = True
    tolerate_unfinished_stream: bool = False

    def with_strict(self, strict: bool = True) -> Quirks:
        """Return a copy that raises instead of clamping (or clamps, with ``False``)."""
        return replace(self, strict=strict)


NO_QUIRKS = Quirks()
"""A plain OpenAI-compatible endpoint."""

MERCURY_QUIRKS = Quirks(
    name="mercury",
    developer_to_system=True,
    temperature_range=(0.5, 1.0),
    max_stop=4,
    max_tokens_range=(1, 50_000),
    extra_body_fields=frozenset(
        {"reasoning_effort", "reasoning_summary", "reasoning_summary_wait", "realtime"}
    ),
    drop_fields=frozenset({"diffusing"}),
    simple_tool_choice=True,
)
"""Inception Mercury 2."""

LOCAL_DIFFUSION_QUIRKS = Quirks(
    name="local_diffusion",
    extra_body_fields=GENERIC_DIFFUSION,
    tolerate_unfinished_stream=True,
)
"""Local diffusion servers (SGLang, vLLM, dlmserve, dfastllm, ollada, ...)."""

QUIRKS: Mapping[str, Quirks] = {
    "none": NO_QUIRKS,
    "mercury": MERCURY_QUIRKS,
    "local_diffusion": LOCAL_DIFFUSION_QUIRKS,
}
"""Quirks by name, as written in a policy's ``options.quirks``."""


def resolve_quirks(quirks: Quirks | str) -> Quirks:
    """Return the :class:`Quirks` for a name or instance.

    Raises:
        ValueError: For an unknown name; the message lists the known ones.

    """
    if isinstance(quirks, Quirks):
        return quirks
    try:
        return QUIRKS[quirks]
    except KeyError:
        raise ValueError(f"unknown quirks {quirks!r}; known: {', '.join(sorted(QUIRKS))}") from None
