"""Routing policy: the schema of policy YAML (version 1) and :func:`load_policy`.

A policy names the backends, maps the two tiers onto them, configures the scorer and its
threshold, lists the rules checked before the threshold, the gate's checks and what to do
when a draft fails. It is validated once, at load time; every problem is a
:class:`~tiered_router.PolicyError` naming the file, the line and the field.

Example:
    ```yaml
    version: 1
    backends:
      mercury: {preset: mercury-2, api_key: "${INCEPTION_API_KEY}"}
      frontier: {type: openai, model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}
    tiers: {fast: mercury, frontier: frontier}
    scoring: {type: heuristic, threshold: 0.6}
    rules:
      - {name: final-answer, when: {final: true}, tier: frontier}
    ```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from tiered_router._types import BackendKind, Tier

__all__ = [
    "BackendConfig",
    "BreakerConfig",
    "EscalationConfig",
    "GateConfig",
    "LatencyModel",
    "Policy",
    "Price",
    "ResilienceConfig",
    "RetryConfig",
    "Rule",
    "RuleCondition",
    "ScoringConfig",
    "Tiers",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Price(_Model):
    """Prices of a backend in US dollars per million tokens."""

    input_per_mtok: float = Field(0.0, ge=0)
    """Price of one million input (prompt) tokens."""
    output_per_mtok: float = Field(0.0, ge=0)
    """Price of one million output (completion) tokens."""
    cached_input_per_mtok: float | None = Field(None, ge=0)
    """Price of one million cached input tokens; ``None`` bills them as plain input."""


class LatencyModel(_Model):
    """How long a backend takes: ``latency = ttft_s + output_tokens / tokens_per_s``.

    Used by offline evaluation and by task latency budgets; measured latencies refine it.
    """

    ttft_s: float = Field(0.3, ge=0)
    """Time to first token, seconds."""
    tokens_per_s: float = Field(100.0, gt=0)
    """Output throughput, tokens per second."""


class BackendConfig(_Model):
    """One model endpoint.

    Example:
        ```yaml
        mercury:
          type: openai
          base_url: https://api.inceptionlabs.ai/v1
          api_key: ${INCEPTION_API_KEY}
          model: mercury-2
          kind: diffusion
        ```
    """

    type: str = "openai"
    """Registered backend type (``openai`` for any OpenAI-compatible endpoint, ``replay``)."""
    preset: str | None = None
    """A named preset that fills defaults: ``mercury-2``, ``openai``, ``local-diffusion``."""
    base_url: str | None = None
    """Endpoint base URL (``.../v1``); ``None`` uses the preset's or the SDK's default."""
    api_key: SecretStr | None = None
    """API key; write ``${ENV_VAR}`` rather than the key itself. Never logged."""
    model: str | None = None
    """Model name sent to the endpoint."""
    kind: BackendKind | None = None
    """``diffusion`` or ``autoregressive``; defaults from the preset, else autoregressive."""
    timeout_s: float | None = Field(60.0, gt=0)
    """Per-call timeout in seconds; ``null`` means only the turn's deadline applies."""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries after the first try, on connection errors, 408, 409, 429 and 5xx."""
    tools: bool = True
    """Whether the backend can call tools; ``false`` keeps tool turns away from it."""
    price: Price = Field(default_factory=Price)
    """Token prices, for the cost in traces."""
    latency: LatencyModel | None = None
    """Expected latency, for evaluation and task latency budgets."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Default chat.completions arguments (``temperature``, ``max_tokens``, ...)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields (``reasoning_effort``, diffusion knobs, ...)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options for non-HTTP backend types (for example ``replay``)."""


class Tiers(_Model):
    """Which backend serves each tier."""

    fast: str
    """Backend name of the fast (diffusion) tier."""
    frontier: str
    """Backend name of the frontier (autoregressive) tier."""


class ScoringConfig(_Model):
    """The scorer and its threshold."""

    type: Literal["heuristic", "learned"] = "heuristic"
    """Scorer: ``heuristic`` (explainable features) or ``learned`` (trained weights)."""
    threshold: float = Field(0.5, ge=0, le=1)
    """A score above it goes to the frontier tier."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Overrides of the heuristic feature weights, by feature name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Scorer options (``learned``: ``path`` of the weights file)."""


class RuleCondition(_Model):
    """Conditions of a rule; all given ones must hold."""

    final: bool | None = None
    """Match the agent's ``final`` signal."""
    min_tools: int | None = Field(None, ge=0)
    """At least this many tools declared."""
    min_prompt_tokens: int | None = Field(None, ge=0)
    """At least this many (approximate) prompt tokens."""
    has_response_format: bool | None = None
    """Whether the turn has a ``response_format``."""
    has_tool_results: bool | None = None
    """Whether the last message is a tool result."""
    step_at_least: int | None = Field(None, ge=0)
    """The agent's step index is at least this."""
    metadata: dict[str, Any] | None = None
    """Every key equals the turn's metadata value."""


