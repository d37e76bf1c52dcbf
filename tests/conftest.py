from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import pytest
from redisfix import RedisServer

from tiered_router import AsyncRoutedStream, RoutedResult, RoutedStream, Router, Turn
from tiered_router.testing import ScriptedServer
from tiered_router.turn import CompletionChunk

T = TypeVar("T")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1, fresh for each test."""
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 (skips with a message when it is not installed)."""
    srv = RedisServer()
    try:
        yield srv.start()
    finally:
        srv.close()


@pytest.fixture(autouse=True)
def _no_live_keys(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Keep real provider keys away from every test except the live-provider ones."""
    if request.node.get_closest_marker("live") is None:
        for name in ("INCEPTION_API_KEY", "OPENAI_API_KEY"):
            if name in os.environ:
                monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _close_routers() -> Iterator[None]:
    """Close the HTTP clients of routers built through tests/routerkit.py."""
    from routerkit import OPEN_ROUTERS

    yield
    while OPEN_ROUTERS:
        OPEN_ROUTERS.pop().close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: talks to a real provider; needs its API key")


class RoutePath:
    """One of the router's two paths, sync or async, behind one set of calls.

    The engine's promises (one trace per turn, the deadline, the breaker, cancellation,
    cost) hold on both paths; a test that takes the ``path`` fixture runs once per path.
    The async path runs on an event loop kept for the test.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return self.name

    @property
    def is_async(self) -> bool:
        """Whether this is the async path."""
        return self.name == "async"

    def _await(self, value: Awaitable[T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(value)

    def complete(self, router: Router, turn: Turn, **options: Any) -> RoutedResult:
        """``router.complete`` or ``router.acomplete``."""
        if self.is_async:
            return self._await(router.acomplete(turn, **options))
        return router.complete(turn, **options)

    def stream(
        self, router: Router, turn: Turn, *, read: int | None = None, **options: Any
    ) -> tuple[list[CompletionChunk], RoutedStream | AsyncRoutedStream]:
        """Read ``router.stream`` (or ``astream``): every chunk, or the first ``read`` of them.

        A stream read in part is closed (the caller stopped reading).
        """
        if self.is_async:
            return self._await(self._astream(router, turn, read, options))
        stream = router.stream(turn, **options)
        chunks: list[CompletionChunk] = []
        with stream:
            for chunk in stream:
                chunks.append(chunk)
                if read is not None and len(chunks) >= read:
                    break
        return chunks, stream

    async def _astream(
        self, router: Router, turn: Turn, read: int | None, options: dict[str, Any]
    ) -> tuple[list[CompletionChunk], AsyncRoutedStream]:
        stream = router.astream(turn, **options)
        chunks: list[CompletionChunk] = []
        async with stream:
            async for chunk in stream:
                chunks.append(chunk)
                if read is not None and len(chunks) >= read:
                    break
        return chunks, stream

    def open(self, router: Router, turn: Turn, **options: Any) -> RoutedStream | AsyncRoutedStream:
        """``router.stream`` (or ``astream``), not started: no call is made yet."""
        return router.astream(turn, **options) if self.is_async else router.stream(turn, **options)

    def start(self, router: Router, turn: Turn, **options: Any) -> RoutedStream | AsyncRoutedStream:
        """Open ``router.stream`` (or ``astream``) and start it: its tier is chosen, no
        chunk has been read."""
        stream = self.open(router, turn, **options)
        if isinstance(stream, AsyncRoutedStream):
            self._await(stream.start())
        else:
            stream.start()
        return stream

    def abandon(self, stream: RoutedStream | AsyncRoutedStream) -> None:
        """Close a stream its caller stopped reading (``close`` or ``aclose``)."""
        if isinstance(stream, AsyncRoutedStream):
            self._await(stream.aclose())
        else:
            stream.close()

    def read(
        self,
        stream: RoutedStream | AsyncRoutedStream,
        *,
        into: list[CompletionChunk] | None = None,
    ) -> list[CompletionChunk]:
        """Read the rest of a stream; ``into`` keeps what was read should it raise."""
        chunks = [] if into is None else into
        if isinstance(stream, AsyncRoutedStream):
            self._await(self._read(stream, chunks))
        else:
            for chunk in stream:
                chunks.append(chunk)
        return chunks

    @staticmethod
    async def _read(stream: AsyncRoutedStream, chunks: list[CompletionChunk]) -> None:
        async for chunk in stream:
            chunks.append(chunk)

    def close(self) -> None:
        """Close the test's event loop."""
        if self._loop is not None:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()


@pytest.fixture(params=["sync", "async"])
def path(request: pytest.FixtureRequest) -> Iterator[RoutePath]:
    """The router's sync and async paths: a test taking it runs once on each."""
    route = RoutePath(request.param)
    try:
        yield route
    finally:
        route.close()
