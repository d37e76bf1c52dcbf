"""Routed streaming: the gate and escalation, with chunks for the caller.

When the gate has checks that need the whole draft (``json_schema`` on a turn with a
``response_format``, ``tool_arguments`` on a tool turn, ``repetition``, ``regex``, custom
checks), a draft that could still be escalated is buffered, gated, and only then streamed
(or dropped for the next tier). When only cheap checks apply, or when no escalation is left,
the draft streams straight through: chunks are held back only until the first one with
content, so an empty draft is still caught and escalated.

Once a chunk has reached the caller nothing can be taken back: a later failure is raised
from the iterator (the caller ends its stream with an in-band error), and a gate failure of
a streamed-through draft is recorded in the trace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import TYPE_CHECKING

from tiered_router._types import Tier
from tiered_router.exceptions import BackendError, BackendTimeout, StreamInterrupted
from tiered_router.turn import Completion, CompletionChunk, ToolCallDelta, assemble

if TYPE_CHECKING:
    from tiered_router._run import RoutedResult, TurnRun
    from tiered_router.backends._base import Backend, CompletionRequest
    from tiered_router.router import Router
    from tiered_router.routing import Decision

__all__ = ["AsyncRoutedStream", "RoutedStream"]

# checks that can be judged on a streamed-through draft without hurting the caller
_CHEAP_CHECKS = frozenset({"non_empty", "not_truncated", "no_refusal", "max_chars"})


def _needs_whole_draft(router: Router, run: TurnRun) -> bool:
    turn = run.turn
    for name in router.gate.names:
        if name in _CHEAP_CHECKS:
            continue
        if name == "json_schema" and turn.response_format is None:
            continue
        if name == "tool_arguments" and not turn.tools:
            continue
        return True
    return False


def _has_content(chunk: CompletionChunk) -> bool:
    return bool(chunk.text or chunk.tool_calls)


def _as_chunks(completion: Completion) -> list[CompletionChunk]:
    """Chunks for a backend that cannot stream: the whole completion at once."""
    calls = tuple(
        ToolCallDelta(index=i, id=c.id, name=c.name, arguments=c.arguments)
        for i, c in enumerate(completion.tool_calls)
    )
    return [
        CompletionChunk(
            text=completion.text,
            tool_calls=calls,
            model=completion.model,
            reasoning=completion.reasoning,
        ),
        CompletionChunk(
            finish_reason=completion.finish_reason, usage=completion.usage, model=completion.model
        ),
    ]


async def _acollect(
    tier: Tier, run: TurnRun, backend: Backend, request: CompletionRequest, started: float
) -> tuple[Completion, list[CompletionChunk]]:
    """One try: read a whole draft as chunks, and record it."""
    astream = getattr(backend, "astream", None)
    if astream is None:
        completion = await backend.acomplete(request)
        chunks = _as_chunks(completion)
    else:
        chunks = [chunk async for chunk in astream(request)]
        completion = assemble(chunks, backend=backend.name)
    run.record_draft(tier, backend, completion, run.router._clock() - started)
    return completion, chunks


def _collect(
    tier: Tier, run: TurnRun, backend: Backend, request: CompletionRequest, started: float
) -> tuple[Completion, list[CompletionChunk]]:
    """Sync twin of :func:`_acollect`."""
    stream = getattr(backend, "stream", None)
    if stream is None:
        completion = backend.complete(request)
        chunks = _as_chunks(completion)
    else:
        chunks = list(stream(request))
        completion = assemble(chunks, backend=backend.name)
    run.record_draft(tier, backend, completion, run.router._clock() - started)
    return completion, chunks


async def _aopen(
    backend: Backend, request: CompletionRequest, started: float
) -> tuple[list[CompletionChunk], AsyncIterator[CompletionChunk] | None, float]:
    """One try: open a stream and read up to the first chunk with content.

    Returns the chunks read, the rest of the stream (``None`` when it ended) and the start.
    """
    astream = getattr(backend, "astream", None)
    if astream is None:
        return _as_chunks(await backend.acomplete(request)), None, started
    rest: AsyncIterator[CompletionChunk] = astream(request).__aiter__()
    held: list[CompletionChunk] = []
    while True:
        try:
            chunk = await rest.__anext__()
        except StopAsyncIteration:
            return held, None, started
        held.append(chunk)
        if _has_content(chunk):
            return held, rest, started


def _open(
    backend: Backend, request: CompletionRequest, started: float
) -> tuple[list[CompletionChunk], Iterator[CompletionChunk] | None, float]:
    """Sync twin of :func:`_aopen`."""
    stream = getattr(backend, "stream", None)
    if stream is None:
        return _as_chunks(backend.complete(request)), None, started
    rest: Iterator[CompletionChunk] = iter(stream(request))
    held: list[CompletionChunk] = []
    for chunk in rest:
        held.append(chunk)
        if _has_content(chunk):
            return held, rest, started
    return held, None, started


class _StreamState:
    """What both stream classes share: the run, the buffer-or-live choice, the bookkeeping."""

    def __init__(self, router: Router, run: TurnRun) -> None:
        self._router = router
        self._run = run
        self.tier: Tier | None = None
        self._result: RoutedResult | None = None
        self._whole = _needs_whole_draft(router, run)

    @property
    def decision(self) -> Decision:
        """The routing decision (known before any call)."""
        return self._run.decision

    @property
    def turn_id(self) -> str:
        """The id of the routed turn (as in its trace)."""
        return self._run.turn.id

    @property
    def escalated(self) -> bool:
        """Whether the serving tier was reached by escalation (known after ``start``)."""
        return self._run.trace(0.0).escalated

    @property
    def result(self) -> RoutedResult:
        """The routed result; available once the stream has been read to its end."""
        if self._result is None:
            raise RuntimeError("the stream has not finished yet: iterate it to the end first")
        return self._result

    def _live(self, tier: Tier) -> bool:
        """Stream this tier straight through (else buffer, gate, then stream)?"""
        if not self._whole:
            return True
        last_stop = self._run.next_tier(tier, "gate_failed") is None
        return last_stop and self._router.policy.escalation.when_frontier_fails_gate == "return"

    def _backend(self, tier: Tier) -> Backend:
        return self._router.backend(self._router.policy.backend_for(tier))

    def _settle(self) -> list[CompletionChunk]:
        """Finish the turn with the draft the run kept; return its chunks to replay."""
        self._result = self._router._finish(self._run)  # raises GateFailed / AllTiersFailed
        self.tier = self._result.tier
        return self._pending or _as_chunks(self._result.completion)

    def _ended_empty(self, tier: Tier, held: list[CompletionChunk], started: float) -> Tier | None:
        """A live draft ended before any content: gate it like a buffered one."""
        backend = self._backend(tier)
        completion = assemble(held, backend=backend.name)
        self._run.record_draft(tier, backend, completion, self._router._clock() - started)
        self._pending = held
        return self._run.after_draft(tier, completion)

    def _broken(self, tier: Tier, exc: BackendError, started: float) -> StreamInterrupted:
        """A failure after chunks reached the caller: record it and end the trace."""
        run = self._run
        run.record_error(tier, self._backend(tier), exc, self._router._clock() - started)
        trace = self._router._abandon(run)
        return StreamInterrupted(
            f"the {tier} stream broke after chunks were sent: {exc}",
            backend=exc.backend,
            attempts=run.attempts,
            trace=trace,
        )

    def _check_deadline(self, tier: Tier) -> None:
        """Per-read timeouts bound each wait; the turn's deadline bounds the whole stream."""
        if self._run.deadline.expired(self._router._clock()):
            name = self._router.policy.backend_for(tier)
            raise BackendTimeout("the turn's deadline passed during the stream", backend=name)

    def _ended(self, tier: Tier, chunks: list[CompletionChunk], started: float) -> None:
        run = self._run
        backend = self._backend(tier)
        completion = assemble(chunks, backend=backend.name)
        run.record_draft(tier, backend, completion, self._router._clock() - started)
        run.returned = run.last
        self._result = self._router._finish(run)


