"""Presets: what tiered_router knows about providers.

A :class:`Preset` fills the :class:`~tiered_router.policy.BackendConfig` fields the user did
not set (told apart with pydantic's ``model_fields_set``): base URL, model, kind, tool
support, prices, latency model, where the API key comes from, and the name of the server's
dialect profile. The profile (:mod:`tiered_router.backends._dialect`, the tables in
:mod:`tiered_router.backends._profiles`) is the one home of what the server accepts: roles,
content, tools native or prompted, ``response_format``, ``stop``, fields and value ranges.
A preset holds no request rule of its own (``tests/test_dialect_rules.py``).

Example:
    ```yaml
    backends:
      fast: {preset: mercury-2}                       # key from $INCEPTION_API_KEY
      big: {preset: openai, model: gpt-5.2}           # key from $OPENAI_API_KEY
      local: {preset: local-diffusion, model: LLaDA2.0-mini}
      llada: {preset: dlmserve, diffusion: {num_denoising_steps: 32}}
    ```

    ```python
    from tiered_router.backends import mercury2     # built in backends/registry.py

    fast = mercury2(api_key=os.environ["INCEPTION_API_KEY"])
    ```

Without ``preset``, one is inferred: no ``base_url`` means OpenAI, and a base URL on
``inceptionlabs.ai`` means Mercury 2 (so its dialect applies even to a hand-written entry).

"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from tiered_router._types import BackendKind
from tiered_router.backends._dialect import DialectProfile
from tiered_router.backends._profiles import DIALECTS, resolve_dialect
from tiered_router.exceptions import PolicyError
from tiered_router.policy._schema import BackendConfig, LatencyModel, Price

__all__ = [
    "PRESETS",
    "Preset",
    "backend_kwargs",
    "dialect_for",
    "get_preset",
    "preset_for",
    "resolve_config",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """Defaults for one known endpoint.

    Attributes:
        name: The preset's name, as written in ``preset:``.
        base_url: Endpoint base URL; ``None`` for the SDK's default (OpenAI).
        model: Default model, or ``None`` when the user must name one.
        kind: ``diffusion`` or ``autoregressive``.
        api_key_env: Environment variable holding the API key.
        api_key_required: ``False`` sends the placeholder ``"none"`` when no key is found.
        tools: Whether the endpoint supports tools.
        price: Token prices; ``None`` looks the model up in the price table
            (:mod:`tiered_router.pricing`).
        dialect: Name of the server's dialect profile (what request shape it accepts).
        latency: Expected latency.
        hosts: Base-URL host suffixes for which this preset is inferred.

    """

    name: str
    base_url: str | None
    model: str | None
    kind: BackendKind
    api_key_env: str | None
    api_key_required: bool = True
    tools: bool = True
    dialect: str = "openai"
    price: Price | None = None
    latency: LatencyModel = field(default_factory=LatencyModel)
    hosts: tuple[str, ...] = ()

    def apply(
        self, config: BackendConfig, *, prices: Mapping[str, Price] | None = None
    ) -> BackendConfig:
        """Return ``config`` with the fields the user did not set taken from this preset.

        Args:
            config: The backend's policy config.
            prices: The policy's ``prices:`` overrides by model name; they win over the
                preset's own price and the built-in table.

        """
        profile = _profile_of(config, self)
        defaults: dict[str, Any] = {
            "base_url": self.base_url,
            "model": self.model,
            "kind": self.kind,
            "tools": self.tools,
            "latency": self.latency,
            "max_concurrency": profile.max_concurrency,
            "canvas_tokens": profile.canvas_tokens,
        }
        update = {k: v for k, v in defaults.items() if k not in config.model_fields_set}
        if "price" not in config.model_fields_set:
            model = config.model or self.model
            price = _price_of(self, model, prices)
            if price is not None:
                update["price"] = price
        return config.model_copy(update=update)


def _profile_of(config: BackendConfig, preset: Preset) -> DialectProfile:
    """The config's dialect profile (its ``options.dialect``, else the preset's)."""
    try:
        return resolve_dialect(config.options.get("dialect", preset.dialect))
    except ValueError:  # reported with its field by dialect_for when the backend is built
        return DIALECTS[preset.dialect]


def _local(name: str, port: int, **fields: Any) -> Preset:
    """A self-hosted diffusion server's preset: no key, no per-token price."""
    dialect = fields.pop("dialect", name)
    return Preset(
        name=name,
        base_url=f"http://127.0.0.1:{port}/v1",
        model=fields.pop("model", None),
        kind="diffusion",
        api_key_env=None,
        api_key_required=False,
        price=Price(),  # self-hosted: no per-token price unless the policy sets one
        dialect=dialect,
        latency=DIALECTS[dialect].latency,
        **fields,
    )