class Rule(_Model):
    """A rule, checked in order before the threshold; the first match decides."""

    name: str = Field(min_length=1)
    """Name shown in decisions and traces."""
    when: RuleCondition
    """Conditions; an empty ``when`` matches every turn."""
    tier: Tier
    """Tier to send a matching turn to."""


class GateConfig(_Model):
    """The quality gate's checks.

    Each item is a check name, or a one-key mapping of a name to its options:
    ``[non_empty, {repetition: {max_ratio: 0.5}}, {regex: {pattern: "^ANSWER:"}}]``.
    """

    checks: list[str | dict[str, dict[str, Any]]] = Field(
        default_factory=lambda: [
            "non_empty",
            "not_truncated",
            "no_refusal",
            "repetition",
            "json_schema",
            "tool_arguments",
        ]
    )
    """Checks run on every draft, in order."""
    check_frontier: bool = True
    """Also gate frontier drafts (their verdict lands in the trace)."""


class EscalationConfig(_Model):
    """What happens when a fast draft fails."""

    on_gate_failure: bool = True
    """A fast draft that fails the gate goes to the frontier tier."""
    on_backend_error: bool = True
    """A fast backend that fails after its retries (or is open) goes to the frontier tier."""
    when_frontier_fails_gate: Literal["return", "raise"] = "return"
    """``return`` the draft with its verdict in the trace, or ``raise`` GateFailed."""


class RetryConfig(_Model):
    """Retry backoff: ``min(base_s * 2**n, max_s)`` times a jitter in [0.75, 1.0]."""

    base_s: float = Field(0.5, ge=0)
    """First backoff, seconds."""
    max_s: float = Field(8.0, ge=0)
    """Largest backoff, seconds."""
    retry_after_cap_s: float = Field(60.0, ge=0)
    """Longest server-asked wait honoured; a longer ``Retry-After`` escalates instead."""


class BreakerConfig(_Model):
    """Per-backend circuit breaker (opens on a failure ratio over a sliding window)."""

    enabled: bool = True
    """Whether breakers are used."""
    failure_ratio: float = Field(0.5, gt=0, le=1)
    """Open when more than this share of recent calls failed..."""
    min_calls: int = Field(5, ge=1)
    """...over at least this many calls..."""
    window_s: float = Field(60.0, gt=0)
    """...in this window, seconds."""
    cooldown_s: float = Field(5.0, ge=0)
    """Then stay open this long before letting one trial call through."""


class ResilienceConfig(_Model):
    """Retries, the per-turn deadline and the circuit breaker."""

    deadline_s: float | None = Field(None, gt=0)
    """One deadline per turn, shared by retries and escalation; ``null`` for none."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """Retry backoff settings."""
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    """Circuit breaker settings."""


class Policy(_Model):
    """A whole routing policy (policy YAML version 1).

    Build one from YAML with :func:`load_policy`, or in Python:

    ```python
    policy = Policy(
        backends={"fast": BackendConfig(preset="mercury-2"), "big": BackendConfig(model="gpt-5.2")},
        tiers=Tiers(fast="fast", frontier="big"),
    )
    ```
    """

    version: Literal[1] = 1
    """Schema version; only 1 exists."""
    backends: dict[str, BackendConfig]
    """Backends by name."""
    tiers: Tiers
    """Which backend serves each tier."""
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    """Scorer and threshold."""
    rules: list[Rule] = Field(default_factory=list)
    """Rules checked in order before the threshold."""
    gate: GateConfig = Field(default_factory=GateConfig)
    """The quality gate."""
    escalation: EscalationConfig = Field(default_factory=EscalationConfig)
    """Escalation behaviour."""
    resilience: ResilienceConfig = Field(default_factory=ResilienceConfig)
    """Retries, deadline, circuit breaker."""

    @model_validator(mode="after")
    def _tiers_name_backends(self) -> Policy:
        for tier in ("fast", "frontier"):
            name = getattr(self.tiers, tier)
            if name not in self.backends:
                known = ", ".join(sorted(self.backends)) or "none"
                raise ValueError(
                    f"tiers.{tier}: names backend {name!r}, which is not defined (known: {known})"
                )
        return self

    def backend_for(self, tier: Tier) -> str:
        """Return the backend name serving ``tier``."""
        return self.tiers.fast if tier == "fast" else self.tiers.frontier


def load_policy(source: Any) -> Policy:
    """Load and validate a policy (placeholder replaced by the full loader)."""
    raise NotImplementedError
