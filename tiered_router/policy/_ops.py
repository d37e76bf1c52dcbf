"""The policy's operating sections, re-exported by :mod:`tiered_router.policy._schema`.

Escalation, retries, the circuit breaker, deadlines, shadow runs, tasks, shared state and
the proxy server: how routing behaves at run time, apart from where turns go.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from tiered_router.policy._base import FieldErrors, Model

__all__ = [
    "BreakerConfig",
    "ClientLimits",
    "EscalationConfig",
    "ResilienceConfig",
    "RetryConfig",
    "ServerConfig",
    "ShadowConfig",
    "StateConfig",
    "TaskConfig",
]


class EscalationConfig(Model):
    """What happens when a fast draft fails."""

    on_gate_failure: bool = True
    """A fast draft that fails the gate goes to the frontier tier."""
    on_backend_error: bool = True
    """A fast backend that fails after its retries (or is open) goes to the frontier tier."""
    when_frontier_fails_gate: Literal["return", "raise"] = "return"
    """``return`` the draft with its verdict in the trace, or ``raise`` GateFailed."""


class RetryConfig(Model):
    """Retry backoff: ``min(base_s * 2**n, max_s)`` times a jitter in [0.75, 1.0]."""

    base_s: float = Field(default=0.5, ge=0)
    """First backoff, seconds."""
    max_s: float = Field(default=8.0, ge=0)
    """Largest backoff, seconds."""
    retry_after_cap_s: float = Field(default=60.0, ge=0)
    """Longest server-asked wait honoured; a longer ``Retry-After`` escalates instead."""


class BreakerConfig(Model):
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


class ResilienceConfig(Model):
    """Retries, the per-turn deadline and the circuit breaker."""

    deadline_s: float | None = Field(default=None, gt=0)
    """One deadline per turn, shared by retries and escalation; ``null`` for none."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """Retry backoff settings."""
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    """Circuit breaker settings."""


class ShadowConfig(Model):
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


class TaskConfig(Model):
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
    hedge: bool = True
    """Whether the policy's ``hedge:`` may start frontier calls for this task's turns
    (``false`` forbids hedging; hedge spend always counts in ``max_cost``)."""


class StateConfig(Model):
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
    confirm_writes: bool = False
    """Wait for Redis's answer to a task turn's record, instead of sending the record before
    the turn returns and confirming it in the background (one round trip less)."""
    task_cache_s: float = Field(default=0.0, ge=0, le=3600)
    """Above 0, a task's repeat turns on one process reuse the totals it holds instead of
    reading Redis, until another process writes the task (a pub/sub note) and for at most
    this many seconds; 0 reads Redis on every task turn. See ``docs/deploy.md``."""

    @model_validator(mode="after")
    def _url_for_redis(self) -> StateConfig:
        if self.type == "redis" and (self.url is None or not self.url.get_secret_value()):
            raise FieldErrors([(("url",), "required when type is redis")])
        return self


class ClientLimits(Model):
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


class ServerConfig(Model):
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
