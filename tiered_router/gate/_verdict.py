"""The gate's result values."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CheckFailure", "Verdict"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckFailure:
    """One failed check.

    Attributes:
        check: The check's name (``json_schema``, ``tool_arguments``, ...).
        reason: Why it failed, with a location where there is one (``$.answer: required``).
    """

    check: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The gate's verdict on one draft. A failed gate is a value, never an exception.

    Attributes:
        passed: ``True`` when every check passed.
        failures: Every failure, in check order.
        checks: Names of the checks that ran.
    """

    passed: bool
    failures: tuple[CheckFailure, ...] = ()
    checks: tuple[str, ...] = ()

    @property
    def failed_checks(self) -> tuple[str, ...]:
        """Names of the failed checks, without repeats, in order."""
        return tuple(dict.fromkeys(f.check for f in self.failures))

    @property
    def reasons(self) -> tuple[str, ...]:
        """``check: reason`` for every failure."""
        return tuple(f"{f.check}: {f.reason}" for f in self.failures)

    def __bool__(self) -> bool:
        return self.passed
