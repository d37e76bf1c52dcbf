"""The second half of validating a policy: what the router would build from it.

The schema (``_schema``) checks shapes and types. This pass runs the load-time checks the
wings that build from a policy provide, each through its own registry: the gate (each check
with its options, regexes compiled: ``CheckRegistry.policy_problems``), the scorer
(``scoring.scoring_problems``: heuristic weight names, the learned scorer's weights file) and
the backends (``backends.registry.backend_problems``: each backend's type with its type's own
checks; never the API key, which a backend checks when it first calls). The policy face
(:func:`tiered_router.policy.load_policy`) hands them to the loader, so this module imports
none of those wings, and a policy that loads is one ``Router()`` accepts.

Each problem is returned with its path in the policy data, so the loader can name its line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiered_router.exceptions import PolicyError
    from tiered_router.policy._base import Loc as _Loc
    from tiered_router.policy._schema import Policy

__all__ = ["LoadCheck", "Problems", "check_policy", "from_error", "from_message"]

_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")

Problems = list[tuple["_Loc", str]]
LoadCheck = Callable[["Policy"], Problems]
"""One wing's load-time check: every problem it would meet building from the policy."""


def check_policy(policy: Policy, checks: Sequence[LoadCheck]) -> Problems:
    """Return every problem ``checks`` find in ``policy``, each with its data path."""
    return [problem for check in checks for problem in check(policy)]


def _path(field: str | None, prefix: _Loc, dotted: str) -> _Loc:
    """The data path of ``field`` (a dotted field named by a builder) under ``prefix``.

    ``dotted`` is ``prefix`` as the builder wrote it; names inside it may hold dots (a
    backend called ``gpt-5.2``), so it is stripped as a whole rather than split.
    """
    if field is None or not field.startswith(dotted):
        return prefix
    rest = field[len(dotted) :]
    parts: list[str | int] = []
    for index, name in _PART.findall(rest):
        parts.append(int(index) if index else name)
    return (*prefix, *parts)


def from_error(exc: PolicyError, prefix: _Loc, dotted: str) -> Problems:
    """The problems of a builder's :class:`PolicyError`, under ``prefix`` (``dotted``)."""
    return [(_path(field, prefix, dotted), message) for _, field, message in exc.problems]


def from_message(message: str, section: str) -> Problems:
    """One problem from a builder's message that may start with its field (``a.b: ...``)."""
    prefixed = rf"({re.escape(section)}(?:\.[A-Za-z_][A-Za-z0-9_]*)*): (.*)"
    match = re.fullmatch(prefixed, message, re.DOTALL)
    if match is None:
        return [((section,), message)]
    return [(_path(match.group(1), (), ""), match.group(2))]
