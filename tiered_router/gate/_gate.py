"""The :class:`QualityGate`: runs every check on a draft and returns a :class:`Verdict`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tiered_router.exceptions import PolicyError
from tiered_router.gate._base import Check, check_name
from tiered_router.gate._lifting import lift_text_tool_calls
from tiered_router.gate._registry import CheckRegistry, default_registry
from tiered_router.gate._verdict import CheckFailure, Verdict
from tiered_router.turn import Completion, Turn

if TYPE_CHECKING:
    from tiered_router.policy._schema import GateConfig

__all__ = ["CheckSpec", "QualityGate"]

logger = logging.getLogger(__name__)

CheckSpec = (
    Check | str | tuple[str, Mapping[str, Any] | None] | Mapping[str, Mapping[str, Any] | None]
)
"""How a check is named to :class:`QualityGate`: a check object, a registered name, a
``(name, options)`` pair, or the policy's one-key ``{name: {options}}`` mapping."""


def _build(spec: object, index: int, registry: CheckRegistry) -> tuple[str, Check]:
    where = f"gate.checks[{index}]"
    if isinstance(spec, str):
        return spec, registry.create(spec, where=where)
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise PolicyError(f"expected (name, options), got {spec!r:.120}", field=where)
        name, options = spec
        return name, registry.create(name, _options(options, where), where=where)
    if isinstance(spec, Mapping):
        if len(spec) != 1:
            raise PolicyError(
                f"a check mapping has exactly one key (the check's name), got {list(spec)}",
                field=where,
            )
        ((name, options),) = spec.items()
        if not isinstance(name, str):
            raise PolicyError(f"check name must be a string, got {name!r}", field=where)
        return name, registry.create(name, _options(options, f"{where}.{name}"), where=where)
    if callable(spec):
        check: Check = spec
        return check_name(check), check
    raise PolicyError(
        f"expected a check name, (name, options), {{name: options}} or a callable, "
        f"got {type(spec).__name__}",
        field=where,
    )