def _price_of(
    preset: Preset | None, model: str | None, prices: Mapping[str, Price] | None
) -> Price | None:
    from tiered_router.pricing import listed_price

    if prices and model is not None and model in prices:
        return prices[model]
    if preset is None:
        return None
    if preset.price is not None:
        return preset.price
    return listed_price(preset.name, model)


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "mercury-2": Preset(
            name="mercury-2",
            base_url="https://api.inceptionlabs.ai/v1",
            model="mercury-2",
            kind="diffusion",
            api_key_env="INCEPTION_API_KEY",
            dialect="mercury-2",
            price=Price(input_per_mtok=0.25, cached_input_per_mtok=0.025, output_per_mtok=0.75),
            latency=DIALECTS["mercury-2"].latency,
            hosts=("inceptionlabs.ai",),
        ),
        "openai": Preset(
            name="openai",
            base_url=None,
            model=None,
            kind="autoregressive",
            api_key_env="OPENAI_API_KEY",
            dialect="openai-api",
            latency=DIALECTS["openai-api"].latency,
            hosts=("api.openai.com",),
        ),
        "local-diffusion": Preset(
            name="local-diffusion",
            base_url="http://127.0.0.1:30000/v1",
            model=None,
            kind="diffusion",
            api_key_env=None,
            api_key_required=False,
            tools=False,
            price=Price(),  # self-hosted: no per-token price unless the policy sets one
            dialect="local-diffusion",
            latency=DIALECTS["local-diffusion"].latency,
        ),
        "dlmserve": Preset(
            name="dlmserve",
            base_url="http://127.0.0.1:8000/v1",
            model="gsai-ml/LLaDA-8B-Instruct",
            kind="diffusion",
            api_key_env=None,
            api_key_required=False,
            price=Price(),
            dialect="dlmserve",
            latency=DIALECTS["dlmserve"].latency,
        ),
        "sglang": Preset(
            name="sglang",
            base_url="http://127.0.0.1:30000/v1",
            model=None,
            kind="diffusion",
            api_key_env=None,
            api_key_required=False,
            price=Price(),
            dialect="sglang",
            latency=DIALECTS["sglang"].latency,
        ),
        "vllm": Preset(
            name="vllm",
            base_url="http://127.0.0.1:8000/v1",
            model=None,
            kind="diffusion",
            api_key_env=None,
            api_key_required=False,
            price=Price(),
            dialect="vllm",
            latency=DIALECTS["vllm"].latency,
        ),
        # SGLang serving DiffusionGemma (--dllm-algorithm Gemma4Renoise)
        "sglang-gemma": _local("sglang-gemma", 30000),
        "lmdeploy": _local("lmdeploy", 23333),  # lmdeploy serve api_server's default port
        "diffulex": _local("diffulex", 8000),  # python -m diffulex.server's default port
        "ollada": _local("ollada", 11435),  # ollada/server.py DEFAULT_PORT
        "dfastllm": _local("dfastllm", 8000),  # dfastllm/config.py: port 8000
        # hosted OpenAI-compatible endpoints (prices: tiered_router.pricing)
        "anthropic": Preset(
            name="anthropic",
            base_url="https://api.anthropic.com/v1/",
            model=None,
            kind="autoregressive",
            api_key_env="ANTHROPIC_API_KEY",
            hosts=("api.anthropic.com",),
            latency=DIALECTS["openai"].latency,
        ),
        "gemini": Preset(
            name="gemini",
            base_url="https://generativelanguage.googleapis.com/v1beta/openai/",
            model=None,
            kind="autoregressive",
            api_key_env="GEMINI_API_KEY",
            hosts=("generativelanguage.googleapis.com",),
            latency=DIALECTS["openai"].latency,
        ),
        "together": Preset(
            name="together",
            base_url="https://api.together.xyz/v1",
            model=None,
            kind="autoregressive",
            api_key_env="TOGETHER_API_KEY",
            hosts=("api.together.xyz",),
            latency=DIALECTS["openai"].latency,
        ),
        "groq": Preset(
            name="groq",
            base_url="https://api.groq.com/openai/v1",
            model=None,
            kind="autoregressive",
            api_key_env="GROQ_API_KEY",
            hosts=("api.groq.com",),
            latency=DIALECTS["openai"].latency,
        ),
        "fireworks": Preset(
            name="fireworks",
            base_url="https://api.fireworks.ai/inference/v1",
            model=None,
            kind="autoregressive",
            api_key_env="FIREWORKS_API_KEY",
            hosts=("api.fireworks.ai",),
            latency=DIALECTS["openai"].latency,
        ),
        "deepinfra": Preset(
            name="deepinfra",
            base_url="https://api.deepinfra.com/v1/openai",
            model=None,
            kind="autoregressive",
            api_key_env="DEEPINFRA_API_KEY",
            hosts=("api.deepinfra.com",),
            latency=DIALECTS["openai"].latency,
        ),
    }
)
"""Known presets by name."""


