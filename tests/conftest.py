from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from redisfix import RedisServer

from tiered_router.testing import ScriptedServer


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
