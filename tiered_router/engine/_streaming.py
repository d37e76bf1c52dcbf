"""Routed streaming: the gate and escalation, with chunks for the caller.

When the gate has checks that need the whole draft (the gate asks each check:
:meth:`QualityGate.needs_whole_draft <tiered_router.gate.QualityGate.needs_whole_draft>`;
``json_schema`` on a turn with a ``response_format``, ``tool_arguments`` on a tool turn,
``repetition``, ``regex``, custom checks), a draft that could still be escalated is
buffered, gated, and only then streamed (or dropped for the next tier). When only cheap
checks apply, or when no escalation is left, the draft streams straight through: chunks
are held back only until the first one with content, so an empty draft is still caught
and escalated.

Once a chunk has reached the caller nothing can be taken back: a later failure is raised
from the iterator (the caller ends its stream with an in-band error), and a gate failure of
a streamed-through draft is recorded in the trace. A caller that stops reading (or is
cancelled) ends the turn too: the call cut short is in the trace, whose ``interrupted`` says
why, and the trace is emitted once all the same (the upstream was paid).

The streams drive the engine (:mod:`tiered_router.engine._machine`) through a
:class:`~tiered_router.engine._dispatch.Dispatcher`, like the router's non-streaming path.
A turn with a draft panel or a hedge (:mod:`tiered_router.engine._flight`) runs its fast
side whole first and streams the accepted draft once the panel is decided; an escalation
after it streams as usual.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import aclosing, closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tiered_router._types import Tier
from tiered_router.engine._chunks import (
    aclose_stream,
    acollect,
    aopen_stream,
    as_chunks,
    close_stream,
    collect,
    open_stream,
    typed_error,
)
from tiered_router.engine._machine import LIFTED_TEXT_CALLS
from tiered_router.engine._offered import DROPPED_CALLS, CallHold, call_problems, whole_calls
from tiered_router.engine.resilience import breaker_outcome
from tiered_router.exceptions import BackendError, BackendTimeout, StreamInterrupted
from tiered_router.turn import Completion, CompletionChunk, assemble

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend
    from tiered_router.engine._dispatch import Dispatcher
    from tiered_router.engine._drive import AfterTurn, Driver
    from tiered_router.engine._machine import RoutedResult, TurnRun
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt, Trace

__all__ = ["AsyncRoutedStream", "RoutedStream"]

_Rest = TypeVar("_Rest")


@dataclass(frozen=True, slots=True)
class _Opened(Generic[_Rest]):
    """A stream opened on a tier: what was read up to its first content, and the rest."""

    backend: Backend
    held: list[CompletionChunk]
    rest: _Rest
    started: float


class _StreamState:
    """What both stream classes share: the run, the buffer-or-live choice, the bookkeeping."""

    def __init__(self, dispatch: Dispatcher, run: TurnRun, driver: Driver | None = None) -> None:
        self._dispatch = dispatch
        self._run = run
        self._driver = driver
        self.tier: Tier | None = None
        self._result: RoutedResult | None = None
        self._pending: list[CompletionChunk] = []
        self._head: list[CompletionChunk] = []
        self._whole = run.ports.gate.needs_whole_draft(run.turn)

    @property
    def decision(self) -> Decision:
        """The routing decision (known before any call)."""
        return self._run.decision

    @property
    def turn_id(self) -> str:
        """The id of the routed turn (as in its trace)."""
        return self._run.turn.id

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The turn's attempts so far (a panel's drafts are all in once ``start`` returned)."""
        return tuple(self._run.attempts)

    @property
    def escalated(self) -> bool:
        """Whether the serving tier was reached by escalation (known after ``start``)."""
        return self._run.trace().escalated

    @property
    def result(self) -> RoutedResult:
        """The routed result; available once the stream has been read to its end."""
        if self._result is None:
            raise RuntimeError("the stream has not finished yet: iterate it to the end first")
        return self._result

    def _live(self, tier: Tier) -> bool:
        """Stream this tier straight through (else buffer, gate, then stream)?"""
        return not self._whole or not self._run.will_gate_again(tier)

    def _latency(self, started: float) -> float:
        return self._dispatch.clock() - started

    def _drafted(
        self,
        tier: Tier,
        backend: Backend,
        completion: Completion,
        chunks: list[CompletionChunk],
        started: float,
    ) -> Tier | None:
        """A whole draft (buffered, or a live one that ended before any content)."""
        self._pending = chunks
        return self._run.after_draft(
            tier, backend.name, backend.model, completion, self._latency(started)
        )

    def _done(self, result: RoutedResult) -> RoutedResult:
        """The finished turn's result, once the quality monitor saw it (it may shadow it)."""
        monitor = self._driver.monitor if self._driver is not None else None
        return result if monitor is None else self._shadow(monitor, result)

    def _shadow(self, monitor: AfterTurn, result: RoutedResult) -> RoutedResult:
        return monitor.ashadow(self._run, result)

    def _settled(self, result: RoutedResult) -> list[CompletionChunk]:
        """The turn ended with the draft the run kept; return its chunks to replay."""
        self._result = result
        self.tier = result.tier
        rebuilt = {LIFTED_TEXT_CALLS, DROPPED_CALLS} & set(result.completion.conversions)
        if rebuilt or not self._pending:
            return as_chunks(result.completion)
        # the calls the run checked, whole: never the server's fragments as they came
        return whole_calls(self._pending, result.completion) or as_chunks(result.completion)

    def _broken(self, tier: Tier, backend: Backend, exc: BackendError, started: float) -> None:
        """A failure after chunks reached the caller: record it (the caller ends the turn)."""
        self._run.record_error(tier, backend.name, backend.model, exc, self._latency(started))

    def _interrupted(self, tier: Tier, exc: BackendError, trace: Trace) -> StreamInterrupted:
        return StreamInterrupted(
            f"the {tier} stream broke after chunks were sent: {exc}",
            backend=exc.backend,
            attempts=self._run.attempts,
            trace=trace,
        )

    def _check_deadline(self, tier: Tier) -> None:
        """Per-read timeouts bound each wait; the turn's deadline bounds the whole stream."""
        if self._run.deadline.expired(self._dispatch.clock()):
            name = self._run.policy.backend_for(tier)
            raise BackendTimeout("the turn's deadline passed during the stream", backend=name)

    def _ended(
        self, tier: Tier, backend: Backend, chunks: list[CompletionChunk], started: float
    ) -> tuple[Completion, tuple[str, ...]]:
        """Record a draft streamed through; return it and what is wrong with its held calls."""
        completion = assemble(chunks, backend=backend.name)
        self._run.streamed(tier, backend.name, backend.model, completion, self._latency(started))
        return completion, call_problems(completion, self._run.turn)