class AsyncRoutedStream(_StreamState):
    """An async routed stream; see the module docstring. Iterate it for chunks."""

    def __init__(self, router: Router, run: TurnRun) -> None:
        super().__init__(router, run)
        self._gen: AsyncIterator[CompletionChunk] | None = None
        self._head: list[CompletionChunk] = []
        self._pending: list[CompletionChunk] = []

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
            self._head.append(await self._gen.__anext__())
        except StopAsyncIteration:
            pass

    async def aclose(self) -> None:
        """Stop the stream early and close the upstream connection under it."""
        if self._gen is not None:
            aclose = getattr(self._gen, "aclose", None)
            if aclose is not None:
                await aclose()

    async def __aenter__(self) -> AsyncRoutedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def __aiter__(self) -> AsyncIterator[CompletionChunk]:
        await self.start()
        assert self._gen is not None
        while self._head:
            yield self._head.pop(0)
        async for chunk in self._gen:
            yield chunk

    async def _generate(self) -> AsyncIterator[CompletionChunk]:
        router, run = self._router, self._run
        tier: Tier | None = run.first_tier()
        while tier is not None:
            serving = tier
            if not self._live(serving):
                try:
                    completion, self._pending = await router._aretry(
                        run, serving, partial(_acollect, serving, run)
                    )
                except BackendError as exc:
                    tier = run.after_error(serving, exc)
                    continue
                tier = run.after_draft(serving, completion)
                continue
            try:
                held, rest, started = await router._aretry(run, serving, _aopen)
            except BackendError as exc:
                tier = run.after_error(serving, exc)
                continue
            if rest is None:
                tier = self._ended_empty(serving, held, started)
                continue
            self.tier = serving
            chunks = list(held)
            for chunk in held:
                yield chunk
            try:
                async for chunk in rest:
                    chunks.append(chunk)
                    yield chunk
                    self._check_deadline(serving)
            except BackendError as exc:
                raise self._broken(serving, exc, started) from exc
            finally:
                aclose = getattr(rest, "aclose", None)
                if aclose is not None:
                    await aclose()  # a caller that stops early closes the upstream stream
            self._ended(serving, chunks, started)
            return
        for chunk in self._settle():
            yield chunk


