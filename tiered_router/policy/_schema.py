"""Routing policy: the schema of policy YAML (version 1).

A policy names the backends, maps the two tiers onto them, configures the scorer and its
threshold, lists the rules checked before the threshold, the gate's checks and what to do
when a draft fails. This module is the schema alone: it imports nothing above it.
:func:`tiered_router.load_policy` (:mod:`tiered_router.policy._loader`) reads YAML, interpolates
``${VAR}`` / ``${VAR:-default}`` (``$${`` is a literal ``${``) and validates the policy once,
against this schema and then against what :class:`~tiered_router.Router` would build (gate
checks and their options, the scorer, backend types and presets); every problem is a
:class:`~tiered_router.PolicyError` naming the file, the line and the field. The full
reference is ``docs/policy.md``.

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

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from tiered_router._types import BackendKind, PolicySource, Tier
from tiered_router.policy._base import FieldErrors, Loc, Model, did_you_mean
from tiered_router.policy._drafts import DraftsConfig, HedgeConfig
from tiered_router.policy._monitor import MonitorConfig
from tiered_router.policy._ops import (
    BreakerConfig,
    ClientLimits,
    EscalationConfig,
    ResilienceConfig,
    RetryConfig,
    ServerConfig,
    ShadowConfig,
    StateConfig,
    TaskConfig,
)

__all__ = [
    "BackendConfig",
    "BreakerConfig",
    "ClientLimits",
    "DraftsConfig",
    "EscalationConfig",
    "GateConfig",
    "HedgeConfig",
    "LatencyModel",
    "MonitorConfig",
    "Policy",
    "Price",
    "ResilienceConfig",
    "RetryConfig",
    "Rule",
    "RuleCondition",
    "ScoringConfig",
    "ServerConfig",
    "ShadowConfig",
    "StateConfig",
    "TaskConfig",
    "Tiers",
]

LOADER: list[Callable[..., Policy]] = []
"""Where :meth:`Policy.from_yaml` finds :func:`tiered_router.policy.load_policy`: the face
puts it here when the package is first imported (the schema never imports the loader)."""


class Price(Model):
    """Prices of a backend in US dollars per million tokens."""

    input_per_mtok: float = Field(default=0.0, ge=0)
    """Price of one million input (prompt) tokens."""
    output_per_mtok: float = Field(default=0.0, ge=0)
    """Price of one million output (completion) tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Price of one million cached input tokens; ``None`` bills them as plain input."""


class LatencyModel(Model):
    """How long a backend takes: ``latency = ttft_s + output_tokens / tokens_per_s``.

    Used by offline evaluation and by task latency budgets; measured latencies refine it.
    """

    ttft_s: float = Field(default=0.3, ge=0)
    """Time to first token, seconds."""
    tokens_per_s: float = Field(default=100.0, gt=0)
    """Output throughput, tokens per second."""


class BackendConfig(Model):
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
    """A named preset that fills defaults: ``mercury-2``, ``openai``, ``dlmserve``,
    ``sglang``, ``sglang-gemma``, ``vllm``, ``lmdeploy``, ``diffulex``, ``ollada``,
    ``dfastllm``, ``local-diffusion`` (see ``docs/backends.md``)."""
    base_url: str | None = None
    """Endpoint base URL (``.../v1``); ``None`` uses the preset's or the SDK's default."""
    api_key: SecretStr | None = None
    """API key; write ``${ENV_VAR}`` rather than the key itself. Never logged."""
    api_key_env: str | None = None
    """Environment variable read for the key when the backend is first called (default: the
    preset's). ``api_key: ${VAR}`` with ``VAR`` unset at load time becomes this."""
    model: str | None = None
    """Model name sent to the endpoint."""
    kind: BackendKind | None = None
    """``diffusion`` or ``autoregressive``; defaults from the preset, else autoregressive."""
    timeout_s: float | None = Field(default=60.0, gt=0)
    """Per-call timeout in seconds; ``null`` means only the turn's deadline applies."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries after the first try, on connection errors, 408, 409, 429 and 5xx."""
    tools: bool = True
    """Whether the backend can call tools; ``false`` keeps tool turns away from it."""
    price: Price = Field(default_factory=Price)
    """Token prices, for the cost in traces."""
    latency: LatencyModel | None = None
    """Expected latency, for evaluation and task latency budgets."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests the server runs at once (default: its preset's profile: SGLang in dLLM mode
    1, vLLM's DiffusionGemma 8, dlmserve 8). With it, latency estimates count the queue
    and a turn the queue would make miss its deadline goes to the frontier
    (rule ``capacity.<backend>``)."""
    canvas_tokens: int | None = Field(default=None, ge=1)
    """Tokens one denoising canvas holds (DiffusionGemma: 256): estimates bill whole
    canvases (default: its preset's profile)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Default chat.completions arguments (``temperature``, ``max_tokens``, ...)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields (``reasoning_effort``, diffusion knobs, ...)."""
    diffusion: dict[str, Any] = Field(default_factory=dict)
    """Per-request diffusion fields (``num_denoising_steps``, ``block_length``, ...), checked
    against the backend's dialect profile when it is built (see ``docs/backends.md``)."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """Extra HTTP headers sent with every request (left out of ``repr``: they may hold keys)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options for non-HTTP backend types (for example ``replay``)."""


class Tiers(Model):
    """Which backend serves each tier."""

    fast: str
    """Backend name of the fast (diffusion) tier."""
    frontier: str
    """Backend name of the frontier (autoregressive) tier."""


DEFAULT_THRESHOLDS: Mapping[str, float] = {"transfer": 0.58895, "heuristic": 0.5, "learned": 0.5}
"""The threshold of each scorer type when a policy gives none. ``transfer``'s is the one
calibrated for the bundled evaluation policy on development rows its sample does not contain;
calibrate on your own traffic (``tiered-router calibrate``) for your models."""


class ScoringConfig(Model):
    """The scorer and its threshold."""

    type: Literal["heuristic", "learned", "transfer"] = "transfer"
    """Scorer: ``transfer`` (the default: prompt length and answer-option overlap, trained on
    every source pooled; it beat the others on sources it was not trained on),
    ``heuristic`` (explainable features) or ``learned`` (trained weights)."""
    threshold: float = Field(default=0.5, ge=0, le=1)
    """A score above it goes to the frontier tier (default: the scorer type's, see
    :data:`DEFAULT_THRESHOLDS`)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Overrides of the heuristic feature weights, by feature name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Scorer options (``learned``: ``path`` of a weights file; without it the shipped weights)."""

    @model_validator(mode="before")
    @classmethod
    def _default_threshold(cls, data: Any) -> Any:
        # the threshold left out is the scorer type's own: scores of different scorers
        # live on different scales
        if isinstance(data, Mapping) and "threshold" not in data:
            kind = data.get("type", "transfer")
            if isinstance(kind, str) and kind in DEFAULT_THRESHOLDS:
                return {**data, "threshold": DEFAULT_THRESHOLDS[kind]}
        return data


class RuleCondition(Model):
    """Conditions of a rule; all given ones must hold."""

    final: bool | None = None
    """Match the agent's ``final`` signal."""
    min_tools: int | None = Field(default=None, ge=0)
    """At least this many tools declared."""
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    """At least this many (approximate) prompt tokens."""
    has_response_format: bool | None = None
    """Whether the turn has a ``response_format``."""
    has_tool_results: bool | None = None
    """Whether the last message is a tool result."""
    step_at_least: int | None = Field(default=None, ge=0)
    """The agent's step index is at least this."""
    metadata: dict[str, Any] | None = None
    """Every key equals the turn's metadata value."""


class Rule(Model):
    """A rule, checked in order before the threshold; the first match decides."""

    name: str = Field(min_length=1)
    """Name shown in decisions and traces."""
    when: RuleCondition
    """Conditions; an empty ``when`` matches every turn."""
    tier: Tier
    """Tier to send a matching turn to."""


def _default_checks() -> list[str | dict[str, dict[str, Any]]]:
    return [
        "non_empty",
        "not_truncated",
        "no_refusal",
        "repetition",
        "json_schema",
        "tool_arguments",
        "tool_call_in_text",
        "redundant_tool_calls",
        "argument_grounding",
        "tool_fit",
    ]


class GateConfig(Model):
    """The quality gate's checks.

    Each item is a check name, or a one-key mapping of a name to its options:
    ``[non_empty, {repetition: {max_ratio: 0.5}}, {regex: {pattern: "^ANSWER:"}}]``.
    """

    checks: list[str | dict[str, dict[str, Any]]] = Field(default_factory=_default_checks)
    """Checks run on every draft, in order."""
    check_frontier: bool = True
    """Also gate frontier drafts (their verdict lands in the trace)."""
    text_tool_calls: bool = True
    """Judge a draft whose whole text is tool calls (``[f(x=1)]``, ``<tool_call>``) as calls."""

    @field_validator("checks", mode="before")
    @classmethod
    def _check_shapes(cls, checks: Any) -> Any:
        if not isinstance(checks, list):
            return checks  # pydantic reports the wrong type
        out: list[Any] = []
        problems: list[tuple[Loc, str]] = []
        for i, item in enumerate(checks):
            if isinstance(item, Mapping):
                if len(item) != 1:
                    keys = ", ".join(map(str, item)) or "none"
                    problems.append(
                        (
                            (i,),
                            f"a check written as a mapping needs exactly one key, its name "
                            f"(got {len(item)}: {keys})",
                        )
                    )
                    continue
                ((name, options),) = item.items()
                if options is None:  # `- repetition:` with nothing under it
                    item = {name: {}}
                elif not isinstance(options, Mapping):
                    problems.append(((i, str(name)), "a check's options must be a mapping"))
                    continue
            elif not isinstance(item, str):
                problems.append(((i,), "a check is a name or a one-key mapping {name: {options}}"))
                continue
            out.append(item)
        if problems:
            raise FieldErrors(problems)
        return out


class Policy(Model):
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
    """Backends by name; at least one."""
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
    task: TaskConfig = Field(default_factory=TaskConfig)
    """Task-level routing: escalation budget, lock to frontier, latency and cost budgets."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """The proxy server: bind address, client API keys, request size limit."""
    shadow: ShadowConfig = Field(default_factory=ShadowConfig)
    """Shadow mode: the other tier on a sampled share of turns (labels from production)."""
    state: StateConfig = Field(default_factory=StateConfig)
    """Where breakers and task totals live: each process, or Redis shared by all."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Prices by model name that override the built-in table; a backend's own ``price`` wins."""
    drafts: DraftsConfig | None = None
    """Draft panels: ``k`` concurrent fast drafts whose agreement decides escalation (off
    when not given)."""
    hedge: HedgeConfig | None = None
    """Hedged escalation: the frontier call started while the fast side is undecided (off
    when not given)."""
    monitor: MonitorConfig | None = None
    """The quality monitor: a share of accepted fast answers compared with the frontier's in
    the background, per turn kind, and (``enforce``) kinds below target tightened (off when
    not given)."""

    # where values came from ${VAR} references: {path: (reference, value it gave)}, so that
    # to_yaml() writes the references back instead of what they resolved to
    _templates: dict[tuple[str | int, ...], tuple[str, str]] = PrivateAttr(default_factory=dict)

    @field_validator("backends")
    @classmethod
    def _some_backends(cls, backends: dict[str, BackendConfig]) -> dict[str, BackendConfig]:
        if not backends:
            raise FieldErrors([((), "define at least one backend")])
        return backends

    @model_validator(mode="after")
    def _tiers_name_backends(self) -> Policy:
        problems: list[tuple[Loc, str]] = []
        known = sorted(self.backends)
        for tier in ("fast", "frontier"):
            name = getattr(self.tiers, tier)
            if name not in self.backends:
                problems.append(
                    (
                        ("tiers", tier),
                        f"names backend {name!r}, which is not defined{did_you_mean(name, known)}",
                    )
                )
        for i, name in enumerate(self.drafts.backends if self.drafts is not None else ()):
            if name not in self.backends:
                problems.append(
                    (
                        ("drafts", "backends", i),
                        f"names backend {name!r}, which is not defined{did_you_mean(name, known)}",
                    )
                )
        for kind, own in (self.drafts.kinds if self.drafts is not None else {}).items():
            for i, name in enumerate(own.backends or ()):
                if name not in self.backends:
                    problems.append(
                        (
                            ("drafts", "kinds", kind, "backends", i),
                            f"names backend {name!r}, which is not defined"
                            f"{did_you_mean(name, known)}",
                        )
                    )
        first: dict[str, int] = {}
        for i, rule in enumerate(self.rules):
            if rule.name in first:
                problems.append(
                    (
                        ("rules", i, "name"),
                        f"duplicate rule name {rule.name!r} (also rules[{first[rule.name]}])",
                    )
                )
            first.setdefault(rule.name, i)
        if problems:
            raise FieldErrors(problems)
        return self

    @classmethod
    def from_yaml(
        cls, source: PolicySource | Policy, *, env: Mapping[str, str] | None = None
    ) -> Policy:
        """Load a policy; the same as :func:`tiered_router.load_policy`."""
        return LOADER[0](source, env=env)

    def __eq__(self, other: object) -> bool:
        # where values came from (_templates) does not make two policies different
        if not isinstance(other, Policy):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = Model.__hash__

    def to_yaml(self) -> str:
        """Return the policy as YAML that :func:`tiered_router.load_policy` reads back into it.

        Values read from ``${VAR}`` references are written as those references; a secret
        (API key, client keys, Redis URL, credential headers) is never written in clear.

        Example:
            ```python
            text = load_policy("policy.yaml").to_yaml()   # api_key: ${OPENAI_API_KEY}
            assert load_policy(text) == load_policy("policy.yaml")
            ```

        Raises:
            PolicyError: When a secret has no ``${VAR}`` reference to write instead (a key
                written in clear in the source, or set in Python); the error names the field.

        """
        from tiered_router.policy._writer import policy_yaml

        return policy_yaml(self, self._templates)

    def backend_for(self, tier: Tier) -> str:
        """Return the backend name serving ``tier``."""
        return self.tiers.fast if tier == "fast" else self.tiers.frontier
