"""Point a policy's backends at a :class:`ScriptedServer`: any policy, offline, no keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import SecretStr

from tiered_router.policy import load_policy
from tiered_router.policy._schema import Policy

if TYPE_CHECKING:
    from tiered_router._types import PolicySource

__all__ = ["stand_in"]

_KEY = "scripted-test-key"
_KEY_REF = "${SCRIPTED_SERVER_KEY:-scripted-test-key}"  # how to_yaml() writes the test key


def stand_in(policy: Policy | PolicySource, base_url: str) -> Policy:
    """Return ``policy`` with every OpenAI-compatible backend sent to ``base_url``.

    Each backend keeps its model, preset (named or inferred from its old URL, so prices and
    dialects still apply), gate and rules; its key becomes a test key. Other backend
    types (``replay``) are left alone. No environment variable needs to be set. The result
    can be written as YAML (:meth:`Policy.to_yaml`): the test key is written as
    ``${SCRIPTED_SERVER_KEY:-scripted-test-key}``, other keys stay ``${VAR}`` references.
    """
    from tiered_router.backends.presets import preset_for

    loaded = load_policy(policy)
    backends = {}
    templates = dict(loaded._templates)
    for name, config in loaded.backends.items():
        if config.type == "openai":
            templates[("backends", name, "api_key")] = (_KEY_REF, _KEY)
            preset = preset_for(config, backend=name)
            config = config.model_copy(
                update={
                    "base_url": base_url,
                    "api_key": SecretStr(_KEY),
                    "api_key_env": None,
                    "preset": preset.name if preset is not None else None,
                }
            )
        backends[name] = config
    out = loaded.model_copy(update={"backends": backends})
    out._templates = templates
    return out
