"""Writing a policy back as YAML: what :meth:`Policy.to_yaml` returns.

The text loads back (:func:`~tiered_router.load_policy`) into an equal policy. Values that
were read from the environment are written as the ``${VAR}`` references they came from, as
long as they still hold the value read; a secret (an API key, client keys, a Redis URL, a
header that looks like a credential) is never written in clear: without its reference the
writer refuses with a :class:`~tiered_router.PolicyError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import SecretStr

from tiered_router.exceptions import PolicyError
from tiered_router.policy._base import Loc, dotted


class Policy(Protocol):
    """What the writer reads of the schema's ``Policy`` (which imports this module)."""

    @property
    def version(self) -> int:
        """The policy format's version."""
        ...

    def model_dump(self, *, mode: str, exclude_unset: bool) -> dict[str, Any]:
        """Dump the policy's fields."""
        ...


__all__ = ["Templates", "policy_yaml"]

Templates = Mapping[Loc, tuple[str, str]]
"""``{path: (template, value it gave)}`` for every value interpolated from ``${VAR}``."""

# the loader's notion of a field that may hold a secret (keys, tokens, headers, ...)
_SECRET = re.compile(
    r"(?i)(^|_)(api_?keys?|keys?|token|secret|password|authorization|headers)($|_)"
)
_NOT_SECRET = frozenset({"api_key_env"})  # the name of a variable, not its value


def _secret_path(path: Loc) -> bool:
    return any(isinstance(el, str) and el not in _NOT_SECRET and _SECRET.search(el) for el in path)


def _restore(value: Any, raw: Any, path: Loc, templates: Templates) -> Any:
    """``value`` (JSON-ready) with references put back; raises on a secret in clear."""
    if isinstance(value, dict):
        fields = raw if isinstance(raw, dict) else {}
        return {k: _restore(v, fields.get(k), (*path, k), templates) for k, v in value.items()}
    if isinstance(value, list):
        items = raw if isinstance(raw, list) else []
        return [
            _restore(v, items[i] if i < len(items) else None, (*path, i), templates)
            for i, v in enumerate(value)
        ]
    current = raw.get_secret_value() if isinstance(raw, SecretStr) else value
    found = templates.get(path)
    if found is not None and str(current) == found[1]:
        return found[0]
    secret = isinstance(raw, SecretStr) or _secret_path(path)
    if secret and current not in (None, ""):
        raise PolicyError(
            "a secret given in clear is not written to YAML: give it as a ${VAR} reference "
            "when loading the policy (api_key: ${OPENAI_API_KEY}) or set api_key_env",
            field=dotted(path),
        )
    return value


def policy_yaml(policy: Policy, templates: Templates) -> str:
    """Return ``policy`` as YAML text that :func:`load_policy` reads back into it.

    Raises:
        PolicyError: When a secret would be written in clear (the field is named).

    """
    import yaml

    shown = policy.model_dump(mode="json", exclude_unset=True)
    raw = policy.model_dump(mode="python", exclude_unset=True)
    data = _restore(shown, raw, (), templates)
    data.setdefault("version", policy.version)
    ordered = {"version": data.pop("version"), **data}
    return str(yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100))
