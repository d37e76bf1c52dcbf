"""One home per dialect rule: a server's roles, value ranges, ``stop`` and ``tool_choice``
rules are declared in its dialect profile only, and applied in the dialect's shape only.

Before, ``Quirks`` (backends/_quirks.py) and ``DialectProfile`` both declared roles, value
ranges and stop: Mercury 2's ``developer -> system`` rule lived in both, and a profile
overridden in a policy still had the quirks rewrite the request behind it. These tests fail
on that code (the ``Quirks`` dataclass and its ``QUIRKS`` table; ``_shaping`` reading
``q.max_stop``; the override test below, where the quirks still rewrote the request).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import tiered_router
import tiered_router.backends as backends_wing
from tiered_router.backends import DIALECTS, from_preset
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends._dialect import DialectProfile
from tiered_router.backends._dialect_shape import Plan
from tiered_router.backends._wire import Call
from tiered_router.policy import BackendConfig
from tiered_router.testing import Reply, ScriptedServer

RULE_KINDS = {
    "roles": re.compile(r"role|developer"),
    "value ranges": re.compile(r"range"),
    "stop": re.compile(r"stop"),
    "tool_choice": re.compile(r"tool_choice"),
}
"""A rule kind, and the field names that declare a rule of it."""

NOT_RULES = {
    Plan: "what one request's shape decided (its stop sequences, its tool_choice)",
    CompletionRequest: "one request, not a server's rule",
    Call: "one HTTP call",
}

PACKAGE = Path(tiered_router.__file__).parent
RULE_ATTRIBUTES = frozenset({"roles", "ranges", "max_stop", "named_tool_choice"})
APPLIERS = frozenset({"_dialect.py", "_dialect_shape.py", "_profiles.py"})


def _backend_modules() -> Iterator[Any]:
    for info in pkgutil.iter_modules(backends_wing.__path__):
        yield importlib.import_module(f"tiered_router.backends.{info.name}")


def _field_names(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(getattr(cls, "model_fields", {}))


def _kinds(names: list[str]) -> set[str]:
    return {kind for kind, pattern in RULE_KINDS.items() for n in names if pattern.search(n)}


def _declarers() -> dict[str, set[str]]:
    """Rule kind -> the classes (in backends/, and the policy's backend config) declaring it."""
    classes: list[type] = [BackendConfig]
    for module in _backend_modules():
        classes += [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj)
            and obj.__module__ == module.__name__
            and (dataclasses.is_dataclass(obj) or hasattr(obj, "model_fields"))
        ]
    found: dict[str, set[str]] = {kind: set() for kind in RULE_KINDS}
    for cls in classes:
        if cls in NOT_RULES:
            continue
        for kind in _kinds(_field_names(cls)):
            found[kind].add(cls.__qualname__)
    return found


def test_every_rule_kind_is_declared_by_the_dialect_profile_only() -> None:
    found = _declarers()
    assert found == {kind: {"DialectProfile"} for kind in RULE_KINDS}, found


def test_only_the_dialect_table_holds_rules() -> None:
    """The preset tables hold no rule: a new provider's rule has one place, its profile."""
    tables: dict[int, str] = {}  # a table re-exported elsewhere is the same object
    for module in _backend_modules():
        for name, value in vars(module).items():
            if not isinstance(value, Mapping) or not value:
                continue
            rows = [v for v in value.values() if dataclasses.is_dataclass(v)]
            if any(_kinds(_field_names(type(row))) for row in rows):
                tables.setdefault(id(value), f"{module.__name__.rsplit('.', 1)[-1]}.{name}")
    assert sorted(tables.values()) == ["_profiles.DIALECTS"], tables
    assert all(isinstance(p, DialectProfile) for p in DIALECTS.values())


def test_rules_are_applied_by_the_dialect_shape_only() -> None:
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "backends" and path.name in APPLIERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in RULE_ATTRIBUTES:
                readers.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert readers == []


def test_a_rule_overridden_in_the_profile_is_not_applied_behind_it(
    server: ScriptedServer,
) -> None:
    """Mercury 2's preset with its rules overridden: nothing else rewrites the request."""
    everything = {
        "profile": "mercury-2",
        "roles": ["system", "developer", "user", "assistant", "tool"],
        "ranges": {},
        "max_stop": None,
        "named_tool_choice": True,
    }
    tool = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
    other = {"type": "function", "function": {"name": "put", "parameters": {"type": "object"}}}
    backend = from_preset(
        "mercury-2", base_url=server.base_url, api_key="k", options={"dialect": everything}
    )
    server.script([Reply.text("ok")])
    done = backend.complete(
        CompletionRequest(
            messages=[
                {"role": "developer", "content": "Be terse."},
                {"role": "user", "content": "hi"},
            ],
            tools=[tool, other],
            params={
                "temperature": 0,
                "max_tokens": 90_000,
                "stop": list("abcdef"),
                "tool_choice": {"type": "function", "function": {"name": "put"}},
            },
            timeout_s=5,
        )
    )
    backend.close()
    sent = server.requests[-1].body
    assert [m["role"] for m in sent["messages"]] == ["developer", "user"]
    assert (sent["temperature"], sent["max_tokens"], sent["stop"]) == (0, 90_000, list("abcdef"))
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "put"}}
    assert len(sent["tools"]) == 2
    assert done.conversions == ()
