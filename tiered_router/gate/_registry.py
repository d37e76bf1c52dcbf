"""The registry of named checks: what the policy's ``gate.checks`` names resolve to.

The registry is explicit: a dict filled by :meth:`CheckRegistry.register` calls. The
built-in checks are registered below; custom checks are added from Python with
:func:`register_check` (or on a private :class:`CheckRegistry` given to the gate).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_router.exceptions import PolicyError
from tiered_router.gate._base import Check, CheckFactory
from tiered_router.gate._calls import ToolCallInTextCheck
from tiered_router.gate._count import EnumeratedTargetsCheck
from tiered_router.gate._fit import ToolFitCheck
from tiered_router.gate._grounding import ArgumentGroundingCheck, RequestedToolsCheck
from tiered_router.gate._redundant import RedundantToolCallsCheck
from tiered_router.gate._repetition import RepetitionCheck
from tiered_router.gate._structured import JsonSchemaCheck, ToolArgumentsCheck
from tiered_router.gate._text import (
    MaxCharsCheck,
    NonEmptyCheck,
    NoRefusalCheck,
    NotTruncatedCheck,
    RegexCheck,
)

__all__ = ["CheckRegistry", "check_names", "default_registry", "register_check"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")

if TYPE_CHECKING:
    from tiered_router.policy._checks import Problems
    from tiered_router.policy._schema import Policy


@dataclass(frozen=True, slots=True)
class _Entry:
    check: Check | None
    factory: CheckFactory | None


def _option_problem(
    factory: type[Any], options: Mapping[str, Any]
) -> tuple[str | None, str] | None:
    """Say which option is wrong with ``options`` for a dataclass check and why, or ``None``."""
    fields = [f for f in dataclasses.fields(factory) if f.init and not f.name.startswith("_")]
    known = {f.name for f in fields}
    unknown = sorted(set(options) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        names = ", ".join(sorted(known)) or "(none)"
        hint = f"did you mean {close[0]!r}? (known: {names})" if close else f"known: {names}"
        return unknown[0], f"unknown option {unknown[0]!r}; {hint}"
    missing = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and f.name not in options
    ]
    if missing:
        return None, f"missing option {missing[0]!r}"
    return None


class CheckRegistry:
    """Check names mapped to checks or to factories that build them from options.

    Example:
        ```python
        registry = default_registry().copy()
        registry.register("no_todo", lambda c, t: "has TODO" if "TODO" in c.text else None)
        registry.register("min_chars", factory=MinCharsCheck)   # MinCharsCheck(limit=...)
        gate = QualityGate(["no_todo", ("min_chars", {"limit": 20})], registry=registry)
        ```
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(
        self,
        name: str,
        check: Check | None = None,
        *,
        factory: CheckFactory | None = None,
        replace: bool = False,
    ) -> None:
        """Register a check under ``name``: exactly one of ``check`` and ``factory``.

        Args:
            name: The name policies use (letters, digits, ``_``, ``.``, ``-``).
            check: A ready check that takes no options.
            factory: Called as ``factory(**options)`` with the policy's options for this
                check; returns the check. A check class is a factory.
            replace: Allow replacing a check already registered under ``name``.

        Raises:
            ValueError: On a malformed or already registered name.
            TypeError: When not exactly one of ``check`` and ``factory`` is given, or
                when a class is passed as ``check``.
        """
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"check name {name!r}: use letters, digits, '_', '.' or '-'")
        if (check is None) == (factory is None):
            raise TypeError(f"register({name!r}): give exactly one of check= and factory=")
        if isinstance(check, type):
            raise TypeError(f"register({name!r}): {check.__name__} is a class; pass it as factory=")
        if not callable(check if check is not None else factory):
            raise TypeError(f"register({name!r}): the check or factory must be callable")
        if name in self._entries and not replace:
            raise ValueError(f"check {name!r} is already registered (pass replace=True)")
        self._entries[name] = _Entry(check, factory)

    def unregister(self, name: str) -> None:
        """Remove ``name``.

        Raises:
            KeyError: When no check has that name.
        """
        if name not in self._entries:
            raise KeyError(f"check {name!r} is not registered")
        del self._entries[name]

    def policy_problems(self, policy: Policy) -> Problems:
        """Every problem building ``policy.gate.checks`` from this registry would meet.

        The gate's load-time check (:mod:`tiered_router.policy._checks`): each check is
        built with its options, and each problem comes back with its path in the policy.
        """
        from tiered_router.policy._checks import from_error

        problems: Problems = []
        for i, item in enumerate(policy.gate.checks):
            name, options = (item, {}) if isinstance(item, str) else next(iter(item.items()))
            where = f"gate.checks[{i}]"
            try:
                self.create(name, options, where=where)
            except PolicyError as exc:
                problems += from_error(exc, ("gate", "checks", i), where)
        return problems

    def create(
        self, name: str, options: Mapping[str, Any] | None = None, *, where: str = "gate.checks"
    ) -> Check:
        """Return the check registered as ``name``, built with ``options``.

        Args:
            name: A registered name.
            options: The check's options (the policy's ``{name: {options}}`` form).
            where: The policy field reported in errors, e.g. ``gate.checks[2]``.

        Raises:
            PolicyError: On an unknown name (the message lists the known ones), options
                given to a check that takes none, or options its factory rejects.
        """
        entry = self._entries.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, self.names(), n=1)
            known = ", ".join(self.names())
            hint = f"did you mean {close[0]!r}? (known: {known})" if close else f"known: {known}"
            raise PolicyError(f"unknown check {name!r}; {hint}", field=where)
        options = dict(options or {})
        if entry.check is not None:
            if options:
                raise PolicyError(
                    f"check {name!r} takes no options, got {', '.join(sorted(options))}",
                    field=where,
                )
            return entry.check
        factory = entry.factory
        assert factory is not None  # register() guarantees one of the two
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            problem = _option_problem(factory, options)
            if problem is not None:
                option, message = problem
                field = where if option is None else f"{where}.{name}.{option}"
                raise PolicyError(f"check {name!r}: {message}", field=field)
        try:
            return factory(**options)
        except (TypeError, ValueError) as exc:
            # checks name the option they reject first: "regex.pattern: invalid ..."
            message, field = str(exc), where
            for option in options:
                if message.startswith(f"{name}.{option}: "):
                    field = f"{where}.{name}.{option}"
            raise PolicyError(f"check {name!r}: {message}", field=field) from exc

    def names(self) -> tuple[str, ...]:
        """Return the registered names, sorted."""
        return tuple(sorted(self._entries))

    def copy(self) -> CheckRegistry:
        """Return an independent registry with the same entries."""
        other = CheckRegistry()
        other._entries = dict(self._entries)
        return other

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"CheckRegistry({list(self.names())})"


