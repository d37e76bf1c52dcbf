"""The backend registry: a policy's ``type:`` names a factory registered here.

Registries are filled by explicit calls; a factory imports its heavy dependencies when it is
called, not when it is registered. ``openai`` (any OpenAI-compatible endpoint) is registered
by default.

Example:
    ```python
    from tiered_router.backends.registry import build_backend, register_backend_type

    register_backend_type("replay", ReplayBackend.from_config)
    backend = build_backend("fast", policy.backends["fast"])
    ```

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tiered_router.exceptions import PolicyError

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend
    from tiered_router.policy import BackendConfig

__all__ = [
    "BackendFactory",
    "BackendRegistry",
    "backend_types",
    "build_backend",
    "register_backend_type",
]


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
        if defaults:
            self._factories["openai"] = _openai_factory
            self._factories["replay"] = _replay_factory

    def __repr__(self) -> str:
        return f"BackendRegistry(types={self.types})"

    @property
    def types(self) -> tuple[str, ...]:
        """Registered type names, sorted."""
        return tuple(sorted(self._factories))

    def register(self, name: str, factory: BackendFactory, *, replace: bool = False) -> None:
        """Register ``factory`` for backends of type ``name``.

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

    def build(
        self, name: str, config: BackendConfig, *, env: Mapping[str, str] | None = None
    ) -> Backend:
        """Build the backend called ``name`` from its config.

        Raises:
            PolicyError: For an unknown type (the message lists the known ones) or whatever
                the factory rejects (a missing API key names its environment variable).

        """
        factory = self._factories.get(config.type)
        if factory is None:
            raise PolicyError(
                f"unknown backend type {config.type!r} for backend {name!r}; "
                f"known: {', '.join(self.types)}",
                field=f"backends.{name}.type",
            )
        return factory(name, config, env=env)


_DEFAULT = BackendRegistry()


def register_backend_type(name: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Register ``factory`` for policy backends of ``type: name`` in the default registry.

    Raises:
        ValueError: When ``name`` is already registered and ``replace`` is ``False``.

    """
    _DEFAULT.register(name, factory, replace=replace)


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