class RoutedStream(_StreamState):
    """Sync twin of :class:`AsyncRoutedStream`. Iterate it for chunks."""

    def __init__(self, router: Router, run: TurnRun) -> None:
        super().__init__(router, run)
        self._gen: Iterator[CompletionChunk] | None = None
        self._head: list[CompletionChunk] = []
        self._pending: list[CompletionChunk] = []

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
            close = getattr(self._gen, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> RoutedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[CompletionChunk]:
        self.start()
        assert self._gen is not None
        while self._head:
            yield self._head.pop(0)
        yield from self._gen

    def _generate(self) -> Iterator[CompletionChunk]:
        router, run = self._router, self._run
        tier: Tier | None = run.first_tier()
        while tier is not None:
            serving = tier
            if not self._live(serving):
                try:
                    completion, self._pending = router._retry(
                        run, serving, partial(_collect, serving, run)
                    )
                except BackendError as exc:
                    tier = run.after_error(serving, exc)
                    continue
                tier = run.after_draft(serving, completion)
                continue
            try:
                held, rest, started = router._retry(run, serving, _open)
            except BackendError as exc:
                tier = run.after_error(serving, exc)
                continue
            if rest is None:
                tier = self._ended_empty(serving, held, started)
                continue
            self.tier = serving
            chunks = list(held)
            yield from held
            try:
                for chunk in rest:
                    chunks.append(chunk)
                    yield chunk
                    self._check_deadline(serving)
            except BackendError as exc:
                raise self._broken(serving, exc, started) from exc
            finally:
                close = getattr(rest, "close", None)
                if close is not None:
                    close()  # a caller that stops early closes the upstream stream
            self._ended(serving, chunks, started)
            return
        yield from self._settle()