_DEFAULT = CheckRegistry()
_DEFAULT.register("non_empty", factory=NonEmptyCheck)
_DEFAULT.register("not_truncated", factory=NotTruncatedCheck)
_DEFAULT.register("no_refusal", factory=NoRefusalCheck)
_DEFAULT.register("repetition", factory=RepetitionCheck)
_DEFAULT.register("json_schema", factory=JsonSchemaCheck)
_DEFAULT.register("tool_arguments", factory=ToolArgumentsCheck)
_DEFAULT.register("regex", factory=RegexCheck)
_DEFAULT.register("max_chars", factory=MaxCharsCheck)
_DEFAULT.register("tool_call_in_text", factory=ToolCallInTextCheck)
_DEFAULT.register("redundant_tool_calls", factory=RedundantToolCallsCheck)
_DEFAULT.register("argument_grounding", factory=ArgumentGroundingCheck)
_DEFAULT.register("requested_tools", factory=RequestedToolsCheck)
_DEFAULT.register("tool_fit", factory=ToolFitCheck)
_DEFAULT.register("enumerated_targets", factory=EnumeratedTargetsCheck)


def default_registry() -> CheckRegistry:
    """Return the process-wide registry: the built-ins plus what :func:`register_check` added."""
    return _DEFAULT


def register_check(
    name: str,
    check: Check | None = None,
    *,
    factory: CheckFactory | None = None,
    replace: bool = False,
) -> None:
    """Register a custom check in the process-wide registry, for policies to name.

    Give a ready ``check`` (a callable ``(completion, turn) -> str | Iterable[str] | None``
    that takes no options) or a ``factory`` called with the policy's options.

    Example:
        ```python
        def no_todo(completion, turn):
            return "draft contains TODO" if "TODO" in completion.text else None

        register_check("no_todo", no_todo)
        register_check("min_chars", factory=MinCharsCheck)  # policy: {min_chars: {limit: 20}}
        ```

    Raises:
        ValueError: When the name is malformed or taken (pass ``replace=True``).
        TypeError: When not exactly one of ``check`` and ``factory`` is given.
    """
    _DEFAULT.register(name, check, factory=factory, replace=replace)


def check_names() -> tuple[str, ...]:
    """Return the names the process-wide registry knows, sorted."""
    return _DEFAULT.names()