class AsyncRoutedStream(_StreamState):
    """An async routed stream; see the module docstring. Iterate it for chunks."""

    def __init__(self, dispatch: Dispatcher, run: TurnRun, driver: Driver | None = None) -> None:
        super().__init__(dispatch, run, driver)
        self._gen: AsyncIterator[CompletionChunk] | None = None

    async def start(self) -> None:
        """Run until the serving tier is known and the first chunk is ready.

        Raises:
            AllTiersFailed: No tier produced a draft.
            GateFailed: The last draft failed the gate and the policy says ``raise``.
        """
        if self._gen is not None:
            return
        self._gen = self._generate()
        try:
            self._head.append(await anext(self._gen))
        except StopAsyncIteration:
            pass

    async def aclose(self) -> None:
        """Stop the stream early and close the upstream connection under it.

        A turn that had not finished ends here; its trace says it was abandoned.
        """
        if self._gen is not None:
            await aclose_stream(self._gen)
        if not self._run.done:
            await self._dispatch.aend(self._run, GeneratorExit())

    async def __aenter__(self) -> AsyncRoutedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def __aiter__(self) -> AsyncIterator[CompletionChunk]:
        await self.start()
        assert self._gen is not None
        try:
            while self._head:
                yield self._head.pop(0)
            async for chunk in self._gen:
                yield chunk
        finally:
            await self.aclose()  # a caller that stops reading ends the turn now

    async def _generate(self) -> AsyncIterator[CompletionChunk]:
        try:
            run = self._run
            tier: Tier | None = run.first_tier()
            flight = self._driver.plan(run) if self._driver is not None else None
            if flight is not None and self._driver is not None:
                # a panel or a hedge: the accepted draft streams once decided
                tier = await self._driver.flight.arun(run, flight)
            while tier is not None:
                if not self._live(tier):
                    tier = await self._abuffered(tier)
                    continue
                tier, opened = await self._aopened(tier)
                if opened is not None and tier is not None:
                    # closed here when the caller stops: the call cut short is traced
                    async with aclosing(self._athrough(tier, opened)) as through:
                        async for chunk in through:
                            yield chunk
                    return
            for chunk in self._settled(self._done(await self._dispatch.afinish(run))):
                yield chunk
        except BaseException as exc:  # whatever ends the turn, its trace is emitted once
            await self._dispatch.aend(self._run, exc)
            raise

    async def _abuffered(self, tier: Tier) -> Tier | None:
        """Read ``tier``'s draft whole and gate it; return the next tier (``None``: done)."""
        try:
            (completion, chunks), backend, started = await self._dispatch.acall(
                self._run, tier, acollect
            )
        except BackendError as exc:
            return self._run.after_error(tier, exc)
        return self._drafted(tier, backend, completion, chunks, started)

    async def _aopened(self, tier: Tier) -> tuple[Tier | None, _Opened[Any] | None]:
        """Open ``tier``'s stream: the tier and its open stream, or the next tier."""
        try:
            (held, rest), backend, started = await self._dispatch.acall(
                self._run, tier, aopen_stream
            )
        except BackendError as exc:
            return self._run.after_error(tier, exc), None
        if rest is None:  # it ended before any content: a whole draft after all
            completion = assemble(held, backend=backend.name)
            return self._drafted(tier, backend, completion, held, started), None
        return tier, _Opened(backend, held, rest, started)

    async def _athrough(
        self, serving: Tier, opened: _Opened[AsyncIterator[CompletionChunk]]
    ) -> AsyncGenerator[CompletionChunk, None]:
        """Stream ``opened`` straight through to the caller, then end the turn."""
        run, dispatch = self._run, self._dispatch
        backend, started, rest = opened.backend, opened.started, opened.rest
        self.tier = serving
        chunks = list(opened.held)
        hold = CallHold()  # tool calls wait for the whole draft
        try:
            for chunk in opened.held:
                for out in hold.feed(chunk):
                    yield out
            async for chunk in rest:
                chunks.append(chunk)
                for out in hold.feed(chunk):
                    yield out
                self._check_deadline(serving)
        except Exception as raised:  # the upstream broke: a typed error, traced
            err = typed_error(raised, backend)
            self._broken(serving, backend, err, started)
            await dispatch.breaker(backend.name).arecord(breaker_outcome(err))
            trace = await dispatch.aend(run, err)
            raise self._interrupted(serving, err, trace) from err
        except BaseException as exc:  # the caller stopped reading, or was cancelled
            run.record_cut(serving, backend.name, backend.model, exc, self._latency(started))
            raise
        finally:
            await aclose_stream(rest)  # a caller that stops early closes the upstream stream
        checked, problems = self._ended(serving, backend, chunks, started)
        self._result = self._done(await dispatch.afinish(run))
        for out in hold.release(problems, checked):
            yield out


