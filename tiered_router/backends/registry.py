"""The backend registry: a policy's ``type:`` names a factory registered here.

Registries are filled by explicit calls; a factory imports its heavy dependencies when it is
called, not when it is registered. ``openai`` (any OpenAI-compatible endpoint) and ``replay``
are registered by default. A type may also register a ``check``: what loading a policy runs
on each backend of that type (preset, model, options), without building it or reading keys.

Example:
    ```python
    from tiered_router.backends.registry import build_backend, register_backend_type

    register_backend_type("replay", ReplayBackend.from_config)
    backend = build_backend("fast", policy.backends["fast"])
    ```

"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from tiered_router.exceptions import PolicyError
from tiered_router.policy._schema import BackendConfig

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend
    from tiered_router.backends.openai_compat import OpenAICompatBackend
    from tiered_router.policy._checks import Problems
    from tiered_router.policy._schema import Policy

__all__ = [
    "BackendCheck",
    "BackendFactory",
    "BackendRegistry",
    "backend_problems",
    "backend_types",
    "build_backend",
    "check_backend",
    "from_preset",
    "local_diffusion",
    "mercury2",
    "openai_backend",
    "register_backend_type",
]

BackendCheck = Callable[[str, "BackendConfig"], None]
"""Checks a backend's config as loading a policy does: raises ``PolicyError`` naming the field.

