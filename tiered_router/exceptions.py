"""The whole error tree of tiered_router.

```
TieredRouterError
├── PolicyError                 a user mistake in a policy (file, line, field)
├── InvalidRequest              a caller's own request is malformed (400: never retried,
│                               never counted by a breaker, refused before any attempt)
├── BackendError                one backend call failed (after translation at the seam)
│   ├── BackendTimeout          the call or the turn's deadline ran out
│   ├── BackendConnectionError  connection refused, reset or dropped mid-stream
│   ├── BackendRateLimited      429; carries ``retry_after_s`` when the server sent one
│   ├── BackendStatusError      any other non-2xx answer; carries ``status_code`` (a 508
│   │                           ``loop_detected`` is neither retried nor a breaker count)
│   ├── BackendResponseError    a 2xx answer that could not be read (broken JSON / SSE)
│   ├── BackendUnavailable      the backend's circuit breaker is open
│   └── CapabilityError         the turn needs what the backend lacks (tools: false, an image
│                               for a text-only dialect, ...), raised before any call
├── UnknownModel                a ``model`` that is not ``auto``, a tier or a tier's backend
├── StreamInterrupted           a routed stream failed after chunks reached the caller
├── GateFailed                  the last draft failed the gate and the policy says ``raise``
└── AllTiersFailed              every tier that could serve the turn failed
```

``BackendError`` is one backend call; the router catches it and tries the other tier. The
errors below the root that are not ``BackendError`` end a turn: every one of them carries
the turn's attempts and trace (``UnknownModel`` ends it before it starts).

User mistakes (``PolicyError``) are kept apart from runtime failures. Runtime errors
carry data: the backend's name, the HTTP status, the verdict, every attempt made.
Messages never contain secrets.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

__all__ = [
    "AllTiersFailed",
    "BackendConnectionError",
    "BackendError",
    "BackendRateLimited",
    "BackendResponseError",
    "BackendStatusError",
    "BackendTimeout",
    "BackendUnavailable",
    "CapabilityError",
    "GateFailed",
    "InvalidRequest",
    "PolicyError",
    "StreamInterrupted",
    "TieredRouterError",
    "UnknownModel",
]


# What the errors carry, seen from here: the shapes of tiered_router.gate.Verdict and
# tiered_router.trace.Attempt / Trace (which satisfy them). The error tree sits below the
# gate and the trace, so it names their shapes, never their modules.
if TYPE_CHECKING:

    class _Verdict(Protocol):
        @property
        def passed(self) -> bool: ...

        @property
        def failed_checks(self) -> tuple[str, ...]: ...

        @property
        def reasons(self) -> tuple[str, ...]: ...

    class _Attempt(Protocol):
        @property
        def tier(self) -> str: ...

        @property
        def backend(self) -> str: ...

        @property
        def model(self) -> str: ...

        @property
        def latency_s(self) -> float: ...

        @property
        def cost(self) -> float: ...

        @property
        def verdict(self) -> _Verdict | None: ...

        @property
        def error(self) -> Mapping[str, Any] | None: ...

        def to_dict(self) -> dict[str, Any]: ...

    class _Trace(Protocol):
        @property
        def turn_id(self) -> str: ...

        @property
        def attempts(self) -> Sequence[_Attempt]: ...

        @property
        def tier(self) -> str | None: ...

        @property
        def backend(self) -> str | None: ...

        @property
        def escalated(self) -> bool: ...

        @property
        def escalations(self) -> tuple[str, ...]: ...

        @property
        def verdict(self) -> _Verdict | None: ...

        @property
        def latency_s(self) -> float: ...

        @property
        def cost(self) -> float: ...

        def to_dict(self) -> dict[str, Any]: ...


class TieredRouterError(Exception):
    """Root of every error raised by tiered_router."""


class PolicyError(TieredRouterError, ValueError):
    """A policy could not be loaded: bad YAML, unknown key, wrong type, missing variable.

    Attributes:
        file: The policy's file name, or ``"<string>"`` / ``"<dict>"`` when it had none.
        line: 1-based line of the offending node, when known.
        field: Dotted path of the offending field, e.g. ``backends.mercury.timeout_s``.
        problems: Every problem found, as ``(line, field, message)`` triples. ``str(exc)``
            renders one ``file:line: field: message`` line per problem.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str = "<policy>",
        line: int | None = None,
        field: str | None = None,
        problems: Sequence[tuple[int | None, str | None, str]] | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.problems: tuple[tuple[int | None, str | None, str], ...] = tuple(
            problems if problems is not None else [(line, field, message)]
        )
        super().__init__("\n".join(self._render(*p) for p in self.problems))

    def _render(self, line: int | None, field: str | None, message: str) -> str:
        where = f"{self.file}:{line}" if line is not None else self.file
        return f"{where}: {field}: {message}" if field else f"{where}: {message}"


