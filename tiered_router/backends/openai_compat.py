"""A backend for any OpenAI-compatible chat-completions endpoint.

Mercury 2, OpenAI, vLLM, SGLang, Ollama and the small diffusion servers all speak
``POST /v1/chat/completions``; :class:`OpenAICompatBackend` sends them JSON over its own
connection pools from :mod:`tiered_router._http` (our own HTTP/1.1 client's for async
calls, aiohttp's for those through a proxy, httpx2's for sync ones; one pool per backend),
through
:mod:`tiered_router.backends._wire`, the one request path: the whole exchange is bounded by
the call's deadline, the answer's size and nesting are capped, and every HTTP or decoding
failure is translated there, at the seam, to the most specific
:class:`~tiered_router.BackendError`. The HTTP library is imported lazily, when a backend
first builds its client, so importing tiered_router stays cheap.

One call is one try: the router owns the only retry loop.

Provider differences that would otherwise fail a request are the server's dialect profile
(:class:`~tiered_router.backends._dialect.DialectProfile`), the one home of each rule:
Mercury 2 rejects the ``developer`` role, temperatures outside 0.5..1.0 and more than four
stop sequences; local diffusion servers take extra per-request fields and may lack tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretStr

from tiered_router._types import BackendKind
from tiered_router.backends import _dialect, _dialect_shape, _errors, _profiles, _wire
from tiered_router.backends import _openai_convert as _convert
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends._shaping import RequestShaping
from tiered_router.backends._stop_stream import ReplyStream
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendError,
    BackendResponseError,
)
from tiered_router.turn import Completion, CompletionChunk

if TYPE_CHECKING:
    from tiered_router import _http
    from tiered_router.policy._schema import BackendConfig

__all__ = ["OpenAICompatBackend"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_DEFAULT_BASE_URL = "https://api.openai.com/v1"

# request fields the backend sets itself; a request's params cannot override them


class OpenAICompatBackend(RequestShaping):
    """A backend for one model behind an OpenAI-compatible endpoint (complete and stream).

    Example:
        ```python
        backend = OpenAICompatBackend(
            "mercury", model="mercury-2", base_url="https://api.inceptionlabs.ai/v1",
            api_key=os.environ["INCEPTION_API_KEY"], kind="diffusion", dialect="mercury-2",
        )
        completion = await backend.acomplete(CompletionRequest(messages=[...], timeout_s=10))
        ```

    Args:
        name: The backend's name in the policy.
        model: The model name sent to the endpoint.
        base_url: The endpoint (``.../v1``); ``None`` for the SDK's default (OpenAI).
        api_key: The API key. ``None`` lets the SDK read ``OPENAI_API_KEY`` when
            ``base_url`` is ``None``; for other endpoints it sends a placeholder, so an
            OpenAI key never leaks to another host.
        kind: ``diffusion`` or ``autoregressive``.
        supports_tools: ``False`` makes a request with tools raise ``CapabilityError``.
        timeout_s: Per-call timeout used when a request carries none (``None``: no limit).
        params: Default chat.completions arguments; a request's params win over them.
        extra_body: Default provider-specific fields, merged under the request's.
        headers: Extra HTTP headers sent with every request.
        dialect: The server's :class:`~tiered_router.backends._dialect.DialectProfile`, its
            name (``openai``, ``mercury-2``, ``dlmserve``, ``sglang``, ``vllm``,
            ``local-diffusion``) or ``{profile: NAME, field: value}``; each request is
            converted to it (roles, fields, value ranges, ``stop``, ``tool_choice``) and
            the conversions are recorded on the completion.
        diffusion: Per-request diffusion fields (``num_denoising_steps``, ...) sent with
            every request; each must be one the dialect accepts.
        http_client: A sync httpx2 client to share (from :func:`tiered_router._http.build_client`);
            it is not closed by :meth:`close`.
        async_http_client: An async httpx2 client to share; not closed by :meth:`aclose`.
        config: The resolved policy config this backend was built from, when it was.

    Attributes:
        name: The backend's name.
        kind: ``diffusion`` or ``autoregressive``.
        model: The model it sends.
        supports_tools: Whether tool turns may go to it.
        dialect: The request shape its server accepts.
        config: The resolved :class:`~tiered_router.policy.BackendConfig`, or ``None``.

    """

    def __init__(
        self,
        name: str,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | SecretStr | None = None,
        kind: BackendKind = "autoregressive",
        supports_tools: bool = True,
        timeout_s: float | None = 60.0,
        params: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        dialect: _dialect.DialectProfile | str | Mapping[str, Any] = "openai",
        diffusion: Mapping[str, Any] | None = None,
        http_client: _http.Client | None = None,
        async_http_client: _http.AsyncClient | None = None,
        config: BackendConfig | None = None,
    ) -> None:
        if not model:
            raise ValueError(f"backend {name!r}: model must be a non-empty string")
        self.name = name
        self.model = model
        self.kind: BackendKind = kind
        self.supports_tools = supports_tools
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.dialect = _profiles.resolve_dialect(dialect)
        self.config = config
        self._diffusion = dict(diffusion or {})
        unknown = sorted(k for k in self._diffusion if not self.dialect.accepts_diffusion(k))
        if unknown:
            known = ", ".join(sorted(self.dialect.diffusion_params)) or "none"
            raise ValueError(
                f"backend {name!r}: diffusion fields {unknown} are not accepted by the "
                f"{self.dialect.name} dialect; known: {known}"
            )
        self._params = dict(params or {})
        self._extra_body = dict(extra_body or {})
        self._headers = dict(headers or {})
        secret = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self.__key: str | None = secret
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._owns_http = http_client is None
        self._owns_async_http = async_http_client is None
        self._url = (base_url or _DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        self._parsed_url: Any = None
        # stream? -> (the key they carry, a call's headers when it adds none of its own)
        self._fixed_headers: dict[bool, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self._async_pool: _wire.Sender | None = None
        self._loop: object = None
        self._closer: AsyncGenerator[None, None] | None = None

    @classmethod
    def from_config(
        cls, name: str, config: BackendConfig, *, env: Mapping[str, str] | None = None
    ) -> OpenAICompatBackend:
        """Build a backend from a policy's backend config (the ``openai`` type's factory).

        The preset (named, or inferred from the base URL's host) fills the fields the config
        leaves unset; the API key comes from the config or the preset's environment variable,
        read here rather than at import time.

        Raises:
            PolicyError: When the model or a required API key is missing, or an option is
                unknown; the message names the backend and the environment variable.

        """
        from tiered_router.backends.presets import backend_kwargs

        return cls(name, **backend_kwargs(name, config, env=env))

    def __repr__(self) -> str:
        host = urlsplit(self.base_url).hostname if self.base_url else "api.openai.com"
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, host={host!r}, "
            f"kind={self.kind!r}, dialect={self.dialect.name!r})"
        )

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Make one call and return the whole completion.

        The whole exchange, body read included, is bounded by ``request.timeout_s``.

        Raises:
            BackendError: The most specific subclass for what went wrong.

        """
        call, plan = self._call(request, stream=False)
        raw = await _wire.acall(await self._get_async_client(), call)
        return plan.finish(self._convert(_convert.completion, raw))

    def complete(self, request: CompletionRequest) -> Completion:
        """Sync twin of :meth:`acomplete`."""
        call, plan = self._call(request, stream=False)
        raw = _wire.call(self._get_client(), call)
        return plan.finish(self._convert(_convert.completion, raw))

    async def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
        """Make one streaming call; yield chunks as they arrive.

        A reply with prompted tools is read whole first (its calls are parsed from the
        whole text); client-side ``stop`` is applied as the chunks arrive.
        Errors (an error status, a dropped connection, an unreadable chunk or an in-band
        error event, the deadline passing mid-stream) are raised from the iterator as
        :class:`~tiered_router.BackendError` subclasses.
        """
        call, plan = self._call(request, stream=True)
        client = await self._get_async_client()
        reply = ReplyStream(plan, backend=self.name)
        async with contextlib.aclosing(_wire.aevents(client, call)) as events:
            async for raw in events:
                for chunk in reply.feed(self._convert(_convert.chunk, raw)):
                    yield chunk
        self._check_finished(reply.seen, reply.finished)
        for chunk in reply.end():
            yield chunk

    def stream(self, request: CompletionRequest) -> Iterator[CompletionChunk]:
        """Sync twin of :meth:`astream`."""
        call, plan = self._call(request, stream=True)
        client = self._get_client()
        reply = ReplyStream(plan, backend=self.name)
        with contextlib.closing(_wire.events(client, call)) as events:
            for raw in events:
                yield from reply.feed(self._convert(_convert.chunk, raw))
        self._check_finished(reply.seen, reply.finished)
        yield from reply.end()

    def close(self) -> None:
        """Close the sync HTTP client this backend built (a shared one stays open).

        The backend stays usable: the next call opens a new connection pool.
        """
        if self._owns_http and self._http_client is not None:
            client, self._http_client = self._http_client, None
            client.close()

    async def aclose(self) -> None:
        """Close the HTTP clients this backend built (shared ones stay open)."""
        closer, self._closer = self._closer, None
        if self._owns_async_http:
            self._async_pool = None
            # a pool opened under an event loop that has ended was closed when it ended
            if closer is not None and self._loop is _running_loop():
                await closer.aclose()
        self.close()

    def _check_finished(self, seen: int, finished: bool) -> None:
        if seen == 0:
            raise BackendResponseError(
                "the stream carried no chat.completion.chunk events", backend=self.name
            )
        if not finished and not self.dialect.unfinished_streams:
            raise BackendConnectionError(
                "stream ended before the model finished (no finish_reason): "
                "the connection was probably cut",
                backend=self.name,
            )

    def _convert(self, convert: Callable[..., _T], raw: Any) -> _T:
        """Run a converter; a body too odd for it is a response error, never a crash."""
        try:
            return convert(raw, backend=self.name)
        except BackendError:
            raise
        except (TypeError, AttributeError, ValueError, RecursionError) as exc:
            error = BackendResponseError(
                f"unusable response: {type(exc).__name__}: {exc}", backend=self.name
            )
            _errors.scrub(error, self.__key)
            raise error from exc

    def _api_key(self) -> str:
        key = self.__key
        if key is None:
            if self.base_url is not None:
                # never send OPENAI_API_KEY to another provider's host
                return "none"
            key = os.environ.get("OPENAI_API_KEY")
            if not key:
                raise BackendConnectionError(
                    "no API key: set api_key in the policy or OPENAI_API_KEY", backend=self.name
                )
        return key

    def _call(
        self, request: CompletionRequest, *, stream: bool
    ) -> tuple[_wire.Call, _dialect_shape.Plan]:
        """Build the HTTP call for ``request`` in the server's dialect, and the reply's plan."""
        kwargs, plan = self._prepare(request, stream=stream)
        timeout = kwargs.get("timeout")
        body, extra_headers = _wire.body_of(kwargs)
        key = self._api_key()
        fixed = self._fixed_headers.get(stream)
        if extra_headers or fixed is None or fixed[0] != key:
            headers = self._headers_for(key, stream=stream, extra_headers=extra_headers)
            if not extra_headers:  # the same for every such call: built once
                self._fixed_headers[stream] = (key, headers)
        else:
            headers = fixed[1]
        if self._parsed_url is None:
            from tiered_router import _http

            self._parsed_url = _http.URL(self._url)
        return _wire.Call(
            backend=self.name,
            url=self._parsed_url,
            headers=headers,
            body=body,
            timeout_s=timeout,
            secret=None if key == "none" else key,
        ), plan

    def _headers_for(
        self, key: str, *, stream: bool, extra_headers: Mapping[str, str]
    ) -> tuple[tuple[str, str], ...]:
        # a call's own extra_headers replace the backend's headers of the same name (as
        # the openai SDK's extra_headers replace its default_headers)
        own = {name.lower() for name in extra_headers}
        return (
            ("content-type", "application/json"),
            ("accept", "text/event-stream" if stream else "application/json"),
            ("user-agent", "tiered-router"),
            ("authorization", f"Bearer {key}"),
            *((k, v) for k, v in self._headers.items() if k.lower() not in own),
            *extra_headers.items(),
        )

    def _get_client(self) -> _http.Client:
        if self._http_client is None:
            from tiered_router import _http

            self._http_client = client = _http.build_client(timeout_s=self.timeout_s)
            # close pooled sockets when a never-closed backend is collected
            weakref.finalize(self, client.close)
        return self._http_client

    async def _get_async_client(self) -> _wire.Sender:
        """Return what async calls are sent on: the shared client, or this backend's own pool.

        Its own pool is our HTTP/1.1 client's (:func:`tiered_router._http.build_async_transport`),
        which hands calls through a proxy from the environment to aiohttp's.
        """
        if not self._owns_async_http:
            assert self._async_http_client is not None
            return self._async_http_client
        loop = _running_loop()
        if self._async_pool is not None and loop is not self._loop:
            # pooled connections belong to the loop that opened them: a backend reused across
            # asyncio.run() calls would fail with "Event loop is closed", so start a new pool
            logger.debug("backend %s: new event loop, new connection pool", self.name)
            self._async_pool = self._closer = None
        if self._async_pool is None:
            from tiered_router import _http

            self._loop = loop
            self._async_pool = pool = _http.build_async_transport()
            self._closer = _close_when_loop_ends(pool)
            await self._closer.asend(None)
        return self._async_pool


def _running_loop() -> object:
    """Return the running asyncio loop, or ``None`` under another event loop (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _close_when_loop_ends(client: _wire.Sender) -> AsyncGenerator[None, None]:
    """Close ``client`` when this generator is closed.

    The event loop closes live async generators when it shuts down (``asyncio.run`` does), and
    when they are garbage-collected, so a pool that nobody closed is still closed in its own
    loop instead of leaking sockets.
    """
    try:
        yield
    finally:
        await client.aclose()
