"""Routing policy: the schema of policy YAML (version 1).

A policy names the backends, maps the two tiers onto them, configures the scorer and its
threshold, lists the rules checked before the threshold, the gate's checks and what to do
when a draft fails. This module is the schema alone: it imports nothing above it.
:func:`tiered_router.load_policy` (in ``_policy_loader``) reads YAML, interpolates
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

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from tiered_router._types import BackendKind, PolicySource, Tier

if TYPE_CHECKING:
    from tiered_router._policy_loader import load_policy

__all__ = [
    "BackendConfig",
    "BreakerConfig",
    "ClientLimits",
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
    "ServerConfig",
    "ShadowConfig",
    "StateConfig",
    "TaskConfig",
    "Tiers",
    "load_policy",
]

_Loc = tuple[str | int, ...]


class _FieldErrors(ValueError):
    """Problems found by a validator, each at a location relative to the validated value.

    Pydantic reports a validator's error at the validated value; this carries finer locations
    (and several problems at once) so that :func:`load_policy` can point at the right line.
    """

    def __init__(self, problems: Sequence[tuple[_Loc, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{_dotted(p)}: {m}" if p else m for p, m in self.problems))


def _dotted(path: _Loc) -> str:
    out = ""
    for el in path:
        out += f"[{el}]" if isinstance(el, int) else (f".{el}" if out else str(el))
    return out


def _did_you_mean(word: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(known)}"


def _unknown(what: str, word: str, known: Sequence[str]) -> str:
    """``unknown <what> 'wrod'; did you mean 'word'? (known: a, word)``: names every known one."""
    close = difflib.get_close_matches(word, known, n=1)
    hint = f"; did you mean {close[0]!r}? (known: " if close else "; known: "
    return f"unknown {what} {word!r}{hint}{', '.join(known)}{')' if close else ''}"


class _Model(BaseModel):
    # defer_build: the validators are built when a policy is first validated, not when this
    # module is imported (``from tiered_router import Router`` stays fast)
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=True)


class Price(_Model):
    """Prices of a backend in US dollars per million tokens."""

    input_per_mtok: float = Field(default=0.0, ge=0)
    """Price of one million input (prompt) tokens."""
    output_per_mtok: float = Field(default=0.0, ge=0)
    """Price of one million output (completion) tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Price of one million cached input tokens; ``None`` bills them as plain input."""


class LatencyModel(_Model):
    """How long a backend takes: ``latency = ttft_s + output_tokens / tokens_per_s``.

    Used by offline evaluation and by task latency budgets; measured latencies refine it.
    """

    ttft_s: float = Field(default=0.3, ge=0)
    """Time to first token, seconds."""
    tokens_per_s: float = Field(default=100.0, gt=0)
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
    """A named preset that fills defaults: ``mercury-2``, ``openai``, ``local-diffusion``,
    ``dlmserve``, ``sglang``, ``vllm``."""
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


class Tiers(_Model):
    """Which backend serves each tier."""

    fast: str
    """Backend name of the fast (diffusion) tier."""
    frontier: str
    """Backend name of the frontier (autoregressive) tier."""


DEFAULT_THRESHOLDS: Mapping[str, float] = {"transfer": 0.58895, "heuristic": 0.5, "learned": 0.5}
"""The threshold of each scorer type when a policy gives none. ``transfer``'s is the one
calibrated for the bundled evaluation policy on development rows its sample does not contain;
calibrate on your own traffic (``tiered-router calibrate``) for your models."""


class ScoringConfig(_Model):
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


class RuleCondition(_Model):
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


class Rule(_Model):
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


class GateConfig(_Model):
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
        problems: list[tuple[_Loc, str]] = []
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
            raise _FieldErrors(problems)
        return out


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

    base_s: float = Field(default=0.5, ge=0)
    """First backoff, seconds."""
    max_s: float = Field(default=8.0, ge=0)
    """Largest backoff, seconds."""
    retry_after_cap_s: float = Field(default=60.0, ge=0)
    """Longest server-asked wait honoured; a longer ``Retry-After`` escalates instead."""


class BreakerConfig(_Model):
    """Per-backend circuit breaker: opens on a run of failures or a failure share in a window.

    Timeouts, connection errors, 401/403/408/429, 5xx and unreadable answers are failures;
    a 4xx the request caused (400, 404, 413, 422...) is not.
    """

    enabled: bool = True
    """Whether breakers are used."""
    consecutive_failures: int | None = Field(default=5, ge=1)
    """Open after this many failed calls in a row (``null``: only the window opens it)."""
    failure_ratio: float = Field(default=0.5, gt=0, le=1)
    """Also open when more than this share of recent calls failed..."""
    min_calls: int = Field(default=10, ge=1)
    """...over at least this many calls..."""
    window_s: float = Field(default=10.0, gt=0)
    """...in this window, seconds."""
    cooldown_s: float = Field(default=5.0, ge=0)
    """Then stay open this long before letting one trial call through."""
    trial_lease_s: float = Field(default=30.0, gt=0)
    """A trial not recorded after this long (a crashed worker) is given up for a new one."""


class ResilienceConfig(_Model):
    """Retries, the per-turn deadline and the circuit breaker."""

    deadline_s: float | None = Field(default=None, gt=0)
    """One deadline per turn, shared by retries and escalation; ``null`` for none."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """Retry backoff settings."""
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    """Circuit breaker settings."""


class ShadowConfig(_Model):
    """Shadow mode: run the other tier on a sampled share of turns, to label your traffic.

    A shadow run never changes what the caller gets and never fails a turn: it runs after
    the turn's answer is ready (in the background), and its own trace, with the same
    ``turn_id`` and ``metadata.shadow: true``, goes to the sinks. ``tiered-router dataset
    from-traces`` merges it with the turn's trace, so both tiers have an outcome.

    Example:
        ```yaml
        shadow: {rate: 0.05}   # 5 % of turns also run on the tier that did not answer
        ```

    """

    rate: float = Field(default=0.0, ge=0, le=1)
    """Share of turns (chosen by a hash of the turn id, so the same turn always is or is
    not) that also run on the other tier; ``0`` turns shadow mode off."""


class TaskConfig(_Model):
    """Routing across a whole agent task (used inside ``router.task()``; see ``docs/task.md``).

    Example:
        ```yaml
        task:
          max_escalations: 3            # then skip the fast tier for the rest of the task
          lock_after_gate_failures: 2   # lock to frontier after 2 failed fast drafts...
          lock_on_stall: true           # ...or a stall (repeated tool calls / tool errors)
          unlock_after_clean_turns: 2   # back to normal routing after 2 clean turns
          max_latency_s: 30             # pick the tier that keeps the task inside 30 s
          max_cost: 0.05                # and inside 5 US cents
        ```

    """

    max_escalations: int | None = Field(default=None, ge=0)
    """Escalations a task may spend; once spent, its turns go straight to the frontier tier."""
    max_cost: float | None = Field(default=None, gt=0)
    """Cost budget of a task in US dollars; turns go to the tier that keeps it inside."""
    max_latency_s: float | None = Field(default=None, gt=0)
    """Latency budget of a task in seconds (since it started); turns go to the tier that fits."""
    lock_after_gate_failures: int | None = Field(default=2, ge=1)
    """Lock the task to the frontier tier after this many gate failures; ``null`` never does."""
    lock_on_stall: bool = True
    """Send a stalled turn to the frontier tier and lock the task there."""
    unlock_after_clean_turns: int = Field(default=2, ge=1)
    """Clean turns in a row that release the lock (and forget earlier gate failures)."""
    stall_repeated_calls: int = Field(default=2, ge=2)
    """The same tool call (name and arguments) this many times since the user spoke is a stall."""
    stall_tool_errors: int = Field(default=2, ge=1)
    """This many tool errors in a row is a stall."""
    latency_window: int = Field(default=5, ge=1)
    """Recent measured latencies per backend that replace its latency model once there are any."""
    expected_output_tokens: int = Field(default=256, ge=1)
    """Output tokens assumed for a turn before any were measured on its backend."""


class StateConfig(_Model):
    """Where circuit breakers and task totals live; see ``docs/deploy.md``.

    ``memory`` keeps them in each process. ``redis`` shares them between every worker and
    replica (needs the ``redis`` extra); a Redis that is down or slower than ``timeout_s``
    never fails a turn: the router answers from in-process state, with a warning and the
    ``tiered_router_state_fallbacks_total`` metric.

    Example:
        ```yaml
        state:
          type: redis
          url: ${REDIS_URL}         # redis://[:password@]host:6379/0, rediss:// for TLS
          prefix: tiered_router     # every key starts with "tiered_router:"
          timeout_s: 0.05           # per command; then in-process state for retry_s
        ```

    """

    type: Literal["memory", "redis"] = "memory"
    """``memory`` (each process) or ``redis`` (shared)."""
    url: SecretStr | None = Field(default=None, repr=False)
    """Redis URL (it may hold a password, so it is never shown)."""
    prefix: str = Field(default="tiered_router", min_length=1, max_length=200)
    """Start of every key, so several deployments can share one Redis."""
    timeout_s: float = Field(default=0.05, gt=0, le=10)
    """Longest wait for Redis per command (connect and answer)."""
    retry_s: float = Field(default=1.0, ge=0, le=300)
    """After a Redis failure, seconds of in-process state before trying Redis again."""
    ttl_s: float = Field(default=86_400.0, gt=0)
    """Lifetime of a task's state after its last turn."""
    cache_s: float = Field(default=0.1, ge=0, le=10)
    """How long a breaker seen closed is trusted without asking Redis (0: ask every call)."""

    @model_validator(mode="after")
    def _url_for_redis(self) -> StateConfig:
        if self.type == "redis" and (self.url is None or not self.url.get_secret_value()):
            raise _FieldErrors([(("url",), "required when type is redis")])
        return self