class RoutedStream(_StreamState):
    """Sync twin of :class:`AsyncRoutedStream`. Iterate it for chunks."""

    def _shadow(self, monitor: AfterTurn, result: RoutedResult) -> RoutedResult:
        return monitor.shadow(self._run, result)

    def __init__(self, dispatch: Dispatcher, run: TurnRun, driver: Driver | None = None) -> None:
        super().__init__(dispatch, run, driver)
        self._gen: Iterator[CompletionChunk] | None = None

    def start(self) -> None:
        """Run until the serving tier is known and the first chunk is ready."""
        if self._gen is not None:
            return
        self._gen = self._generate()
        try:
            self._head.append(next(self._gen))
        except StopIteration:
            pass

    def close(self) -> None:
        """Stop the stream early and close the upstream connection under it."""
        if self._gen is not None:
            close_stream(self._gen)
        if not self._run.done:
            self._dispatch.end(self._run, GeneratorExit())

    def __enter__(self) -> RoutedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[CompletionChunk]:
        self.start()
        assert self._gen is not None
        try:
            while self._head:
                yield self._head.pop(0)
            yield from self._gen
        finally:
            self.close()  # a caller that stops reading ends the turn now

    def _generate(self) -> Iterator[CompletionChunk]:
        try:
            run = self._run
            tier: Tier | None = run.first_tier()
            flight = self._driver.plan(run) if self._driver is not None else None
            if flight is not None and self._driver is not None:
                tier = self._driver.sync_flight.run(run, flight)
            while tier is not None:
                if not self._live(tier):
                    tier = self._buffered(tier)
                    continue
                tier, opened = self._opened(tier)
                if opened is not None and tier is not None:
                    with closing(self._through(tier, opened)) as through:
                        yield from through
                    return
            yield from self._settled(self._done(self._dispatch.finish(run)))
        except BaseException as exc:  # whatever ends the turn, its trace is emitted once
            self._dispatch.end(self._run, exc)
            raise

    def _buffered(self, tier: Tier) -> Tier | None:
        """Sync twin of :meth:`AsyncRoutedStream._abuffered`."""
        try:
            (completion, chunks), backend, started = self._dispatch.call(self._run, tier, collect)
        except BackendError as exc:
            return self._run.after_error(tier, exc)
        return self._drafted(tier, backend, completion, chunks, started)

    def _opened(self, tier: Tier) -> tuple[Tier | None, _Opened[Any] | None]:
        """Sync twin of :meth:`AsyncRoutedStream._aopened`."""
        try:
            (held, rest), backend, started = self._dispatch.call(self._run, tier, open_stream)
        except BackendError as exc:
            return self._run.after_error(tier, exc), None
        if rest is None:
            completion = assemble(held, backend=backend.name)
            return self._drafted(tier, backend, completion, held, started), None
        return tier, _Opened(backend, held, rest, started)

    def _through(
        self, serving: Tier, opened: _Opened[Iterator[CompletionChunk]]
    ) -> Generator[CompletionChunk, None, None]:
        """Sync twin of :meth:`AsyncRoutedStream._athrough`."""
        run, dispatch = self._run, self._dispatch
        backend, started, rest = opened.backend, opened.started, opened.rest
        self.tier = serving
        chunks = list(opened.held)
        hold = CallHold()
        try:
            for chunk in opened.held:
                yield from hold.feed(chunk)
            for chunk in rest:
                chunks.append(chunk)
                yield from hold.feed(chunk)
                self._check_deadline(serving)
        except Exception as raised:
            err = typed_error(raised, backend)
            self._broken(serving, backend, err, started)
            dispatch.breaker(backend.name).record(breaker_outcome(err))
            trace = dispatch.end(run, err)
            raise self._interrupted(serving, err, trace) from err
        except BaseException as exc:
            run.record_cut(serving, backend.name, backend.model, exc, self._latency(started))
            raise
        finally:
            close_stream(rest)
        checked, problems = self._ended(serving, backend, chunks, started)
        self._result = self._done(dispatch.finish(run))
        yield from hold.release(problems, checked)
