"""The proxy's request handlers: chat completions (JSON and SSE), models, health, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tiered_router import _json, _limits
from tiered_router._types import Unset
from tiered_router.exceptions import (
    AllTiersFailed,
    GateFailed,
    InvalidRequest,
    TieredRouterError,
)
from tiered_router.openai._wire import (
    ChunkRenderer,
    UnknownModel,
    completion_body,
    model_ids,
    parse_request,
    resolve_model,
    result_route,
    stream_route,
)
from tiered_router.router import Router
from tiered_router.server._auth import KeyChecker
from tiered_router.server._hops import HOP_HEADER, HopRefused, forward_chain, read_chain
from tiered_router.server._limits import ClientLimiter, client_id
from tiered_router.server._metrics import CONTENT_TYPE, Metrics
from tiered_router.server._responses import (
    SHUTTING_DOWN,
    EventStream,
    access_log,
    error,
    failure,
    limited,
    route_headers,
    server_error,
    shutting_down,
)
from tiered_router.server._settings import ServerSettings
from tiered_router.server._validate import (
    BadRequest,
    check_body,
    check_header_value,
    has_lone_surrogate,
)
from tiered_router.trace import Trace

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.engine._streaming import AsyncRoutedStream
    from tiered_router.openai._wire import RequestOptions
    from tiered_router.policy._schema import Policy
    from tiered_router.turn import Turn

__all__ = ["CHAT", "COUNTED", "Proxy"]

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
CHAT = "/v1/chat/completions"
COUNTED = "tiered_router.counted"
"""Scope key set once a handler has counted its own response in ``http_responses_total``."""


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


class Proxy:
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
        return error(
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
        self.metrics.in_flight.inc()
        request.scope[COUNTED] = True  # the app does not count this response again
        try:
            response = await self._chat(request, started)
        except asyncio.CancelledError:
            # uvicorn cancels what still runs when its graceful shutdown ends: the client
            # gets OpenAI's shape and a status to retry on, not a bare 500
            _uncancel()
            response = shutting_down()
        except Exception as exc:  # counted and answered here, so /metrics sees every 500
            response = await server_error(request, exc)
        finally:
            self.metrics.in_flight.dec()
        self.metrics.response(CHAT, response.status_code)
        if not isinstance(response, EventStream):  # a stream logs when it ends
            trace = getattr(request.state, "trace", None)
            access_log(request.scope["path"], response.status_code, started, trace)
        return response

    def _deadline(self, asked: float | None | Unset) -> float | None | Unset:
        """A client's ``timeout`` may shorten the policy's deadline, never lengthen it."""
        limit = self.policy.resilience.deadline_s
        if isinstance(asked, Unset) or limit is None:
            return asked
        return limit if asked is None else min(asked, limit)

    async def _chat(self, request: Request, started: float) -> Response:
        try:  # a loop, or a chain too long or not a proxy's, ends here before any call
            hops = read_chain(request.headers.getlist(HOP_HEADER), self.settings.hop_id)
        except HopRefused as exc:
            return error(exc.status, str(exc), param=HOP_HEADER, code=exc.code)
        denied = self._denied(request)
        if denied is not None:
            return denied
        client = client_id(request.headers.get("authorization"))
        if self.limiter.enabled:
            allowed, reason, retry_after = await self.limiter.admit(client)
            if not allowed:
                return limited(reason, retry_after)
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            return error(415, "send the body as JSON with Content-Type: application/json")
        try:
            async with _within(self.settings.read_timeout_s):
                raw = await self._body(request)
        except _TooLarge:
            limit = self.settings.max_body_bytes
            return error(
                413, f"request body is larger than {limit} bytes", code="request_too_large"
            )
        except TimeoutError:
            seconds = self.settings.read_timeout_s
            return error(
                408, f"request body not received within {seconds:g} s", code="request_timeout"
            )
        try:
            data = _limits.loads(raw)
        except _limits.JSONTooDeep as exc:
            return error(400, f"request body: {exc}", code="json_too_deep")
        except ValueError as exc:
            return error(400, f"request body is not valid JSON: {exc}", code="invalid_json")
        if not isinstance(data, dict):
            return error(400, "request body must be a JSON object", code="invalid_json")
        if has_lone_surrogate(raw, data):
            return error(
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
            return error(400, str(exc), param=exc.param, code=exc.code)
        forbidden = sorted(_FORBIDDEN & data.keys())
        if forbidden:
            return error(
                400,
                f"{forbidden[0]!r} is not accepted: the proxy decides where requests go",
                param=forbidden[0],
                code="forbidden_field",
            )
        signals = data.pop("tiered_router", None) or {}
        if not isinstance(signals, dict):
            return error(400, "tiered_router: must be an object", param="tiered_router")
        if request.headers.get("x-tiered-router-final", "").lower() in _TRUE:
            signals = {**signals, "final": True}
        try:
            for name in ("turn_id", "task_id"):
                if signals.get(name) is not None:
                    check_header_value(f"tiered_router.{name}", signals[name])
            turn, options = parse_request(data, signals=signals)
            chain = forward_chain(hops, self.settings.hop_id)
            if chain is not None:  # came through other proxies: name them all upstream
                turn = turn.with_updates(
                    params={**turn.params, "extra_headers": {HOP_HEADER: chain}}
                )
        except InvalidRequest as exc:
            return error(400, str(exc), param=exc.param, code=exc.code)
        except ValueError as exc:
            return error(400, str(exc))
        try:
            tier = resolve_model(self.policy, options.model)
        except UnknownModel as exc:
            return error(404, str(exc), param="model", code="model_not_found")
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
            request.state.trace = _trace_of(exc)
            self._overhead(started, request.state.trace)
            return failure(exc)
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
        headers = route_headers(route, self._overhead(started, trace))
        return Response(content, headers=headers, media_type="application/json")

    def _overhead(self, started: float, trace: Trace | None) -> float:
        """Observe and return the time this request spent outside its upstream calls."""
        upstream = sum(a.latency_s for a in trace.attempts) if trace is not None else 0.0
        overhead = max(time.perf_counter() - started - upstream, 0.0)
        self.metrics.overhead.observe(overhead)
        return overhead

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
        # a stream's overhead is the time before its first upstream call
        overhead = time.perf_counter() - started
        self.metrics.overhead.observe(overhead)
        try:
            await stream.start()
        except asyncio.CancelledError:
            await stream.aclose()  # its upstream connection goes now, not at exit
            raise
        except (AllTiersFailed, GateFailed) as exc:
            response = failure(exc)
            access_log(path, response.status_code, started, _trace_of(exc))
            return response
        route = stream_route(stream, self.policy)
        renderer = ChunkRenderer(
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=route["backend"] or "",
            include_usage=options.include_usage,
        )
        headers = route_headers(route, overhead)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        events = self._events(stream, renderer, turn, (path, started), client=client)
        return EventStream(events, headers=headers)

    async def _events(
        self,
        stream: AsyncRoutedStream,
        renderer: ChunkRenderer,
        turn: Turn,
        request: tuple[str, float],
        *,
        client: str = "anonymous",
    ) -> AsyncIterator[bytes]:
        self.metrics.in_flight.inc()
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
        except asyncio.CancelledError:
            # shut down mid-stream: the headers are gone, so the end is an in-band error
            _uncancel()
            self.metrics.interrupted.inc()
            logger.warning("stream of turn %s cut short: the proxy is shutting down", turn.id)
            detail = {
                "message": SHUTTING_DOWN,
                "type": "server_error",
                "param": None,
                "code": "server_shutting_down",
            }
            yield b"data: " + _json.dumps({"error": detail}) + b"\n\n"
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
            detail = {"message": message, "type": kind, "param": None, "code": "stream_interrupted"}
            yield b"data: " + _json.dumps({"error": detail}) + b"\n\n"
        finally:
            self.metrics.in_flight.dec()
            await _close_stream(stream, chunks)
            access_log(request[0], 200, request[1], _stream_trace(stream), stream=True)

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
        await self._read_breakers()
        monitor = self.router.monitor
        if monitor is not None and self.metrics.monitor is not None:
            self.metrics.monitor.show(await monitor.aquality())
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def _read_breakers(self) -> None:
        """Put each routed backend's breaker state on the metrics (one read per scrape)."""
        policy = self.router.policy
        drafting = policy.drafts.backends if policy.drafts is not None else ()
        names = dict.fromkeys((policy.tiers.fast, policy.tiers.frontier, *drafting))
        states = {}
        for name in names:
            snapshot = await self.router.breaker(name).asnapshot()
            states[name] = str(snapshot.state)
        self.metrics.breakers(states)


def _trace_of(exc: AllTiersFailed | GateFailed) -> Trace | None:
    """The failed turn's trace (the engine's errors carry a :class:`Trace`)."""
    return exc.trace if isinstance(exc.trace, Trace) else None


def _uncancel() -> None:
    """Take back the cancellation just handled, so later timeouts in this task still work."""
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is not None:
        uncancel()


def _stream_trace(stream: AsyncRoutedStream) -> Trace | None:
    try:
        return stream.result.trace
    except RuntimeError:  # interrupted or left early: no finished trace
        return None


async def _close_stream(stream: AsyncRoutedStream, chunks: AsyncIterator[Any]) -> None:
    """Close a routed stream now (a client that left must not keep the upstream busy)."""
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()
    await stream.aclose()
