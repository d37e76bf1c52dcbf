"""Traces: what the router decided and tried for one turn, and where traces go (sinks).

Every routed turn produces one :class:`Trace`: the decision (score, features, rule, tier),
each attempt (backend, model, latency, usage, cost, gate verdict, error), the tier that
produced the returned completion, and totals. Traces hold no secrets: errors are stored
as their type and message, and messages never contain keys.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from tiered_router._types import Tier
from tiered_router.gate._verdict import Verdict
from tiered_router.routing import Decision
from tiered_router.turn import Usage

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Attempt",
    "AttemptRole",
    "EscalationReason",
    "TierFailure",
    "JSONLSink",
    "LoggingSink",
    "MemorySink",
    "Trace",
    "TraceSink",
]

logger = logging.getLogger(__name__)

AttemptRole = Literal["call", "draft", "hedge"]
"""Why an attempt was made: ``call`` (the turn's tiers one after the other), ``draft`` (one
of a panel's concurrent fast drafts), ``hedge`` (a frontier call started while the fast
side was undecided)."""

TierFailure = Literal["gate_failed", "backend_error", "circuit_open", "drafts_disagree", "deferred"]
"""Why a tier did not answer a turn: its draft failed the gate, its backend failed (retries
spent), its breaker refused the call, its panel's drafts did not agree, or the panel's
deferral model scored the answer the panel would accept above its threshold."""

EscalationReason = Literal[TierFailure, "frontier_backend_error", "hedged"]
"""Why a turn moved to the other tier (:attr:`Trace.escalations`): a fast tier's
:data:`TierFailure`; ``frontier_backend_error`` (a failing frontier falls back to the fast
tier; a frontier's open breaker is ``circuit_open``); ``hedged`` (the hedged frontier call
answered first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One call to one backend.

    Attributes:
        tier: The tier the call served.
        backend: The backend's policy name.
        model: The model name sent.
        try_index: 0 for the first try on this backend in this turn, 1 for the first retry...
        latency_s: Wall time of the call.
        usage: Token counts (zero when the call failed).
        cost: Cost in US dollars from the policy's prices.
        verdict: The gate's verdict on the draft, ``None`` when there was no draft.
        error: ``{"type", "message", ...}`` of the failure, ``None`` on success.
        conversions: What the backend changed to fit the request to its server's dialect.
        role: ``call``, ``draft`` (one of a panel's drafts) or ``hedge``; see
            :data:`AttemptRole`.
        answer_key: A panel draft's answer as compared: ``{"kind", "value", "detail"}``
            (kind ``tool_calls``, ``json``, ``final`` or ``not_comparable``).
        cancelled: The call was cancelled once the turn was decided without it (neutral
            for its breaker; its cost counts when its usage had arrived).
    """

    tier: Tier
    backend: str
    model: str
    try_index: int = 0
    latency_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    verdict: Verdict | None = None
    error: Mapping[str, Any] | None = None
    conversions: tuple[str, ...] = ()
    role: AttemptRole = "call"
    answer_key: Mapping[str, str] | None = None
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """The call returned a draft (whatever its verdict)."""
        return self.error is None and not self.cancelled

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "tier": self.tier,
            "backend": self.backend,
            "model": self.model,
            "try_index": self.try_index,
            "latency_s": round(self.latency_s, 6),
            "usage": _usage_dict(self.usage),
            "cost": self.cost,
            "verdict": _verdict_dict(self.verdict),
            "error": dict(self.error) if self.error is not None else None,
            **({"conversions": list(self.conversions)} if self.conversions else {}),
            **({"role": self.role} if self.role != "call" else {}),
            **({"answer_key": dict(self.answer_key)} if self.answer_key is not None else {}),
            **({"cancelled": True} if self.cancelled else {}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """Everything the router did for one turn.

    Attributes:
        turn_id: The turn's id.
        decision: The routing decision.
        attempts: Every backend call, in order.
        tier: The tier whose completion was returned (``None`` when none was).
        backend: The backend whose completion was returned.
        escalated: A fast draft failed the gate, or the fast backend failed.
        escalations: Why the turn moved to the other tier, in order
            (:data:`EscalationReason`): ``gate_failed``, ``backend_error``,
            ``circuit_open``, ``drafts_disagree`` (from the fast tier),
            ``frontier_backend_error`` (a failing frontier falls back to the fast tier) or
            ``hedged`` (the hedged frontier call answered first).
        verdict: The verdict on the returned completion.
        latency_s: Wall time of the whole turn.
        metadata: The turn's metadata (labels, task id).
        record: The request and each attempt's output, when the router records them
            (``Router(record=True)`` or a redaction hook); ``None`` otherwise.
        interrupted: Why the turn ended before it finished, when it did: ``abandoned`` (the
            caller stopped reading a stream), ``CancelledError``, or the error's type
            (a stream broken after chunks were sent, an unexpected error). ``None`` for a
            turn that ran to its end.
        panel: What a draft panel found, when the turn had one: ``k``, ``agreed``,
            ``majority`` (the accepted answer key's value), ``share``, ``comparable``,
            ``members`` (attempt indices of the majority), ``reason``; ``None`` otherwise.
    """

    turn_id: str
    decision: Decision
    attempts: tuple[Attempt, ...] = ()
    tier: Tier | None = None
    backend: str | None = None
    escalated: bool = False
    escalations: tuple[EscalationReason, ...] = ()
    verdict: Verdict | None = None
    latency_s: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    record: Mapping[str, Any] | None = None
    interrupted: str | None = None
    panel: Mapping[str, Any] | None = None

    @property
    def cost(self) -> float:
        """Total cost of every attempt, US dollars."""
        return sum(a.cost for a in self.attempts)

    @property
    def usage(self) -> Usage:
        """Total token usage of every attempt."""
        total = Usage()
        for a in self.attempts:
            total = total + a.usage
        return total

    @property
    def errors(self) -> tuple[Mapping[str, Any], ...]:
        """The errors of the failed attempts, in order."""
        return tuple(a.error for a in self.attempts if a.error is not None)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (what the JSONL sink writes).

        ``record`` and ``interrupted`` are included only when set.
        """
        d = self.decision
        out: dict[str, Any] = {
            "turn_id": self.turn_id,
            "decision": {
                "tier": d.tier,
                "backend": d.backend,
                "score": round(d.score, 6),
                "threshold": d.threshold,
                "rule": d.rule,
                "reasons": list(d.reasons),
                "features": dict(d.features),
                "contributions": {k: round(v, 6) for k, v in d.contributions.items()},
            },
            "attempts": [a.to_dict() for a in self.attempts],
            "tier": self.tier,
            "backend": self.backend,
            "escalated": self.escalated,
            "escalations": list(self.escalations),
            "verdict": _verdict_dict(self.verdict),
            "totals": {
                "latency_s": round(self.latency_s, 6),
                "cost": self.cost,
                "usage": _usage_dict(self.usage),
                "attempts": len(self.attempts),
            },
            "metadata": _jsonable(self.metadata),
        }
        if self.record is not None:
            out["record"] = dict(self.record)
        if self.interrupted is not None:
            out["interrupted"] = self.interrupted
        if self.panel is not None:
            out["panel"] = dict(self.panel)
        return out

    def to_json(self) -> str:
        """Return the trace as one line of JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"), default=str)


@runtime_checkable
class TraceSink(Protocol):
    """Receives every finished trace. Must not raise; must be cheap (it is on the hot path)."""

    def emit(self, trace: Trace) -> None:
        """Record one trace."""
        ...


class MemorySink:
    """Keeps traces in memory (tests, notebooks).

    Attributes:
        traces: Every trace emitted, oldest first (at most ``maxlen`` when given).
    """

    def __init__(self, *, maxlen: int | None = None) -> None:
        self.traces: list[Trace] = []
        self._maxlen = maxlen
        self._lock = threading.Lock()

    def emit(self, trace: Trace) -> None:
        """Append the trace."""
        with self._lock:
            self.traces.append(trace)
            if self._maxlen is not None and len(self.traces) > self._maxlen:
                del self.traces[0]

    def clear(self) -> None:
        """Forget every trace."""
        with self._lock:
            self.traces.clear()


@contextlib.contextmanager
def _file_lock(fd: int) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``fd``'s file where the OS and the file system have one.

    A file system without ``flock`` (some network mounts answer ``ENOLCK``) writes unlocked,
    as Windows does: one writer per file is then safe, and a trace is never dropped for
    want of a lock.
    """
    locked = False
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:
            pass
    try:
        yield
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)


class JSONLSink:
    """Appends one JSON line per trace to a file.

    Each record goes to the file in one ``write`` on a descriptor opened with ``O_APPEND``, so
    records from several processes never interleave. The file never holds a torn line: a
    write the OS cuts short (a full disk, a file-size limit) is not finished with a second
    write, which other processes' records could come between; the file is cut back to its
    last complete line instead and the record counted as dropped. Where ``fcntl`` exists
    (POSIX), each write and its cut hold an exclusive ``flock`` on the file, so another
    process's sink cannot append between a short write and its cut (which would leave the
    part glued to that record); elsewhere a single writer per file is safe. A process killed
    mid-write can still leave a partial last line: the next process that opens the file
    ends it with a newline first, so the next record is never glued to it. Records are not
    fsynced by default (a killed process loses nothing already written; a machine crash can
    lose the last few seconds the OS had not flushed); ``fsync=True`` syncs each record to
    disk, at the cost of a disk round trip per turn.

    A record that cannot be written is dropped, never raised (the turn it reports is done):
    :attr:`dropped` counts them, and a warning is logged at most once per
    ``warn_every_s`` seconds, with the count.

    Example:
        ```python
        router = Router(policy, sinks=[JSONLSink("traces.jsonl")])
        ```

    Args:
        path: The file (created with mode 0600 when missing).
        fsync: Sync each record to disk before returning.
        warn_every_s: Least seconds between two warnings about dropped records.

    Attributes:
        dropped: Records not written (a full disk, an unwritable file), since creation.

    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, warn_every_s: float = 60.0
    ) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self.warn_every_s = warn_every_s
        self.dropped: int = 0
        self._warned_at: float | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            with _file_lock(fd):
                size = os.fstat(fd).st_size
                if size:
                    with open(self.path, "rb") as f:
                        f.seek(size - 1)
                        if f.read(1) != b"\n":
                            os.write(fd, b"\n")  # end a partial record of a killed process
        except OSError:
            os.close(fd)
            raise
        return fd

    def emit(self, trace: Trace) -> None:
        """Write the trace as one line, in one write; drop it (counted) if that fails."""
        data = (trace.to_json() + "\n").encode("utf-8")
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = self._open()
                with _file_lock(self._fd):
                    written = os.write(self._fd, data)
                    if written < len(data):
                        self._cut_torn_line()
                        raise OSError(f"short write: {written} of {len(data)} bytes")
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as exc:
                self._drop(exc)
                self._reopen_later()

    def _cut_torn_line(self) -> None:
        """Cut the file back to just after its last newline (a short write left a part)."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        keep = 0
        with open(self.path, "rb") as f:
            at = size
            while at > 0:
                start = max(0, at - 65536)
                f.seek(start)
                block = f.read(at - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                at = start
        os.ftruncate(self._fd, keep)

    def _reopen_later(self) -> None:
        # the next record opens the file again, which ends a part left by a cut that failed
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass  # closed is all that is asked; a failed close leaves nothing to undo

    def _drop(self, exc: OSError) -> None:
        self.dropped += 1
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < self.warn_every_s:
            return
        self._warned_at = now
        logger.warning(
            "trace file %s: a trace could not be written (%s: %s); %d dropped so far "
            "(this warning repeats at most every %g s)",
            self.path,
            type(exc).__name__,
            exc.strerror or exc,
            self.dropped,
            self.warn_every_s,
        )

    def close(self) -> None:
        """Close the file (it reopens on the next emit)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __repr__(self) -> str:
        return f"JSONLSink({self.path!r})"


class LoggingSink:
    """Logs one line per trace through :mod:`logging` (``tiered_router.trace`` logger)."""

    def __init__(self, *, level: int = logging.INFO, logger_: logging.Logger | None = None) -> None:
        self.level = level
        self.logger = logger_ or logger

    def emit(self, trace: Trace) -> None:
        """Log the trace's summary."""
        d = trace.decision
        self.logger.log(
            self.level,
            "turn %s tier=%s backend=%s score=%.3f rule=%s escalated=%s escalations=%s "
            "attempts=%d latency_s=%.4f cost=%.6f",
            trace.turn_id,
            trace.tier,
            trace.backend,
            d.score,
            d.rule,
            trace.escalated,
            ",".join(trace.escalations) or "-",
            len(trace.attempts),
            trace.latency_s,
            trace.cost,
        )


def _usage_dict(u: Usage) -> dict[str, int]:
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
    }


def _verdict_dict(v: Verdict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "passed": v.passed,
        "checks": list(v.checks),
        "failures": [{"check": f.check, "reason": f.reason} for f in v.failures],
    }


_SCALARS = (str, int, float, bool, type(None))


def _jsonable(value: Mapping[str, Any]) -> dict[str, Any]:
    # a flat mapping of scalars (the monitor's figures) stays an object; anything else is text
    return {
        str(k): v
        if isinstance(v, _SCALARS)
        else {str(a): b for a, b in v.items()}
        if isinstance(v, Mapping) and all(isinstance(b, _SCALARS) for b in v.values())
        else str(v)
        for k, v in value.items()
    }
