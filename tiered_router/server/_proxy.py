"""The proxy's request handlers: chat completions (JSON and SSE), models, health, metrics.

A chat request goes through four steps, each its own method of :class:`Proxy`: admit (loop,
key, client limits), read (body, checks, the turn), route (the router, cancelled if the
client leaves) and render (OpenAI's JSON or Server-Sent Events). A step that refuses the
request raises ``Refused`` with its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_router import _json
from tiered_router._types import Unset
from tiered_router.exceptions import (
    AllTiersFailed,
    GateFailed,
    TieredRouterError,
)
from tiered_router.openai._wire import (
    ChunkRenderer,
    completion_body,
    model_ids,
    result_route,
    stream_route,
)
from tiered_router.router import Router
from tiered_router.server._auth import KeyChecker
from tiered_router.server._exchange import ClientGone, Exchange, Reply, uncancel
from tiered_router.server._hops import HOP_HEADER, HopRefused, read_chain
from tiered_router.server._limits import ClientLimiter, client_id
from tiered_router.server._metrics import CONTENT_TYPE, Metrics
from tiered_router.server._read import Call, Refused, RequestReader
from tiered_router.server._responses import (
    SHUTTING_DOWN,
    access_log,
    error,
    failure,
    internal_error,
    limited,
    route_headers,
    shutting_down,
)
from tiered_router.server._settings import ServerSettings
from tiered_router.trace import Trace

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

    from tiered_router.engine._streaming import AsyncRoutedStream
    from tiered_router.policy._schema import Policy
    from tiered_router.router import RoutedResult
    from tiered_router.turn import Turn

__all__ = ["CHAT", "COUNTED", "Proxy"]

logger = logging.getLogger("tiered_router.server")


CHAT = "/v1/chat/completions"
COUNTED = "tiered_router.counted"
"""Scope key set once a handler has counted its own response in ``http_responses_total``."""
_HOP = HOP_HEADER.encode("latin-1")


@dataclass(frozen=True, slots=True)
class _Stream:
    """A stream about to be sent: its headers and its events."""

    headers: dict[str, str]
    events: AsyncIterator[bytes]
    status_code: int = 200


_GONE = Reply(b"", 499)
"""Not sent: the client left first (nginx's 499, in the access line and /metrics)."""

_Outcome = tuple["Reply | _Stream", "Trace | None"]


class Proxy:
    """The request handlers, sharing the router, the settings and the metrics.

    :meth:`chat` is a plain ASGI app (no framework on the hot path); the other handlers
    are Starlette endpoints.
    """

    def __init__(self, router: Router, settings: ServerSettings, metrics: Metrics) -> None:
        self.router = router
        self.policy: Policy = router.policy
        self.settings = settings
        self.metrics = metrics
        self.keys = KeyChecker(settings.api_keys)
        self.limiter = ClientLimiter(
            self.policy.server.limits, getattr(router.state, "store", router.state)
        )
        self.reader = RequestReader(self.policy, settings)
        self.ready = False

    def _denied(self, authorization: str | None) -> Reply | None:
        if self.keys.allows(authorization):
            return None
        return error(
            401,
            "missing or invalid API key: send Authorization: Bearer <key>",
            error_type="authentication_error",
            code="invalid_api_key",
            headers={"www-authenticate": "Bearer"},
        )

    async def chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one chat completion request (an ASGI app): admit, read, route, render."""
        started = time.perf_counter()
        scope[COUNTED] = True  # the app does not count this response again
        exchange = Exchange(scope, receive, send)
        try:
            answer, trace = await self._answer(exchange, started)
            self.metrics.response(CHAT, answer.status_code)
            if isinstance(answer, _Stream):  # a stream logs when it ends
                await exchange.stream(answer.headers, answer.events)
                return
            exchange.disarm()
            access_log(exchange.path, answer.status_code, started, trace)
            if answer is not _GONE:
                await answer(scope, receive, send)
        finally:
            exchange.close()

    async def _answer(self, exchange: Exchange, started: float) -> _Outcome:
        """The answer to a request, whatever happens on the way (counted in flight)."""
        self.metrics.in_flight.add((), 1.0)
        try:
            return await self._chat(exchange, started)
        except asyncio.CancelledError:
            # the client left (its upstream call is cancelled), or uvicorn's graceful
            # shutdown ran out: then the client gets OpenAI's shape and a status to retry on
            uncancel()
            return (_GONE if exchange.gone else shutting_down()), None
        except ClientGone:
            return _GONE, None
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise  # the process is stopping: nothing to answer
        except BaseException as exc:  # any other failure is a bug, answered here
            # counted and answered in OpenAI's shape, so /metrics sees every 500; a
            # BaseException that is not the process stopping (a test double's ScriptError, a
            # library's own) would otherwise reach uvicorn, which writes a plain-text 500
            # that no client library can read and /metrics never counts
            return internal_error(exchange.path, exc), None
        finally:
            self.metrics.in_flight.add((), -1.0)

    def _deadline(self, asked: float | None | Unset) -> float | None | Unset:
        """A client's ``timeout`` may shorten the policy's deadline, never lengthen it."""
        limit = self.policy.resilience.deadline_s
        if isinstance(asked, Unset) or limit is None:
            return asked
        return limit if asked is None else min(asked, limit)

    async def _chat(self, exchange: Exchange, started: float) -> _Outcome:
        try:
            hops, client = await self._admit(exchange)
            call = await self.reader.read(exchange, hops, client)
        except Refused as refused:
            return refused.reply, None
        exchange.watch()  # from here on, a client that leaves cancels the turn
        if call.options.stream:
            return await self._stream(exchange, call, started), None
        return await self._complete(exchange, call, started)

    async def _admit(self, exchange: Exchange) -> tuple[list[str], str]:
        """Refuse a looping request, a wrong key, a client over its limits; else who sent it."""
        hops: list[str] = []
        hop_headers = exchange.header_values(_HOP)  # empty, straight from a client
        if hop_headers:
            try:  # a loop, or a chain too long or not a proxy's, ends here before any call
                hops = read_chain(hop_headers, self.settings.hop_id)
            except HopRefused as exc:
                raise Refused(
                    error(exc.status, str(exc), param=HOP_HEADER, code=exc.code)
                ) from None
        authorization = exchange.header(b"authorization")
        denied = self._denied(authorization)
        if denied is not None:
            raise Refused(denied)
        client = client_id(authorization)
        if self.limiter.enabled:
            allowed, reason, retry_after = await self.limiter.admit(client)
            if not allowed:
                raise Refused(limited(reason, retry_after))
        return hops, client

    async def _complete(self, exchange: Exchange, call: Call, started: float) -> _Outcome:
        """Route a JSON turn (cancelled if the client leaves) and render its completion."""
        turn = call.turn
        try:
            async with self._task(turn):
                result = await self.router.acomplete(
                    turn, tier=call.tier, deadline_s=self._deadline(call.options.deadline_s)
                )
        except (AllTiersFailed, GateFailed) as exc:
            trace = _trace_of(exc)
            self._overhead(started, trace)
            return failure(exc), trace
        self.limiter.spent(call.client, result.trace.cost)
        return self._render(result, started), result.trace

    def _render(self, result: RoutedResult, started: float) -> Reply:
        """OpenAI's chat completion for a routed turn, with the route in its headers."""
        trace = result.trace
        route = result_route(result)
        body = completion_body(
            result.completion,
            completion_id=f"chatcmpl-tr-{trace.turn_id}",
            model=trace.backend or "",
            route=route,
        )
        headers = route_headers(route, self._overhead(started, trace))
        return Reply(_json.dumps(body), headers=headers)

    def _overhead(self, started: float, trace: Trace | None) -> float:
        """Observe and return the time this request spent outside its upstream calls."""
        upstream = sum(a.latency_s for a in trace.attempts) if trace is not None else 0.0
        overhead = max(time.perf_counter() - started - upstream, 0.0)
        self.metrics.overhead.observe((), overhead)
        return overhead

    def _task(self, turn: Turn) -> contextlib.AbstractAsyncContextManager[Any]:
        # a turn naming its task (tiered_router.task_id) runs in it: the task's totals,
        # lock and budgets live in the router's state store, shared with the other workers
        # and replicas when that store is Redis
        task_id = turn.metadata.get("task_id")
        if task_id is None:
            return contextlib.nullcontext()
        return self.router.task(str(task_id))

    async def _stream(self, exchange: Exchange, call: Call, started: float) -> Reply | _Stream:
        """Start a routed stream (cancelled if the client leaves) and render its events."""
        turn = call.turn
        async with self._task(turn):
            stream = self.router.astream(
                turn, tier=call.tier, deadline_s=self._deadline(call.options.deadline_s)
            )
        # a stream's overhead is the time before its first upstream call
        overhead = time.perf_counter() - started
        self.metrics.overhead.observe((), overhead)
        try:
            await stream.start()
        except asyncio.CancelledError:
            await stream.aclose()  # its upstream connection goes now, not at exit
            raise
        except (AllTiersFailed, GateFailed) as exc:
            response = failure(exc)
            access_log(exchange.path, response.status_code, started, _trace_of(exc))
            return response
        route = stream_route(stream, self.policy)
        renderer = ChunkRenderer(
            completion_id=f"chatcmpl-tr-{turn.id}",
            model=route["backend"] or "",
            include_usage=call.options.include_usage,
        )
        headers = route_headers(route, overhead)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        events = self._events(stream, renderer, exchange, call, started)
        return _Stream(headers, events)

    async def _events(
        self,
        stream: AsyncRoutedStream,
        renderer: ChunkRenderer,
        exchange: Exchange,
        call: Call,
        started: float,
    ) -> AsyncIterator[bytes]:
        self.metrics.in_flight.add((), 1.0)
        chunks = stream.__aiter__()
        try:
            async for chunk in chunks:
                objs = renderer.render(chunk)
                if objs:
                    yield b"".join(b"data: " + _json.dumps(o) + b"\n\n" for o in objs)
            route = result_route(stream.result)
            self.limiter.spent(call.client, stream.result.trace.cost)
            tail = [b"data: " + _json.dumps(o) + b"\n\n" for o in renderer.finish(route)]
            yield b"".join(tail) + b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            if exchange.gone:
                raise  # the client left: the stream closes below, nothing more to say
            yield self._cut_short(call.turn)
        except Exception as exc:
            # bytes already reached the client: end the stream with an in-band error, never
            # a silent cut
            yield self._interrupted(call.turn, exc)
        finally:
            self.metrics.in_flight.add((), -1.0)
            await _close_stream(stream, chunks)
            access_log(exchange.path, 200, started, _stream_trace(stream), stream=True)

    def _cut_short(self, turn: Turn) -> bytes:
        """The in-band error of a stream the server's shutdown cut (its headers are gone)."""
        uncancel()
        self.metrics.interrupted.add()
        logger.warning("stream of turn %s cut short: the proxy is shutting down", turn.id)
        detail = {
            "message": SHUTTING_DOWN,
            "type": "server_error",
            "param": None,
            "code": "server_shutting_down",
        }
        return b"data: " + _json.dumps({"error": detail}) + b"\n\n"

    def _interrupted(self, turn: Turn, exc: Exception) -> bytes:
        """The in-band error of a stream that failed after its first byte."""
        self.metrics.interrupted.add()
        if isinstance(exc, TieredRouterError):
            logger.warning("stream of turn %s interrupted: %s", turn.id, exc)
            message, kind = str(exc).splitlines()[0], "upstream_error"
        else:
            logger.error("stream of turn %s failed", turn.id, exc_info=exc)
            message, kind = "internal error in the proxy", "server_error"
        detail = {"message": message, "type": kind, "param": None, "code": "stream_interrupted"}
        return b"data: " + _json.dumps({"error": detail}) + b"\n\n"

    async def models(self, request: Request) -> Reply:
        denied = self._denied(request.headers.get("authorization"))
        if denied is not None:
            return denied
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "tiered-router"}
            for name in model_ids(self.policy)
        ]
        return Reply(_json.dumps({"object": "list", "data": data}))

    async def healthz(self, request: Request) -> Reply:
        return Reply(b'{"status":"ok"}')

    async def readyz(self, request: Request) -> Reply:
        # ready between the end of startup and the start of shutdown; a load balancer
        # stops sending new requests when this turns 503
        if not self.ready:
            return Reply(b'{"status":"not ready"}', 503)
        body: dict[str, str] = {"status": "ready"}
        store = getattr(self.router.state, "store", None)
        ping = getattr(store, "ping", None)
        if ping is not None:
            # a shared store that is down does not make the proxy unready: turns go on with
            # in-process state; the body says so for the operator
            up = await asyncio.to_thread(ping)
            body["state"] = "ok" if up else "unavailable: using in-process state"
        return Reply(_json.dumps(body))

    async def metrics_text(self, request: Request) -> Reply:
        denied = self._denied(request.headers.get("authorization"))
        if denied is not None:
            return denied
        await self._read_breakers()
        monitor = self.router.monitor
        if monitor is not None and self.metrics.monitor is not None:
            self.metrics.monitor.show(await monitor.aquality())
        return Reply(self.metrics.render().encode("utf-8"), media_type=CONTENT_TYPE)

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