class ClientLimits(_Model):
    """Limits per client key, counted in the state store (shared by every replica on Redis).

    Example:
        ```yaml
        server:
          limits:
            requests_per_minute: 600     # per calendar minute; more gets 429 + Retry-After
            spend_usd_per_day: 20        # per UTC day; once reached, 429 until midnight UTC
        ```

    """

    requests_per_minute: int | None = Field(default=None, ge=1)
    """Requests a key may send per calendar minute (``null``: no limit)."""
    spend_usd_per_day: float | None = Field(default=None, gt=0)
    """US dollars a key's turns may cost per UTC day (``null``: no limit)."""


class ServerConfig(_Model):
    """The OpenAI-compatible proxy (``tiered-router serve``); see ``docs/proxy.md``.

    Example:
        ```yaml
        server:
          api_keys: ["${TIERED_ROUTER_KEY}"]   # clients send Authorization: Bearer <key>
          host: 0.0.0.0                        # only allowed with api_keys
          port: 8000
          max_body_bytes: 4194304
        ```

    """

    host: str = "127.0.0.1"
    """Address to bind; a non-loopback address needs ``api_keys``."""
    port: int = Field(default=8000, ge=0, le=65535)
    """Port to bind (``0`` picks a free one)."""
    api_keys: list[SecretStr] = Field(default_factory=list, repr=False)
    """Keys clients must present (``TIERED_ROUTER_API_KEYS`` adds more, comma-separated)."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Largest request body accepted; a larger one gets 413."""
    read_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds a client may take to send a request's headers, and again its body; a slower
    (half-sent) connection is closed."""
    max_tools: int = Field(default=128, gt=0)
    """Most tools a request may carry; more gets 400."""
    max_schema_bytes: int = Field(default=256 * 1024, gt=0)
    """Largest ``response_format`` or tool ``parameters`` schema (serialized); larger gets 400."""
    limits: ClientLimits = Field(default_factory=lambda: ClientLimits())
    """Per-client-key request rate and daily spend (kept in the state store)."""


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

    @field_validator("backends")
    @classmethod
    def _some_backends(cls, backends: dict[str, BackendConfig]) -> dict[str, BackendConfig]:
        if not backends:
            raise _FieldErrors([((), "define at least one backend")])
        return backends

    @model_validator(mode="after")
    def _tiers_name_backends(self) -> Policy:
        problems: list[tuple[_Loc, str]] = []
        known = sorted(self.backends)
        for tier in ("fast", "frontier"):
            name = getattr(self.tiers, tier)
            if name not in self.backends:
                problems.append(
                    (
                        ("tiers", tier),
                        f"names backend {name!r}, which is not defined{_did_you_mean(name, known)}",
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
            raise _FieldErrors(problems)
        return self

    @classmethod
    def from_yaml(
        cls, source: PolicySource | Policy, *, env: Mapping[str, str] | None = None
    ) -> Policy:
        """Load a policy; the same as :func:`tiered_router.load_policy`."""
        from tiered_router._policy_loader import load_policy

        return load_policy(source, env=env)

    def backend_for(self, tier: Tier) -> str:
        """Return the backend name serving ``tier``."""
        return self.tiers.fast if tier == "fast" else self.tiers.frontier


def __getattr__(name: str) -> Any:
    # `load_policy` lives with the loader, which sits above this schema; the name stays
    # importable from here for code written against earlier releases
    if name == "load_policy":
        from tiered_router._policy_loader import load_policy

        return load_policy
    raise AttributeError(f"module 'tiered_router.policy' has no attribute {name!r}")