class InvalidRequest(TieredRouterError, ValueError):
    """The caller's own request is malformed: the caller's to fix, answered with 400.

    Raised while the turn is built (:class:`~tiered_router.Turn`, ``Turn.from_openai``,
    the drop-in client and the proxy), so before any attempt: it is never retried and no
    circuit breaker counts it. The drop-in client raises it as ``openai.BadRequestError``;
    the proxy answers 400 in OpenAI's error shape.

    Attributes:
        param: The offending parameter (``n``, ``messages[0].content``,
            ``response_format``...), when one is to blame.
        code: OpenAI-style error code (``invalid_type``, ``schema_too_deep``...), if any.
    """

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class BackendError(TieredRouterError):
    """A backend call failed.

    Attributes:
        backend: Name of the backend (as in the policy), never its key or URL credentials.
        retryable: Whether the router may try the same backend again.
    """

    retryable: bool = False

    def __init__(self, message: str, *, backend: str = "?") -> None:
        self.backend = backend
        self.detail = message
        super().__init__(f"{backend}: {message}")

    def for_backend(self, backend: str) -> None:
        """Name the backend that failed (for errors built before it was known)."""
        self.backend = backend
        self.args = (f"{backend}: {self.detail}",)


class BackendTimeout(BackendError):
    """The backend did not answer in time (per-call timeout or the turn's deadline)."""

    retryable = True


class BackendConnectionError(BackendError):
    """The connection failed: refused, reset, or dropped before the answer was complete."""

    retryable = True


class BackendRateLimited(BackendError):
    """The backend answered 429.

    Attributes:
        retry_after_s: The wait the server asked for, from ``retry-after-ms`` or
            ``retry-after``, or ``None`` when it sent neither.
    """

    retryable = True

    def __init__(
        self, message: str, *, backend: str = "?", retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, backend=backend)
        self.retry_after_s = retry_after_s
        self.status_code = 429


class BackendStatusError(BackendError):
    """The backend answered with a non-2xx status other than 429.

    Attributes:
        status_code: The HTTP status.
        retry_after_s: The wait the server asked for, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str = "?",
        status_code: int,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, backend=backend)
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        # 508 Loop Detected: the request's route loops (proxies pointing at one another, or
        # a forged hop chain); a retry meets the same loop
        self.retryable = status_code in (408, 409) or (status_code >= 500 and status_code != 508)


class BackendResponseError(BackendError):
    """The backend answered 2xx but the body could not be read (bad JSON, broken SSE)."""

    retryable = True


class BackendUnavailable(BackendError):
    """The backend's circuit breaker is open; the router routes around it."""


class CapabilityError(BackendError):
    """The turn needs a capability the backend does not have, found before any call.

    Tools for a ``tools: false`` backend, or what its dialect profile cannot express: an
    image part for a text-only server, ``n > 1``, tools or ``response_format`` where the
    dialect has none (see ``docs/backends.md``).
    """


class UnknownModel(TieredRouterError, ValueError):
    """A ``model`` that is neither ``auto``, a tier, nor a backend serving a tier.

    Attributes:
        model: The name asked for.
        known: The names that are accepted.
    """

    def __init__(self, model: str, known: Sequence[str]) -> None:
        self.model = model
        self.known = list(known)
        super().__init__(f"unknown model {model!r}; this router serves: {', '.join(known)}")


