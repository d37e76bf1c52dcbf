"""The proxy's answers: OpenAI-shaped errors, route headers, the access log."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tiered_router import _json
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendStatusError,
    BackendTimeout,
    GateFailed,
    TieredRouterError,
)
from tiered_router.server._exchange import Reply

if TYPE_CHECKING:
    from starlette.requests import Request

    from tiered_router.trace import Trace

__all__ = [
    "SHUTTING_DOWN",
    "access_log",
    "error",
    "failure",
    "internal_error",
    "limited",
    "not_found",
    "route_headers",
    "server_error",
    "shutting_down",
]

logger = logging.getLogger("tiered_router.server")


def error(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return Reply(_json.dumps(body), status, headers=headers)


SHUTTING_DOWN = "the proxy is shutting down: send the request again (to another replica)"


def shutting_down() -> Reply:
    """The 503 of a request still running when the server's graceful shutdown ran out."""
    return error(503, SHUTTING_DOWN, error_type="server_error", code="server_shutting_down")


def failure(exc: TieredRouterError) -> Reply:
    """Return the response for a turn that produced nothing usable."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, GateFailed):
        return error(502, message, error_type="upstream_error", code="gate_failed")
    errors = exc.errors if isinstance(exc, AllTiersFailed) else ()
    if errors and all(isinstance(e, BackendTimeout) for e in errors):
        return error(504, message, error_type="timeout_error", code="upstream_timeout")
    statuses = {getattr(e, "status_code", None) for e in errors}
    if len(statuses) == 1:
        status = next(iter(statuses))
        if status == 429:
            waits = [getattr(e, "retry_after_s", None) for e in errors]
            known = [w for w in waits if isinstance(w, (int, float))]
            headers = {"retry-after": str(max(1, round(max(known))))} if known else None
            return error(
                429, message, error_type="rate_limit_error", code="rate_limited", headers=headers
            )
        if (
            isinstance(status, int)
            and 400 <= status < 500
            and status not in (408, 409)
            and all(isinstance(e, BackendStatusError) for e in errors)
        ):
            # every tier rejected the request itself: that is the client's to fix
            return error(status, message, code="upstream_rejected")
    return error(502, message, error_type="upstream_error", code="all_tiers_failed")


def access_log(
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
        "POST %s %d%s tier=%s score=%.2f rule=%s escalated=%s attempts=%d latency_ms=%.1f "
        "cost=%.6f turn=%s",
        path,
        status,
        " stream" if stream else "",
        trace.tier or "-",
        d.score,
        d.rule or "-",
        "true" if trace.escalated else "false",
        len(trace.attempts),
        latency_ms,
        trace.cost,
        trace.turn_id,
    )


def route_headers(route: Mapping[str, Any], overhead_s: float) -> dict[str, str]:
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
    if route.get("shadowed"):  # the monitor compares this answer with the frontier's
        headers["x-tiered-router-shadowed"] = "true"
    if "drafts" in route:  # a draft panel or a hedge: what the turn had in flight
        headers["x-tiered-router-drafts"] = str(route["drafts"])
        headers["x-tiered-router-cancelled"] = str(route["cancelled"])
        headers["x-tiered-router-hedged"] = "true" if route["hedged"] else "false"
    return headers


def limited(reason: str, retry_after_s: float) -> Reply:
    """The 429 of a client over its per-key limit."""
    headers = {"retry-after": str(max(1, math.ceil(retry_after_s)))}
    if reason == "spend":
        return error(
            429,
            "this API key reached its spend limit for the day (server.limits.spend_usd_per_day)",
            error_type="rate_limit_error",
            code="spend_limit_reached",
            headers=headers,
        )
    return error(
        429,
        "this API key sent more requests this minute than server.limits.requests_per_minute",
        error_type="rate_limit_error",
        code="rate_limited",
        headers=headers,
    )


def internal_error(path: str, exc: BaseException) -> Reply:
    """The 500 of a bug: the traceback goes to the log, the client gets no internals."""
    logger.error("unexpected error serving %s", path, exc_info=exc)
    return error(500, "internal error in the proxy", error_type="server_error")


async def server_error(request: Request, exc: Exception) -> Reply:
    return internal_error(request.url.path, exc)


async def not_found(request: Request, exc: Exception) -> Reply:
    status = getattr(exc, "status_code", 404)
    if status == 405:
        return error(405, f"method {request.method} not allowed on {request.url.path}")
    return error(404, f"unknown path {request.url.path}", code="unknown_path")