def _options(options: object, where: str) -> Mapping[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise PolicyError(f"options must be a mapping, got {type(options).__name__}", field=where)
    return options


def _failures(name: str, result: object) -> list[CheckFailure]:
    """Turn what a check returned into failures (none when it passed)."""
    if result is None:
        return []
    if isinstance(result, str):
        return [CheckFailure(check=name, reason=result or "failed (no reason given)")]
    if not isinstance(result, Iterable) or isinstance(result, (bytes, Mapping)):
        return [
            CheckFailure(
                check=name,
                reason=f"check returned {type(result).__name__}; expected None, a reason "
                "string or an iterable of reasons",
            )
        ]
    failures = []
    for reason in result:
        if not isinstance(reason, str):
            reason = f"check returned a non-string reason: {reason!r:.120}"
        failures.append(CheckFailure(check=name, reason=reason or "failed (no reason given)"))
    return failures


class QualityGate:
    """Runs deterministic checks on a draft and returns a :class:`Verdict`.

    Every check runs, in order, and every failure is collected. A failed check is a value,
    never an exception: a check that raises is reported as a failure of that check (with
    the exception's type and message), and the other checks still run.

    Example:
        ```python
        gate = QualityGate(
            ["non_empty", "not_truncated", ("repetition", {"max_ratio": 0.4}), no_todo]
        )
        verdict = gate.evaluate(completion, turn)
        if not verdict.passed:
            print(verdict.reasons)        # ("repetition: repetition loop: 72% ...",)
        gate = QualityGate.from_config(policy.gate)
        ```

    A draft whose whole answer is tool calls to the turn's tools, in a common text format
    (``[get_weather(city='Paris')]``, ``{"name": ..., "arguments": ...}``,
    ``<tool_call>...</tool_call>``, see :func:`~tiered_router.gate.parse_text_tool_calls`),
    that pass the lifting rules (offered tools, ``tool_choice``, arguments that validate) is
    judged as those calls. Text that is only calls but breaks a rule stays text, and
    ``tool_call_in_text`` fails it with the rule it breaks.

    Args:
        checks: Check objects, registered names, ``(name, options)`` pairs or one-key
            ``{name: options}`` mappings, in the order they run.
        registry: Where names are looked up; the process-wide registry by default.
        text_tool_calls: Read tool calls written as text (see above); ``False`` judges the
            text as text (``tool_call_in_text`` then fails it).

    Raises:
        PolicyError: On an unknown name (listing the known ones) or bad options; the
            error's field is ``gate.checks[i]``.
    """

    __slots__ = ("_checks", "_names", "_text_tool_calls")

    def __init__(
        self,
        checks: Sequence[CheckSpec],
        *,
        registry: CheckRegistry | None = None,
        text_tool_calls: bool = True,
    ) -> None:
        if isinstance(checks, (str, Mapping)):
            raise TypeError("QualityGate(checks): pass a list of checks, not a single one")
        registry = registry if registry is not None else default_registry()
        self._checks = tuple(_build(spec, i, registry) for i, spec in enumerate(checks))
        self._names = tuple(name for name, _ in self._checks)
        self._text_tool_calls = text_tool_calls

    @classmethod
    def from_config(
        cls, config: GateConfig, *, registry: CheckRegistry | None = None
    ) -> QualityGate:
        """Build the gate a policy's ``gate:`` section describes."""
        return cls(config.checks, registry=registry, text_tool_calls=config.text_tool_calls)

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the checks, in the order they run."""
        return self._names

    def needs_whole_draft(self, turn: Turn) -> bool:
        """Whether a draft for ``turn`` must be read whole before its first chunk is sent.

        Each check says so through its optional ``needs_whole_draft(turn)`` method; a check
        without one (a custom check) needs the whole draft. Routed streams ask this to
        choose between buffering a draft and streaming it straight through.
        """
        for _, check in self._checks:
            needs = getattr(check, "needs_whole_draft", None)
            if needs is None or needs(turn):
                return True
        return False

    def lift(self, completion: Completion, turn: Turn) -> Completion:
        """Return ``completion`` with tool calls written as its whole text made real calls.

        What :meth:`evaluate` judges: a draft for a turn with tools, with no native calls,
        whose whole answer is calls under the lifting rules (offered tools, ``tool_choice``,
        arguments that validate; see :func:`~tiered_router.gate.lift_text_tool_calls`), comes
        back with those calls, no text and ``finish_reason="tool_calls"``. Any other draft,
        or any draft when the gate was built with ``text_tool_calls=False``, comes back as it
        is (the same object); so does a draft whose text the reader could not read (which
        :meth:`evaluate` fails): model text never raises out of the gate. Pure.
        """
        return self._lifted(completion, turn)[0]

    def _lifted(self, completion: Completion, turn: Turn) -> tuple[Completion, str | None]:
        """:meth:`lift`'s result, and why the draft's text could not be read (or ``None``)."""
        if not (self._text_tool_calls and turn.tools and not completion.tool_calls):
            return completion, None
        try:
            return lift_text_tool_calls(completion, turn), None
        except Exception as exc:  # model text the reader could not handle fails the draft
            logger.warning("gate: draft text unreadable: %s", type(exc).__name__, exc_info=True)
            return completion, f"the draft's text could not be read ({type(exc).__name__})"

    def evaluate(self, completion: Completion, turn: Turn) -> Verdict:
        """Run every check on ``completion`` (a draft for ``turn``) and collect the failures.

        A draft whose text the call reader could not read fails with the check
        ``unreadable``, whatever the other checks say.
        """
        completion, unreadable = self._lifted(completion, turn)
        failures: list[CheckFailure] = []
        if unreadable is not None:
            failures.append(CheckFailure(check="unreadable", reason=unreadable))
        for name, check in self._checks:
            try:
                result = check(completion, turn)
                if result is not None:  # a pass (nearly every check, nearly always) adds none
                    failures.extend(_failures(name, result))
            except Exception as exc:  # a broken check fails the draft; it never stops the gate
                logger.warning("gate check %s raised %s", name, type(exc).__name__, exc_info=True)
                message = f"{exc}"[:200]
                reason = (
                    f"check raised {type(exc).__name__}: {message}"
                    if message
                    else (f"check raised {type(exc).__name__}")
                )
                failures.append(CheckFailure(check=name, reason=reason))
        return Verdict(passed=not failures, failures=tuple(failures), checks=self._names)

    def __len__(self) -> int:
        return len(self._checks)

    def __repr__(self) -> str:
        return f"QualityGate({list(self._names)})"
