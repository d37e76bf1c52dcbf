"""``--stand-in``: run a command against a scripted upstream instead of the policy's providers.

``run --stand-in``, ``serve --stand-in`` and ``demo --serve`` start
:class:`~tiered_router.testing.ScriptedServer` on 127.0.0.1, point every OpenAI-compatible
backend of the policy at it (models, presets, prices, rules and gate kept; see
:meth:`ScriptedServer.stand_in`) and write that policy to a temporary file with
:meth:`Policy.to_yaml`, so every worker process of ``serve`` reads the same one. No key is
needed and nothing leaves the machine; the upstream answers with
:func:`~tiered_router.testing._stand_in.plausible_reply` (a call of the first tool offered,
JSON of a requested schema, or a short text).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_router._types import PolicySource
    from tiered_router.policy import Policy

__all__ = ["require_server", "stand_in_policy"]


def require_server() -> None:
    """Raise the server extra's ImportError before a stand-in upstream is started for nothing.

    Raises:
        ImportError: When a package of the ``server`` extra is missing (the message names it).

    """
    import importlib.util

    from tiered_router.exceptions import missing_extra

    for module in ("starlette", "uvicorn", "prometheus_client"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(missing_extra("server", f"the proxy needs {module}"))


@contextmanager
def stand_in_policy(policy: Policy | PolicySource) -> Iterator[tuple[Path, Any]]:
    """Start the scripted upstream; yield the stand-in policy's file and the server.

    Raises:
        PolicyError: When the policy does not load.

    """
    from tiered_router.testing import ScriptedServer
    from tiered_router.testing._stand_in import plausible_reply

    with ScriptedServer(default=plausible_reply) as upstream:
        text = upstream.stand_in(policy).to_yaml()
        with tempfile.TemporaryDirectory(prefix="tiered-router-stand-in-") as folder:
            path = Path(folder) / "policy.yaml"
            path.write_text(text, encoding="utf-8")
            yield path, upstream
