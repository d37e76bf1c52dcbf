"""Reading a chat request: the body under its limits, the checks, the turn it asks for.

:class:`RequestReader` is the proxy's read step (between admitting a request and routing
it): it reads the body under the size and time limits, parses it as a JSON object, refuses
what no backend may be sent (bad Unicode, oversized tools and schemas, fields that configure
the client), and builds the turn, its options and its pinned tier. Every refusal is a
:class:`Refused` carrying the answer, in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_router import _limits
from tiered_router.exceptions import InvalidRequest
from tiered_router.openai._wire import UnknownModel, parse_request, resolve_model
from tiered_router.server._exchange import Exchange, Reply, TooLarge
from tiered_router.server._hops import HOP_HEADER, forward_chain
from tiered_router.server._responses import error
from tiered_router.server._validate import (
    BadRequest,
    check_body,
    check_header_value,
    has_lone_surrogate,
)

if TYPE_CHECKING:
    from tiered_router._types import Tier
    from tiered_router.openai._wire import RequestOptions
    from tiered_router.policy._schema import Policy
    from tiered_router.server._settings import ServerSettings
    from tiered_router.turn import Turn

__all__ = ["Call", "Refused", "RequestReader"]

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


if sys.version_info >= (3, 11):

    def _within(seconds: float) -> contextlib.AbstractAsyncContextManager[Any]:
        return asyncio.timeout(seconds)

else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _within(seconds: float) -> AsyncIterator[None]:
        import anyio

        with anyio.fail_after(seconds):
            yield


class Refused(Exception):
    """A request answered before it is routed; ``reply`` says why."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status_code)
        self.reply = reply


@dataclass(frozen=True, slots=True)
class Call:
    """A request read and checked: the turn to route and how to answer it."""

    turn: Turn
    options: RequestOptions
    tier: Tier | None
    client: str


class RequestReader:
    """The proxy's read step: a request's body to the turn it asks for.

    Args:
        policy: The policy (for the model names that pin a tier).
        settings: The server settings (body size and time limits, tool limits, hop id).

    """

    def __init__(self, policy: Policy, settings: ServerSettings) -> None:
        self.policy = policy
        self.settings = settings

    async def read(self, exchange: Exchange, hops: list[str], client: str) -> Call:
        """Read and check the body; return the turn it asks for.

        Raises:
            Refused: The request is refused (413, 408, 415, 400, 404), with the answer.
            ClientGone: The client left before sending the whole body.

        """
        raw, data = await self._json_body(exchange)
        self._check(raw, data)
        signals = data.pop("tiered_router", None) or {}
        if not isinstance(signals, dict):
            raise Refused(error(400, "tiered_router: must be an object", param="tiered_router"))
        final = exchange.header(b"x-tiered-router-final")
        if final is not None and final.lower() in _TRUE:
            signals = {**signals, "final": True}
        turn, options = self._parse(data, signals, hops)
        try:
            tier = resolve_model(self.policy, options.model)
        except UnknownModel as exc:
            raise Refused(error(404, str(exc), param="model", code="model_not_found")) from None
        return Call(turn, options, tier, client)

    async def _json_body(self, exchange: Exchange) -> tuple[bytes, dict[str, Any]]:
        """The body, read under its size and time limits, and parsed as a JSON object."""
        content_type = exchange.header(b"content-type") or ""
        if not content_type.lower().startswith("application/json"):
            raise Refused(error(415, "send the body as JSON with Content-Type: application/json"))
        limit = self.settings.max_body_bytes
        try:
            async with _within(self.settings.read_timeout_s):
                raw = await exchange.body(limit)
        except TooLarge:
            message = f"request body is larger than {limit} bytes"
            raise Refused(error(413, message, code="request_too_large")) from None
        except TimeoutError:
            message = f"request body not received within {self.settings.read_timeout_s:g} s"
            raise Refused(error(408, message, code="request_timeout")) from None
        try:
            data = _limits.loads(raw)
        except _limits.JSONTooDeep as exc:
            raise Refused(error(400, f"request body: {exc}", code="json_too_deep")) from None
        except ValueError as exc:
            message = f"request body is not valid JSON: {exc}"
            raise Refused(error(400, message, code="invalid_json")) from None
        if not isinstance(data, dict):
            raise Refused(error(400, "request body must be a JSON object", code="invalid_json"))
        return raw, data

    def _check(self, raw: bytes, data: dict[str, Any]) -> None:
        """Refuse what no backend may be sent: bad Unicode, oversized tools, client config."""
        if has_lone_surrogate(raw, data):
            message = "request body has a string with a lone UTF-16 surrogate (not valid Unicode)"
            raise Refused(error(400, message, code="invalid_unicode"))
        settings = self.settings
        try:
            check_body(
                data, max_tools=settings.max_tools, max_schema_bytes=settings.max_schema_bytes
            )
        except BadRequest as exc:
            raise Refused(error(400, str(exc), param=exc.param, code=exc.code)) from None
        forbidden = _FORBIDDEN.intersection(data)
        if forbidden:
            name = min(forbidden)
            message = f"{name!r} is not accepted: the proxy decides where requests go"
            raise Refused(error(400, message, param=name, code="forbidden_field"))

    def _parse(
        self, data: dict[str, Any], signals: dict[str, Any], hops: list[str]
    ) -> tuple[Turn, RequestOptions]:
        """The turn and the call options in a checked body (400 for what they refuse)."""
        try:
            for name in ("turn_id", "task_id"):
                if signals.get(name) is not None:
                    check_header_value(f"tiered_router.{name}", signals[name])
            turn, options = parse_request(data, signals=signals)
        except InvalidRequest as exc:
            raise Refused(error(400, str(exc), param=exc.param, code=exc.code)) from None
        except ValueError as exc:
            raise Refused(error(400, str(exc))) from None
        chain = forward_chain(hops, self.settings.hop_id)
        if chain is not None:  # came through other proxies: name them all upstream
            turn = turn.with_updates(params={**turn.params, "extra_headers": {HOP_HEADER: chain}})
        return turn, options