class StreamInterrupted(TieredRouterError):
    """A routed stream failed after some chunks had reached the caller.

    Nothing can be taken back then: the caller must end its own stream with an in-band
    error. The backend error that broke the stream is the ``__cause__``. It is not a
    :class:`BackendError`: the turn is over, no other tier will be tried.

    Attributes:
        backend: Name of the backend whose stream broke.
        attempts: Every attempt made for the turn, in order.
        trace: The full trace of the turn.
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str = "?",
        attempts: Sequence[_Attempt] = (),
        trace: _Trace | None = None,
    ) -> None:
        self.backend = backend
        self.attempts = tuple(attempts)
        self.trace = trace
        super().__init__(f"{backend}: {message}")


class GateFailed(TieredRouterError):
    """The final draft failed the quality gate and the policy says to raise.

    The drop-in's ``parse`` raises it too (as openai's class) when the answer it was given
    does not parse into the requested class.

    Attributes:
        verdict: The failing verdict of the last draft.
        attempts: Every attempt made for the turn, in order.
        trace: The full trace of the turn.
    """

    def __init__(
        self,
        message: str,
        *,
        verdict: _Verdict,
        attempts: Sequence[_Attempt] = (),
        trace: _Trace | None = None,
    ) -> None:
        self.verdict = verdict
        self.attempts = tuple(attempts)
        self.trace = trace
        super().__init__(message)


class AllTiersFailed(TieredRouterError):
    """No tier produced a completion for the turn.

    Attributes:
        attempts: Every attempt made, each with its error.
        errors: The backend errors, in the order they happened.
        trace: The full trace of the turn.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: Sequence[_Attempt] = (),
        errors: Sequence[BaseException] = (),
        trace: _Trace | None = None,
    ) -> None:
        self.attempts = tuple(attempts)
        self.errors = tuple(errors)
        self.trace = trace
        super().__init__(message)


def _describe(exc: BaseException) -> dict[str, Any]:
    """Return a secret-free, JSON-ready description of an error for traces."""
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    for attr in ("status_code", "retry_after_s", "backend"):
        value = getattr(exc, attr, None)
        if value is not None:
            out[attr] = value
    return out


@functools.cache
def install_command(extra: str | None = None) -> str:
    """Return the ``pip install`` command that adds ``extra`` to this installation.

    Every "install ..." message of the package comes from here, so that a pasted hint
    installs this code: from a source checkout (run in place, or installed from its
    directory, editable or not) ``pip install ".[cli]"``; installed from a package index,
    the name it was published under. Never a guessed name that the index may not have, or
    that a stranger may own.

    Args:
        extra: The extra to name (``cli``, ``server``, ...), or ``None`` for the core.

    """
    from importlib import metadata
    from pathlib import Path

    source_tree = (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()
    name: str | None = None
    direct_url: str | None = None
    if not source_tree:
        try:
            dist = metadata.distribution("tiered-router")
        except metadata.PackageNotFoundError:
            pass
        else:
            name, direct_url = dist.metadata["Name"], dist.read_text("direct_url.json")
    return pip_command(extra, source_tree=source_tree, name=name, direct_url=direct_url)


def pip_command(
    extra: str | None, *, source_tree: bool, name: str | None, direct_url: str | None
) -> str:
    """Return the install command for an installation described by its metadata.

    Args:
        extra: The extra to name, or ``None``.
        source_tree: Whether the package is imported from a source checkout.
        name: The installed distribution's name (``None``: not installed).
        direct_url: Its ``direct_url.json`` (PEP 610; only for installs not from an index).

    """
    import json

    suffix = f"[{extra}]" if extra else ""
    checkout = f'pip install ".{suffix}"'
    if source_tree or name is None:
        return checkout
    if direct_url is not None:
        try:
            origin = json.loads(direct_url)
        except ValueError:
            origin = None
        if isinstance(origin, dict) and "dir_info" in origin:
            return checkout  # installed from a local directory: a checkout
    return f'pip install "{name}{suffix}"'


def missing_extra(extra: str, needs: str) -> str:
    """Return the message for a missing optional dependency: what needs it, how to install it.

    Args:
        extra: The extra that installs it.
        needs: What needs it, as the start of a sentence ("the proxy needs Starlette").

    """
    return f"{needs}, from the {extra} extra: {install_command(extra)}"