def get_preset(name: str, *, backend: str = "?") -> Preset:
    """Return the preset called ``name``.

    Raises:
        PolicyError: For an unknown name; the message lists the known ones.

    """
    try:
        return PRESETS[name]
    except KeyError:
        raise PolicyError(
            f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}",
            field=f"backends.{backend}.preset",
        ) from None


def preset_for(config: BackendConfig, *, backend: str = "?") -> Preset | None:
    """Return the preset ``config`` names, or the one inferred from its base URL.

    No ``base_url`` infers ``openai``; a host ending in a preset's ``hosts`` infers that
    preset; any other endpoint gets none.
    """
    if config.preset is not None:
        return get_preset(config.preset, backend=backend)
    if config.base_url is None:
        return PRESETS["openai"]
    host = (urlsplit(config.base_url).hostname or "").lower()
    for preset in PRESETS.values():
        if any(host == h or host.endswith("." + h) for h in preset.hosts):
            return preset
    return None


def resolve_config(
    config: BackendConfig, *, backend: str = "?", prices: Mapping[str, Price] | None = None
) -> BackendConfig:
    """Return ``config`` with its preset (named or inferred) and its price applied.

    Use this wherever a policy's backend fields are read (prices, ``tools``, latency): the
    raw config lacks what the preset and the price table fill.

    Args:
        config: The backend's policy config.
        backend: Its name, for error messages.
        prices: The policy's ``prices:`` overrides by model name.

    """
    preset = preset_for(config, backend=backend)
    if preset is not None:
        return preset.apply(config, prices=prices)
    if "price" not in config.model_fields_set:
        price = _price_of(None, config.model, prices)
        if price is not None:
            return config.model_copy(update={"price": price})
    return config


def dialect_for(config: BackendConfig, *, backend: str = "?") -> DialectProfile:
    """Return the dialect profile of a policy's backend: ``options.dialect`` or its preset's.

    Raises:
        PolicyError: For an unknown dialect name or field.

    """
    preset = preset_for(config, backend=backend)
    try:
        return resolve_dialect(
            config.options.get("dialect", preset.dialect if preset is not None else "openai")
        )
    except ValueError as exc:
        raise PolicyError(str(exc), field=f"backends.{backend}.options.dialect") from None