It must not build the backend, read secrets or do I/O."""


class BackendFactory(Protocol):
    """Builds a backend from its name and policy config.

    ``env`` is where secrets are looked up (``os.environ`` when ``None``); factories read it
    when called, never at import time.
    """

    def __call__(
        self, name: str, config: BackendConfig, /, *, env: Mapping[str, str] | None = None
    ) -> Backend:
        """Return the backend called ``name``."""
        ...


def _openai_factory(
    name: str, config: BackendConfig, /, *, env: Mapping[str, str] | None = None
) -> Backend:
    from tiered_router.backends.openai_compat import OpenAICompatBackend

    return OpenAICompatBackend.from_config(name, config, env=env)


def _openai_check(name: str, config: BackendConfig, /) -> None:
    from tiered_router.backends.presets import check_config

    check_config(name, config)


_REPLAY_OPTIONS = ("data", "outcome_model", "prefer_recorded_latency")


def _replay_check(name: str, config: BackendConfig, /) -> None:
    unknown = sorted(set(config.options) - set(_REPLAY_OPTIONS))
    if unknown:
        raise PolicyError(
            f"unknown option {unknown[0]!r} for a replay backend; known: "
            + ", ".join(_REPLAY_OPTIONS),
            field=f"backends.{name}.options.{unknown[0]}",
        )
    # no `data` is fine: `tiered-router eval --data` and Replay.bind supply the dataset
    data = config.options.get("data")
    if data is not None and not isinstance(data, str):
        raise PolicyError(
            f"options.data must be a dataset file or data name, got {type(data).__name__}",
            field=f"backends.{name}.options.data",
        )


def _replay_factory(
    name: str, config: BackendConfig, /, *, env: Mapping[str, str] | None = None
) -> Backend:
    from tiered_router.evaluation.replay import replay_backend_factory

    return replay_backend_factory(name, config, env=env)


class BackendRegistry:
    """Backend types by name.

    Example:
        ```python
        registry = BackendRegistry()                  # has "openai"
        registry.register("replay", replay_factory)
        backend = registry.build("fast", config)
        ```

    """

    def __init__(self, *, defaults: bool = True) -> None:
        self._factories: dict[str, BackendFactory] = {}
        self._checks: dict[str, BackendCheck] = {}
        if defaults:
            self.register("openai", _openai_factory, check=_openai_check)
            self.register("replay", _replay_factory, check=_replay_check)

    def __repr__(self) -> str:
        return f"BackendRegistry(types={self.types})"

    @property
    def types(self) -> tuple[str, ...]:
        """Registered type names, sorted."""
        return tuple(sorted(self._factories))

    def register(
        self,
        name: str,
        factory: BackendFactory,
        *,
        check: BackendCheck | None = None,
        replace: bool = False,
    ) -> None:
        """Register ``factory`` for backends of type ``name``.

        Args:
            name: The ``type:`` policies use.
            factory: Builds a backend of this type.
            check: Run on each backend of this type when a policy is loaded; raises
                ``PolicyError`` for a config the factory would reject (keys aside).
            replace: Allow replacing a type already registered.

        Raises:
            ValueError: When ``name`` is empty, or already registered and ``replace`` is
                ``False``.

        """
        if not name:
            raise ValueError("backend type name must be a non-empty string")
        if name in self._factories and not replace:
            raise ValueError(
                f"backend type {name!r} is already registered; pass replace=True to override"
            )
        self._factories[name] = factory
        self._checks.pop(name, None)
        if check is not None:
            self._checks[name] = check

    def check(self, name: str, config: BackendConfig) -> None:
        """Check backend ``name``'s config as loading a policy does, without building it.

        Raises:
            PolicyError: For an unknown type (the message lists the known ones) or what the
                type's check rejects.

        """
        self._factory(name, config)
        check = self._checks.get(config.type)
        if check is not None:
            check(name, config)

    def _factory(self, name: str, config: BackendConfig) -> BackendFactory:
        factory = self._factories.get(config.type)
        if factory is None:
            from tiered_router.policy._base import unknown as _unknown

            raise PolicyError(
                _unknown("backend type", config.type, self.types),
                field=f"backends.{name}.type",
            )
        return factory

    def build(
        self, name: str, config: BackendConfig, *, env: Mapping[str, str] | None = None
    ) -> Backend:
        """Build the backend called ``name`` from its config.

        Raises:
            PolicyError: For an unknown type (the message lists the known ones) or whatever
                the factory rejects (a missing API key names its environment variable).

        """
        return self._factory(name, config)(name, config, env=env)


_DEFAULT = BackendRegistry()


def register_backend_type(
    name: str,
    factory: BackendFactory,
    *,
    check: BackendCheck | None = None,
    replace: bool = False,
) -> None:
    """Register ``factory`` for policy backends of ``type: name`` in the default registry.

    ``check`` (optional) runs on each backend of this type when a policy is loaded; see
    :meth:`BackendRegistry.register`. Register before loading the policies that use the type.

    Raises:
        ValueError: When ``name`` is already registered and ``replace`` is ``False``.

    """
    _DEFAULT.register(name, factory, check=check, replace=replace)


def check_backend(name: str, config: BackendConfig) -> None:
    """Check a policy's backend with the default registry, as loading a policy does.

    Raises:
        PolicyError: Unknown type, or what the type's check rejects (preset, model, options).

    """
    _DEFAULT.check(name, config)


def backend_problems(policy: Policy) -> Problems:
    """Every problem checking ``policy``'s backends would meet (the backends' load-time check).

    Each backend is checked by its type with the default registry (preset, model, options;
    never the API key); each problem comes back with its path in the policy.
    """
    from tiered_router.policy._checks import from_error

    problems: Problems = []
    for name, config in policy.backends.items():
        try:
            check_backend(name, config)
        except PolicyError as exc:
            problems += from_error(exc, ("backends", name), f"backends.{name}")
    return problems + _greedy_panel_problems(policy)


def _greedy_panel_problems(policy: Policy) -> Problems:
    """A same-prompt panel on a server that decodes greedily: its drafts would be identical."""
    drafts = policy.drafts
    if drafts is None:
        return []
    names = drafts.backends or [policy.tiers.fast]
    if len(names) > 1 or len({v.strip() for v in drafts.variants}) > 1:
        return []
    config = policy.backends.get(names[0])
    if config is None or config.type != "openai":
        return []
    from tiered_router.backends.presets import dialect_for

    try:
        dialect = dialect_for(config, backend=names[0])
    except PolicyError:
        return []  # the backend's own check reports it
    if not dialect.greedy:
        return []
    return [
        (
            ("drafts",),
            f"a panel of {drafts.k} drafts of the same prompt on backend {names[0]!r}, whose "
            f"{dialect.name!r} dialect decodes greedily (temperature is ignored): every draft "
            "would be the same, so their agreement would say nothing. Give `variants` (at "
            "least two different per-draft instructions) or a second fast backend in "
            "`backends`",
        )
    ]


def build_backend(
    name: str, config: BackendConfig, *, env: Mapping[str, str] | None = None
) -> Backend:
    """Build a policy's backend with the default registry.

    Args:
        name: The backend's name in the policy.
        config: Its config.
        env: Where to look up API keys; ``os.environ`` when ``None``.

    Raises:
        PolicyError: Unknown type, missing model or API key, bad options.

    """
    return _DEFAULT.build(name, config, env=env)


def backend_types() -> tuple[str, ...]:
    """Type names registered in the default registry."""
    return _DEFAULT.types


def _build(
    preset: str, name: str, api_key: str | None, fields: dict[str, Any]
) -> OpenAICompatBackend:
    from tiered_router.backends.openai_compat import OpenAICompatBackend
    from tiered_router.backends.presets import backend_kwargs

    http = {k: fields.pop(k) for k in ("http_client", "async_http_client") if k in fields}
    if api_key is not None:
        fields["api_key"] = api_key
    try:
        config = BackendConfig(preset=preset, **fields)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise PolicyError(problems, field=f"backends.{name}") from None
    return OpenAICompatBackend(name, **backend_kwargs(name, config), **http)


def mercury2(
    *, name: str = "mercury", api_key: str | None = None, **fields: Any
) -> OpenAICompatBackend:
    """Return a Mercury 2 backend (Inception's diffusion model).

    Args:
        name: The backend's name.
        api_key: The key; by default read from ``INCEPTION_API_KEY`` now.
        **fields: Other :class:`~tiered_router.policy.BackendConfig` fields (``model``,
            ``timeout_s``, ``params``, ``extra_body``, ``options``...) or ``http_client`` /
            ``async_http_client``.

    Raises:
        PolicyError: When no key is given and ``INCEPTION_API_KEY`` is unset.

    """
    return _build("mercury-2", name, api_key, fields)


def openai_backend(
    *, name: str = "openai", model: str, api_key: str | None = None, **fields: Any
) -> OpenAICompatBackend:
    """Return an OpenAI backend.

    Args:
        name: The backend's name.
        model: The model, e.g. ``gpt-5.2``.
        api_key: The key; by default read from ``OPENAI_API_KEY`` now.
        **fields: Other backend config fields, or ``http_client`` / ``async_http_client``.

    Raises:
        PolicyError: When no key is given and ``OPENAI_API_KEY`` is unset.

    """
    return _build("openai", name, api_key, {"model": model, **fields})


def local_diffusion(
    *, name: str = "local", model: str, base_url: str | None = None, **fields: Any
) -> OpenAICompatBackend:
    """Return a backend for a local diffusion server (SGLang, vLLM, dlmserve, ...).

    Args:
        name: The backend's name.
        model: The model the server serves.
        base_url: The server, by default ``http://127.0.0.1:30000/v1`` (SGLang's port).
        **fields: Other backend config fields (``extra_body`` for diffusion knobs such as
            ``num_denoising_steps``; ``tools=True`` if the server supports tools), or
            ``http_client`` / ``async_http_client``.

    """
    if base_url is not None:
        fields["base_url"] = base_url
    api_key = fields.pop("api_key", None)
    return _build("local-diffusion", name, api_key, {"model": model, **fields})


def from_preset(
    preset: str, *, name: str | None = None, api_key: str | None = None, **fields: Any
) -> OpenAICompatBackend:
    """Return a backend for any preset (``dlmserve``, ``sglang``, ``vllm``, ...).

    Example:
        ```python
        llada = from_preset("dlmserve", diffusion={"num_denoising_steps": 32})
        ```

    Args:
        preset: The preset's name.
        name: The backend's name (the preset's name by default).
        api_key: The key, when the endpoint needs one.
        **fields: Other backend config fields (``model``, ``base_url``, ``diffusion``,
            ``options``...) or ``http_client`` / ``async_http_client``.

    Raises:
        PolicyError: Unknown preset, missing model or key, diffusion fields the dialect
            does not accept.

    """
    return _build(preset, name or preset, api_key, fields)
