"""The proxy's Starlette app: OpenAI's chat completions API in front of a :class:`Router`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tiered_router import _json, _limits
from tiered_router._openai_wire import (
    ChunkRenderer,
    UnknownModel,
    completion_body,
    model_ids,
    parse_request,
    resolve_model,
    result_route,
    stream_route,
)
from tiered_router._types import Unset
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendStatusError,
    BackendTimeout,
    GateFailed,
    TieredRouterError,
)
from tiered_router.router import Router
from tiered_router.server._auth import KeyChecker
from tiered_router.server._limits import ClientLimiter, client_id
from tiered_router.server._metrics import Metrics
from tiered_router.server._settings import ServerSettings
from tiered_router.server._validate import (
    BadRequest,
    check_body,
    check_header_value,
    has_lone_surrogate,
)
from tiered_router.server._workers import worker_metrics

if TYPE_CHECKING:
    from tiered_router._openai_wire import RequestOptions
    from tiered_router._streaming import AsyncRoutedStream
    from tiered_router._types import Tier
    from tiered_router.backends._base import Backend
    from tiered_router.policy import Policy
    from tiered_router.trace import Trace, TraceSink
    from tiered_router.turn import Turn

__all__ = ["build_app"]

logger = logging.getLogger("tiered_router.server")


# fields that configure a client, not a completion: never honoured, never sent upstream
_FORBIDDEN = frozenset(
    {
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "extra_headers",
        "extra_query",
        "extra_body",
        "default_headers",
        "custom_llm_provider",
    }
)
_TRUE = frozenset({"true", "1", "yes"})
_CHAT = "/v1/chat/completions"
_CHAT_PATHS = frozenset({_CHAT, "/chat/completions"})


def _error(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return Response(_json.dumps(body), status, headers=headers, media_type="application/json")


class _TooLarge(Exception):
    pass


if sys.version_info >= (3, 11):

    def _within(seconds: float) -> contextlib.AbstractAsyncContextManager[Any]:
        return asyncio.timeout(seconds)

else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _within(seconds: float) -> AsyncIterator[None]:
        import anyio

        with anyio.fail_after(seconds):
            yield


class _EventStream(Response):
    """A Server-Sent Events response, leaner than Starlette's ``StreamingResponse``.

    No task group per response: one small task watches for the client going away, and the
    stream (with the upstream call under it) is closed at the next event once it has.
    """

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], *, headers: Mapping[str, str]) -> None:
        # no super().__init__(): without a body, init_headers sends no content-length
        self.status_code = 200
        self.background = None
        self.init_headers(headers)
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True

        watcher = asyncio.ensure_future(watch())
        events = self._events
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for event in events:
                if gone:
                    break
                await send({"type": "http.response.body", "body": event, "more_body": True})
            if not gone:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()  # closes the routed stream and the upstream connection


def _failure(exc: TieredRouterError) -> Response:
    """Return the response for a turn that produced nothing usable."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, GateFailed):
        return _error(502, message, error_type="upstream_error", code="gate_failed")
    errors = exc.errors if isinstance(exc, AllTiersFailed) else ()
    if errors and all(isinstance(e, BackendTimeout) for e in errors):
        return _error(504, message, error_type="timeout_error", code="upstream_timeout")
    statuses = {getattr(e, "status_code", None) for e in errors}
    if len(statuses) == 1:
        status = next(iter(statuses))
        if status == 429:
            waits = [getattr(e, "retry_after_s", None) for e in errors]
            known = [w for w in waits if isinstance(w, (int, float))]
            headers = {"retry-after": str(max(1, round(max(known))))} if known else None
            return _error(
                429, message, error_type="rate_limit_error", code="rate_limited", headers=headers
            )
        if (
            isinstance(status, int)
            and 400 <= status < 500
            and status not in (408, 409)
            and all(isinstance(e, BackendStatusError) for e in errors)
        ):
            # every tier rejected the request itself: that is the client's to fix
            return _error(status, message, code="upstream_rejected")
    return _error(502, message, error_type="upstream_error", code="all_tiers_failed")