def _api_key(
    name: str, config: BackendConfig, preset: Preset | None, env: Mapping[str, str]
) -> str | None:
    if config.api_key is not None and config.api_key.get_secret_value():
        return config.api_key.get_secret_value()
    var_name = config.api_key_env or (preset.api_key_env if preset is not None else None)
    if var_name is not None:
        value = env.get(var_name)
        if value:
            return value
    if preset is None and config.api_key_env is None:
        return None  # an unknown endpoint may need no key; the backend sends a placeholder
    if preset is not None and not preset.api_key_required:
        return "none"
    var = var_name or "an environment variable"
    raise PolicyError(
        f"backend {name!r} needs an API key: set {var} or write "
        f'api_key: "${{{var}}}" in the policy',
        field=f"backends.{name}.api_key",
    )


_OPTIONS = frozenset({"dialect"})

_RETIRED = MappingProxyType(
    {
        "quirks": "a provider's request rules live in its dialect profile now: write "
        "options: {dialect: mercury-2} (or another profile, see docs/backends.md)",
        "strict_quirks": "a value outside what the server takes is converted and the "
        "conversion recorded on the attempt (attempt.conversions), never refused; "
        "remove the option (see docs/backends.md)",
    }
)
"""Options that were retired, with what to write instead."""


def check_config(name: str, config: BackendConfig) -> None:
    """Check an ``openai`` backend's config as loading a policy does; the key is not needed.

    Raises:
        PolicyError: Unknown preset or option, or no model.

    """
    _resolve(name, config)


def _resolve(name: str, config: BackendConfig) -> tuple[Preset | None, BackendConfig]:
    if config.preset is not None and config.preset not in PRESETS:
        from tiered_router.policy._base import unknown as _unknown

        raise PolicyError(
            _unknown("preset", config.preset, sorted(PRESETS)), field=f"backends.{name}.preset"
        )
    preset = preset_for(config, backend=name)
    resolved = preset.apply(config) if preset is not None else config
    retired = sorted(set(resolved.options) & _RETIRED.keys())
    if retired:
        raise PolicyError(
            f"option {retired[0]!r} was retired: {_RETIRED[retired[0]]}",
            field=f"backends.{name}.options.{retired[0]}",
        )
    unknown = sorted(set(resolved.options) - _OPTIONS)
    if unknown:
        raise PolicyError(
            f"unknown option {unknown[0]!r} for an openai backend; known: "
            + ", ".join(sorted(_OPTIONS)),
            field=f"backends.{name}.options.{unknown[0]}",
        )
    if not resolved.model:
        raise PolicyError(
            "an openai backend needs `model` (or a `preset` that names one)"
            if preset is None or config.preset is None
            else f"`model` is required: preset {preset.name!r} has no default",
            field=f"backends.{name}.model",
        )
    dialect = dialect_for(resolved, backend=name)
    unknown_diffusion = sorted(k for k in resolved.diffusion if not dialect.accepts_diffusion(k))
    if unknown_diffusion:
        known = ", ".join(sorted(dialect.diffusion_params)) or "none"
        raise PolicyError(
            f"diffusion fields {unknown_diffusion} are not accepted by the {dialect.name} "
            f"dialect; known: {known}",
            field=f"backends.{name}.diffusion",
        )
    return preset, resolved


def backend_kwargs(
    name: str, config: BackendConfig, *, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Return the :class:`OpenAICompatBackend` keyword arguments for a policy's backend.

    Options (``options:`` in the policy): ``dialect`` names the dialect profile (or gives
    ``{profile: NAME, field: value}``) instead of the preset's. The config's ``diffusion``
    fields must be ones the dialect accepts.

    Raises:
        PolicyError: Unknown preset or option (a retired one says what to write instead),
            no model, or a missing required key.

    """
    preset, resolved = _resolve(name, config)
    dialect = dialect_for(resolved, backend=name)
    api_key = _api_key(name, resolved, preset, os.environ if env is None else env)
    return {
        "model": resolved.model,
        "base_url": resolved.base_url,
        "api_key": api_key,
        "kind": resolved.kind or "autoregressive",
        "supports_tools": resolved.tools,
        "timeout_s": resolved.timeout_s,
        "params": resolved.params,
        "extra_body": resolved.extra_body,
        "headers": resolved.headers,
        "dialect": dialect,
        "diffusion": resolved.diffusion,
        "config": resolved,
    }
