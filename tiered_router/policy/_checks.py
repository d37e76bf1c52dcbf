"""The second half of validating a policy: what the router would build from it.

The schema (``policy.py``) checks shapes and types. This pass builds, or checks the way a
build would, every piece :class:`~tiered_router.Router` makes from a policy: each gate check
with its options (regexes compiled), the scorer (heuristic weight names, the learned
scorer's weights file), and each backend's type with its type's own checks (preset, model,
options; never the API key, which a backend checks when it first calls). So a policy that
loads is one ``Router()`` accepts, and ``tiered-router validate`` says so without calling a
model.

Each problem is returned with its path in the policy data, so the loader can name its line.
The pieces are imported here, when a policy is checked, not when this module is imported.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tiered_router.exceptions import PolicyError

if TYPE_CHECKING:
    from tiered_router.gate import CheckRegistry
    from tiered_router.policy._base import Loc as _Loc
    from tiered_router.policy._schema import BackendConfig, GateConfig, Policy, ScoringConfig

__all__ = ["check_policy"]

_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")
_PREFIXED = re.compile(r"(scoring(?:\.[A-Za-z_][A-Za-z0-9_]*)*): (.*)", re.DOTALL)

Problems = list[tuple["_Loc", str]]


def check_policy(policy: Policy, *, check_registry: CheckRegistry | None = None) -> Problems:
    """Return every problem the router would meet building ``policy``, with its data path.

    ``check_registry`` is where gate check names are looked up (the process-wide one when
    ``None``).
    """
    return [
        *_gate_problems(policy.gate, check_registry),
        *_scoring_problems(policy.scoring),
        *(p for name, c in policy.backends.items() for p in _backend_problems(name, c)),
        *_drafts_problems(policy),
    ]


def _drafts_problems(policy: Policy) -> Problems:
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


def _from_error(exc: PolicyError, prefix: _Loc, dotted: str) -> Problems:
    return [(_path(field, prefix, dotted), message) for _, field, message in exc.problems]


def _gate_problems(gate: GateConfig, registry: CheckRegistry | None) -> Problems:
    from tiered_router.gate import default_registry

    registry = registry if registry is not None else default_registry()
    problems: Problems = []
    for i, item in enumerate(gate.checks):
        name, options = (item, {}) if isinstance(item, str) else next(iter(item.items()))
        where = f"gate.checks[{i}]"
        try:
            registry.create(name, options, where=where)
        except PolicyError as exc:
            problems += _from_error(exc, ("gate", "checks", i), where)
    return problems


def _scoring_problems(scoring: ScoringConfig) -> Problems:
    from tiered_router.policy._base import did_you_mean as _did_you_mean
    from tiered_router.scoring import FEATURE_NAMES, build_scorer

    if scoring.type == "heuristic" and scoring.weights:
        known = sorted({*FEATURE_NAMES, "bias"})
        unknown = [name for name in scoring.weights if name not in known]
        if unknown:
            return [
                (("scoring", "weights", n), f"unknown feature {n!r}{_did_you_mean(n, known)}")
                for n in unknown
            ]
    try:
        build_scorer(scoring)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        # build_scorer names the field first: "scoring.options.path: no such file ..."
        match = _PREFIXED.fullmatch(str(exc))
        if match is None:
            return [(("scoring",), str(exc))]
        return [(_path(match.group(1), (), ""), match.group(2))]
    return []


def _backend_problems(name: str, config: BackendConfig) -> Problems:
    from tiered_router.backends.registry import check_backend

    try:
        check_backend(name, config)
    except PolicyError as exc:
        return _from_error(exc, ("backends", name), f"backends.{name}")
    return []
