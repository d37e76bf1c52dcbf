"""The proxy's Starlette app: OpenAI's chat completions API in front of a :class:`Router`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tiered_router.router import Router
from tiered_router.server._hops import with_hop
from tiered_router.server._limits import ClientLimiter
from tiered_router.server._metrics import Metrics, worker_metrics
from tiered_router.server._proxy import CHAT, COUNTED, Proxy
from tiered_router.server._responses import not_found, server_error
from tiered_router.server._settings import ServerSettings

if TYPE_CHECKING:
    from tiered_router.backends._base import Backend
    from tiered_router.policy._schema import Policy
    from tiered_router.trace import Trace, TraceSink

__all__ = ["SERVE_GC_THRESHOLD", "build_app"]

_CHAT_PATHS = frozenset({CHAT, "/chat/completions"})
_PATHS = frozenset({*_CHAT_PATHS, "/v1/models", "/healthz", "/readyz", "/metrics"})


def _backends(policy: Policy, env: Mapping[str, str] | None) -> dict[str, Backend]:
    """Build the tiers' backends now (keys looked up in ``env``), each with its own pool."""
    from tiered_router.backends.registry import build_backend

    names = dict.fromkeys((policy.tiers.fast, policy.tiers.frontier))
    return {name: build_backend(name, policy.backends[name], env=env) for name in names}


def _track_state(metrics: Metrics, router: Router, limiter: ClientLimiter) -> None:
    """Feed the state store's fallback count (and task reads saved) to the metrics."""

    def fallbacks() -> float:
        state = router.state
        inner = getattr(state, "store", None)
        count = int(getattr(state, "failures", 0)) + limiter.failures
        return float(count + int(getattr(inner, "background_failures", 0)))

    def saved() -> float:
        return float(getattr(getattr(router.state, "store", None), "task_reads_saved", 0))

    metrics.track(metrics.state_fallbacks, fallbacks)
    metrics.track(metrics.task_reads_saved, saved)


def _frontier_cost(router: Router) -> Callable[[Trace], float]:
    """What a turn would have cost on the frontier tier, for the cost-saved metric.

    The answer's tokens at the frontier backend's prices (the frontier's own recorded cost
    when it answered); a turn with no answer counts what it spent, so it saves nothing.
    """
    from tiered_router.pricing import cost_of

    frontier = router.policy.tiers.frontier

    def cost(trace: Trace) -> float:
        served = next(
            (
                a
                for a in reversed(trace.attempts)
                if a.backend == trace.backend and a.error is None and not a.cancelled
            ),
            None,
        )
        config = router.backend_config(frontier)
        if served is None or config is None:
            return sum(a.cost for a in trace.attempts)
        if served.backend == frontier:
            return served.cost
        return cost_of(served.usage, config.price)

    return cost


SERVE_GC_THRESHOLD = 10_000
"""Allocations between young-generation collections in a ``tiered-router serve`` process."""


def _tune_gc() -> None:
    """Tune the garbage collector of a process that only serves the proxy.

    Everything alive once the app has started (modules, the policy, the backends: ~110,000
    objects) is frozen out of collection, so full collections stop walking it, and young
    collections run every :data:`SERVE_GC_THRESHOLD` allocations instead of every 700.
    Measured at concurrency 32: 1,309 -> 1,398 requests per second with the freeze, about
    1,400 -> 1,540 with the threshold too (docs/proxy.md, Performance).
    ``serve`` does this; an app from :func:`~tiered_router.server.create_app` mounted in
    another process leaves that process's collector alone.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVE_GC_THRESHOLD, *gc.get_threshold()[1:])


class _Endpoint:
    """A plain ASGI app as a Starlette route's endpoint (Starlette calls it as it is)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class _ProxyApp(Starlette):
    """The proxy's Starlette app, with chat completions served as a plain ASGI app.

    A ``POST`` to a chat-completions path goes straight to :meth:`Proxy.chat`, which reads
    the ASGI scope and messages itself and answers every outcome (errors included): no
    Starlette request, response, exception middleware or router on the hot path
    (docs/proxy.md, "The server layer"). Everything else, and every request once middleware
    has been added (``serve --otel`` adds one), takes Starlette's full path, where the chat
    route is the same ASGI app.
    """

    def __init__(self, chat: ASGIApp, metrics: Metrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._chat = chat
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in _CHAT_PATHS
            and not self.user_middleware
        ):
            await self._chat(scope, receive, send)
            return
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        # every response is counted: the chat handler counts its own, the rest here
        path = scope["path"] if scope["path"] in _PATHS else "other"
        metrics = self._metrics

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not scope.get(COUNTED):
                metrics.response(path, int(message["status"]))
            await send(message)

        await super().__call__(scope, receive, counting_send)


def build_app(
    policy: Policy,
    settings: ServerSettings,
    *,
    sinks: Sequence[TraceSink] = (),
    backends: Mapping[str, Backend] | None = None,
    env: Mapping[str, str] | None = None,
    record: bool = False,
) -> Starlette:
    """Build the Starlette app (see :func:`tiered_router.server.create_app`)."""
    policy = with_hop(policy, settings.hop_id)  # every upstream request names this proxy
    metrics = worker_metrics()
    built = _backends(policy, env)
    built.update(backends or {})
    router = Router(policy, backends=built, sinks=[metrics, *sinks], record=record)
    proxy = Proxy(router, settings, metrics)
    _track_state(metrics, router, proxy.limiter)
    metrics.frontier_cost = _frontier_cost(router)
    metrics.track_dropped(sinks)
    if router.monitor is not None:
        metrics.watch_monitor(router.monitor.config.kinds)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from tiered_router._http import _direct

        _direct.preload()  # the HTTP stack loads now, not on the first request
        if getattr(app.state, "tune_gc", False):
            _tune_gc()
        proxy.ready = True
        yield
        proxy.ready = False
        # uvicorn runs this after the in-flight requests have finished
        await proxy.limiter.aclose()
        await router.aclose()
        metrics.close()

    app = _ProxyApp(
        proxy.chat,
        metrics,
        routes=[
            Route(CHAT, _Endpoint(proxy.chat), methods=["POST"]),
            Route("/chat/completions", _Endpoint(proxy.chat), methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/healthz", proxy.healthz, methods=["GET"]),
            Route("/readyz", proxy.readyz, methods=["GET"]),
            Route("/metrics", proxy.metrics_text, methods=["GET"]),
        ],
        exception_handlers={404: not_found, 405: not_found, Exception: server_error},
        lifespan=lifespan,
    )
    app.state.router = router
    app.state.metrics = metrics
    app.state.proxy = proxy
    app.state.settings = settings
    return app