class _Proxy:
    """The request handlers, sharing the router, the settings and the metrics."""

    def __init__(self, router: Router, settings: ServerSettings, metrics: Metrics) -> None:
        self.router = router
        self.policy: Policy = router.policy
        self.settings = settings
        self.metrics = metrics
        self.keys = KeyChecker(settings.api_keys)
        self.limiter = ClientLimiter(
            self.policy.server.limits, getattr(router.state, "store", router.state)
        )
        self.ready = False

    def _denied(self, request: Request) -> Response | None:
        if self.keys.allows(request.headers.get("authorization")):
            return None
        return _error(
            401,
            "missing or invalid API key: send Authorization: Bearer <key>",
            error_type="authentication_error",
            code="invalid_api_key",
            headers={"www-authenticate": "Bearer"},
        )

    async def _body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _TooLarge
        parts: list[bytes] = []
        size = 0
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise _TooLarge
            parts.append(part)
        return b"".join(parts)

    async def chat(self, request: Request) -> Response:
        started = time.perf_counter()
        self.metrics.in_flight += 1
        try:
            response = await self._chat(request, started)
        except Exception as exc:  # counted and answered here, so /metrics sees every 500
            response = await _server_error(request, exc)
        finally:
            self.metrics.in_flight -= 1
        self.metrics.response(_CHAT, response.status_code)
        if not isinstance(response, _EventStream):  # a stream logs when it ends
            trace = getattr(request.state, "trace", None)
            _access_log(request.scope["path"], response.status_code, started, trace)
        return response

    def _deadline(self, asked: float | None | Unset) -> float | None | Unset:
        """A client's ``timeout`` may shorten the policy's deadline, never lengthen it."""
        limit = self.policy.resilience.deadline_s
        if isinstance(asked, Unset) or limit is None:
            return asked
        return limit if asked is None else min(asked, limit)

    async def _chat(self, request: Request, started: float) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        client = client_id(request.headers.get("authorization"))
        if self.limiter.enabled:
            allowed, reason, retry_after = await self.limiter.admit(client)
            if not allowed:
                return _limited(reason, retry_after)
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            return _error(415, "send the body as JSON with Content-Type: application/json")
        try:
            async with _within(self.settings.read_timeout_s):
                raw = await self._body(request)
        except _TooLarge:
            limit = self.settings.max_body_bytes
            return _error(
                413, f"request body is larger than {limit} bytes", code="request_too_large"
            )
        except TimeoutError:
            seconds = self.settings.read_timeout_s
            return _error(
                408, f"request body not received within {seconds:g} s", code="request_timeout"
            )
        try:
            data = _limits.loads(raw)
        except _limits.JSONTooDeep as exc:
            return _error(400, f"request body: {exc}", code="json_too_deep")
        except ValueError as exc:
            return _error(400, f"request body is not valid JSON: {exc}", code="invalid_json")
        if not isinstance(data, dict):
            return _error(400, "request body must be a JSON object", code="invalid_json")
        if has_lone_surrogate(raw, data):
            return _error(
                400,
                "request body has a string with a lone UTF-16 surrogate (not valid Unicode)",
                code="invalid_unicode",
            )
        try:
            check_body(
                data,
                max_tools=self.settings.max_tools,
                max_schema_bytes=self.settings.max_schema_bytes,
            )
        except BadRequest as exc:
            return _error(400, str(exc), param=exc.param, code=exc.code)
        forbidden = sorted(_FORBIDDEN & data.keys())
        if forbidden:
            return _error(
                400,
                f"{forbidden[0]!r} is not accepted: the proxy decides where requests go",
                param=forbidden[0],
                code="forbidden_field",
            )
        signals = data.pop("tiered_router", None) or {}
        if not isinstance(signals, dict):
            return _error(400, "tiered_router: must be an object", param="tiered_router")
        if request.headers.get("x-tiered-router-final", "").lower() in _TRUE:
            signals = {**signals, "final": True}
        try:
            for name in ("turn_id", "task_id"):
                if signals.get(name) is not None:
                    check_header_value(f"tiered_router.{name}", signals[name])
            turn, options = parse_request(data, signals=signals)
        except BadRequest as exc:
            return _error(400, str(exc), param=exc.param, code=exc.code)
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            tier = resolve_model(self.policy, options.model)
        except UnknownModel as exc:
            return _error(404, str(exc), param="model", code="model_not_found")
        if options.stream:
            return await self._stream(
                turn, options, tier, started, request.scope["path"], client=client
            )
        try:
            async with self._task(turn):
                result = await self.router.acomplete(
                    turn, tier=tier, deadline_s=self._deadline(options.deadline_s)
                )
        except (AllTiersFailed, GateFailed) as exc:
            request.state.trace = exc.trace
            return _failure(exc)
        trace = request.state.trace = result.trace
        self.limiter.spent(client, trace.cost)
        route = result_route(result)
        body = completion_body(
            result.completion,
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=trace.backend or "",
            route=route,
        )
        content = _json.dumps(body)
        overhead = time.perf_counter() - started - sum(a.latency_s for a in trace.attempts)
        self.metrics.overhead.observe(max(overhead, 0.0))
        headers = _route_headers(route, overhead)
        return Response(content, headers=headers, media_type="application/json")

    def _task(self, turn: Turn) -> contextlib.AbstractAsyncContextManager[Any]:
        # a turn naming its task (tiered_router.task_id) runs in it: the task's totals,
        # lock and budgets live in the router's state store, shared with the other workers
        # and replicas when that store is Redis
        task_id = turn.metadata.get("task_id")
        if task_id is None:
            return contextlib.nullcontext()
        return self.router.task(str(task_id))

    async def _stream(
        self,
        turn: Turn,
        options: RequestOptions,
        tier: Tier | None,
        started: float,
        path: str,
        *,
        client: str = "anonymous",
    ) -> Response:
        async with self._task(turn):
            stream = self.router.astream(
                turn, tier=tier, deadline_s=self._deadline(options.deadline_s)
            )
        overhead = time.perf_counter() - started
        try:
            await stream.start()
        except (AllTiersFailed, GateFailed) as exc:
            response = _failure(exc)
            _access_log(path, response.status_code, started, exc.trace)
            return response
        route = stream_route(stream, self.policy)
        renderer = ChunkRenderer(
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=route["backend"] or "",
            include_usage=options.include_usage,
        )
        headers = _route_headers(route, overhead)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        events = self._events(stream, renderer, turn, (path, started), client=client)
        return _EventStream(events, headers=headers)

    async def _events(
        self,
        stream: AsyncRoutedStream,
        renderer: ChunkRenderer,
        turn: Turn,
        request: tuple[str, float],
        *,
        client: str = "anonymous",
    ) -> AsyncIterator[bytes]:
        self.metrics.in_flight += 1
        chunks = stream.__aiter__()
        try:
            async for chunk in chunks:
                objs = renderer.render(chunk)
                if objs:
                    yield b"".join(b"data: " + _json.dumps(o) + b"\n\n" for o in objs)
            route = result_route(stream.result)
            self.limiter.spent(client, stream.result.trace.cost)
            tail = [b"data: " + _json.dumps(o) + b"\n\n" for o in renderer.finish(route)]
            yield b"".join(tail) + b"data: [DONE]\n\n"
        except Exception as exc:
            # bytes already reached the client: end the stream with an in-band error, never
            # a silent cut
            self.metrics.interrupted.inc()
            if isinstance(exc, TieredRouterError):
                logger.warning("stream of turn %s interrupted: %s", turn.id, exc)
                message, kind = str(exc).splitlines()[0], "upstream_error"
            else:
                logger.error("stream of turn %s failed", turn.id, exc_info=exc)
                message, kind = "internal error in the proxy", "server_error"
            error = {"message": message, "type": kind, "param": None, "code": "stream_interrupted"}
            yield b"data: " + _json.dumps({"error": error}) + b"\n\n"
        finally:
            self.metrics.in_flight -= 1
            await _close_stream(stream, chunks)
            _access_log(request[0], 200, request[1], _stream_trace(stream), stream=True)

    async def models(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "tiered-router"}
            for name in model_ids(self.policy)
        ]
        return Response(
            _json.dumps({"object": "list", "data": data}), media_type="application/json"
        )

    async def healthz(self, request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def readyz(self, request: Request) -> Response:
        # ready between the end of startup and the start of shutdown; a load balancer
        # stops sending new requests when this turns 503
        if not self.ready:
            return Response(b'{"status":"not ready"}', 503, media_type="application/json")
        body: dict[str, str] = {"status": "ready"}
        store = getattr(self.router.state, "store", None)
        ping = getattr(store, "ping", None)
        if ping is not None:
            # a shared store that is down does not make the proxy unready: turns go on with
            # in-process state; the body says so for the operator
            up = await asyncio.to_thread(ping)
            body["state"] = "ok" if up else "unavailable: using in-process state"
        return Response(_json.dumps(body), media_type="application/json")

    async def metrics_text(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        return Response(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )


def _stream_trace(stream: AsyncRoutedStream) -> Trace | None:
    try:
        return stream.result.trace
    except RuntimeError:  # interrupted or left early: no finished trace
        return None


def _access_log(
    path: str, status: int, started: float, trace: Trace | None, *, stream: bool = False
) -> None:
    """One INFO line per chat request: status, route, latency and cost (``serve`` shows it)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    latency_ms = (time.perf_counter() - started) * 1000
    if trace is None:
        logger.info(
            "POST %s %d%s latency_ms=%.1f", path, status, " stream" if stream else "", latency_ms
        )
        return
    d = trace.decision
    logger.info(
        "POST %s %d%s tier=%s score=%.2f rule=%s escalated=%s latency_ms=%.1f cost=%.6f turn=%s",
        path,
        status,
        " stream" if stream else "",
        trace.tier or "-",
        d.score,
        d.rule or "-",
        "true" if trace.escalated else "false",
        latency_ms,
        trace.cost,
        trace.turn_id,
    )


async def _close_stream(stream: AsyncRoutedStream, chunks: AsyncIterator[Any]) -> None:
    """Close a routed stream now (a client that left must not keep the upstream busy)."""
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()
    await stream.aclose()


def _route_headers(route: Mapping[str, Any], overhead_s: float) -> dict[str, str]:
    headers = {
        "x-tiered-router-tier": str(route["tier"]),
        "x-tiered-router-backend": str(route["backend"]),
        "x-tiered-router-escalated": "true" if route["escalated"] else "false",
        "x-tiered-router-score": f"{route['score']:.4f}",
        "x-tiered-router-overhead-ms": f"{max(overhead_s, 0.0) * 1000:.3f}",
        "x-tiered-router-turn-id": str(route["turn_id"]),
    }
    if route["rule"]:
        headers["x-tiered-router-rule"] = str(route["rule"])
    return headers


def _limited(reason: str, retry_after_s: float) -> Response:
    """The 429 of a client over its per-key limit."""
    headers = {"retry-after": str(max(1, math.ceil(retry_after_s)))}
    if reason == "spend":
        return _error(
            429,
            "this API key reached its spend limit for the day (server.limits.spend_usd_per_day)",
            error_type="rate_limit_error",
            code="spend_limit_reached",
            headers=headers,
        )
    return _error(
        429,
        "this API key sent more requests this minute than server.limits.requests_per_minute",
        error_type="rate_limit_error",
        code="rate_limited",
        headers=headers,
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    # the traceback goes to the log; the client gets no internals
    logger.error("unexpected error serving %s", request.url.path, exc_info=exc)
    return _error(500, "internal error in the proxy", error_type="server_error")


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    if status == 405:
        return _error(405, f"method {request.method} not allowed on {request.url.path}")
    return _error(404, f"unknown path {request.url.path}", code="unknown_path")


def _backends(policy: Policy, env: Mapping[str, str] | None) -> dict[str, Backend]:
    """Build the tiers' backends now (keys looked up in ``env``), each with its own pool."""
    from tiered_router.backends.registry import build_backend

    names = dict.fromkeys((policy.tiers.fast, policy.tiers.frontier))
    return {name: build_backend(name, policy.backends[name], env=env) for name in names}


def _count_state_fallbacks(metrics: Metrics, router: Router, limiter: ClientLimiter) -> None:
    """Copy the state store's fallback count into the metrics."""
    state = router.state
    fallbacks = int(getattr(state, "failures", 0)) + limiter.failures
    inner = getattr(state, "store", None)
    fallbacks += int(getattr(inner, "background_failures", 0))
    metrics.state_fallbacks.values[()] = float(fallbacks)


SERVE_GC_THRESHOLD = 10_000
"""Allocations between young-generation collections in a ``tiered-router serve`` process."""


def _tune_gc() -> None:
    """Tune the garbage collector of a process that only serves the proxy.

    Everything alive once the app has started (modules, the policy, the backends: ~110,000
    objects) is frozen out of collection, so full collections stop walking it, and young
    collections run every :data:`SERVE_GC_THRESHOLD` allocations instead of every 700.
    Together they add ~15 % requests per second (``python benchmarks/bench_proxy.py``).
    ``serve`` does this; an app from :func:`~tiered_router.server.create_app` mounted in
    another process leaves that process's collector alone.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVE_GC_THRESHOLD, *gc.get_threshold()[1:])


class _ProxyApp(Starlette):
    """The proxy's Starlette app, with a short path for chat completions.

    A ``POST`` to a chat-completions path goes straight to the handler, which answers every
    outcome itself (errors included), without passing through Starlette's exception
    middleware and router: on a proxied turn their layers cost about 8 % of the proxy's CPU.
    Everything else, and every request once middleware has been added (``serve --otel``
    adds one), takes Starlette's full path.
    """

    def __init__(self, chat: Callable[[Request], Awaitable[Response]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._chat = chat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in _CHAT_PATHS
            and not self.user_middleware
        ):
            scope["app"] = self
            response = await self._chat(Request(scope, receive, send))
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


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
    metrics = worker_metrics()
    built = _backends(policy, env)
    built.update(backends or {})
    router = Router(policy, backends=built, sinks=[metrics, *sinks], record=record)
    proxy = _Proxy(router, settings, metrics)
    metrics.collectors.append(lambda m: _count_state_fallbacks(m, router, proxy.limiter))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from tiered_router import _http  # noqa: F401  (imported now, not on the first request)
        from tiered_router.backends import _openai_convert

        _openai_convert.sdk_param_names()  # imports the SDK now, not on the first request
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
        routes=[
            Route(_CHAT, proxy.chat, methods=["POST"]),
            Route("/chat/completions", proxy.chat, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/healthz", proxy.healthz, methods=["GET"]),
            Route("/readyz", proxy.readyz, methods=["GET"]),
            Route("/metrics", proxy.metrics_text, methods=["GET"]),
        ],
        exception_handlers={404: _not_found, 405: _not_found, Exception: _server_error},
        lifespan=lifespan,
    )
    app.state.router = router
    app.state.metrics = metrics
    app.state.proxy = proxy
    app.state.settings = settings
    return app
