"""The lean OpenAI-compatible backend: JSON over HTTP, no SDK objects on the async path.

:class:`RawHTTPBackend` is an :class:`~tiered_router.backends.openai_compat.OpenAICompatBackend`
(same configuration, same provider quirks, same error translation) whose async calls skip the
``openai`` SDK: the request body is built as a dict and sent with one
:class:`~tiered_router._lean_http.LeanAsyncTransport` write, the response is parsed with
``json.loads`` and Server-Sent Events are split by hand. That takes the upstream leg of a
call from about 2 ms of CPU to about 0.2 ms, which is what lets the proxy add well under a
millisecond per request. The sync twins (:meth:`complete`, :meth:`stream`) use the SDK, as
the parent class does.

The proxy (``tiered-router serve``) uses it for every ``type: openai`` backend unless the
policy says ``server: {transport: sdk}``; in Python, pass it to the router yourself:

Example:
    ```python
    from tiered_router.backends.raw_http import RawHTTPBackend

    fast = RawHTTPBackend.from_config("fast", policy.backends["fast"])
    router = Router(policy, backends={"fast": fast})
    ```

"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from tiered_router.backends import _openai_convert as _convert
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends.openai_compat import OpenAICompatBackend
from tiered_router.exceptions import (
    BackendError,
    BackendRateLimited,
    BackendResponseError,
    BackendStatusError,
)
from tiered_router.turn import Completion, CompletionChunk

if TYPE_CHECKING:
    from tiered_router import _http
    from tiered_router.policy import BackendConfig

__all__ = ["RawHTTPBackend"]

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class RawHTTPBackend(OpenAICompatBackend):
    """An OpenAI-compatible backend whose async path speaks raw JSON (see the module docstring).

    Args:
        name: The backend's name in the policy.
        transport: The httpx2 async transport to send with; a
            :class:`~tiered_router._lean_http.LeanAsyncTransport` of its own when ``None``.
            Share one between backends to share its connection pool; tests may pass
            ``httpx2.MockTransport``.
        **kwargs: Everything :class:`OpenAICompatBackend` takes.

    """

    def __init__(
        self,
        name: str,
        *,
        transport: _http.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        self._transport = transport
        self._owns_transport = transport is None
        self._url = (self.base_url or _DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        self._raw_headers: list[tuple[str, str]] | None = None
        self._head: tuple[tuple[str, str, int], bytes] | None = None

    @classmethod
    def from_config(
        cls,
        name: str,
        config: BackendConfig,
        *,
        env: Mapping[str, str] | None = None,
        transport: _http.AsyncBaseTransport | None = None,
    ) -> RawHTTPBackend:
        """Build the backend from a policy's backend config, like the ``openai`` type does.

        Raises:
            PolicyError: When the model or a required API key is missing.

        """
        from tiered_router.backends.presets import backend_kwargs

        return cls(name, transport=transport, **backend_kwargs(name, config, env=env))

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Make one call and return the whole completion.

        Raises:
            BackendError: The most specific subclass for what went wrong.

        """
        response = await self._send(request, stream=False)
        try:
            data = await response.aread()
        except _convert.caught_errors() as exc:
            raise self._translate(exc) from exc
        if response.status_code >= 400:
            raise self._status_error(response.status_code, response.headers, data)
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise self._translate(exc) from exc
        return _convert.completion(body, backend=self.name)

    async def astream(self, request: CompletionRequest) -> AsyncIterator[CompletionChunk]:
        """Make one streaming call; yield chunks as they arrive.

        Errors (an error status, a dropped connection, an unreadable or in-band error
        event) are raised from the iterator as :class:`~tiered_router.BackendError`.
        """
        response = await self._send(request, stream=True)
        seen, finished = 0, False
        try:
            if response.status_code >= 400:
                data = await response.aread()
                raise self._status_error(response.status_code, response.headers, data)
            done = False
            # read to the end of the body even after [DONE] (the terminating chunk is in
            # the same packet), so the keep-alive connection goes back to the pool
            async for data in _sse_data(response.stream):
                if done or data == b"[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                if isinstance(event, dict) and event.get("error"):
                    detail = _convert.server_message(event["error"])
                    raise BackendResponseError(
                        f"error event in the response: {detail}", backend=self.name
                    )
                chunk = _convert.chunk(event, backend=self.name)
                seen += 1
                finished = finished or chunk.finish_reason is not None
                yield chunk
        except BackendError:
            raise
        except _convert.caught_errors() as exc:
            raise self._translate(exc) from exc
        finally:
            await response.aclose()
        self._check_finished(seen, finished)

    async def aclose(self) -> None:
        """Close the transport this backend built (a shared one stays open), and the SDK's."""
        transport, self._transport = self._transport, None
        if transport is not None and self._owns_transport:
            await transport.aclose()
        await super().aclose()

    def _headers_for(self) -> list[tuple[str, str]]:
        if self._raw_headers is None:
            key = self._sdk_kwargs()["api_key"]
            headers = [("content-type", "application/json"), ("user-agent", "tiered-router")]
            if key:
                headers.append(("authorization", f"Bearer {key}"))
            headers.extend(self._headers.items())
            self._raw_headers = headers
        return self._raw_headers

    def _get_transport(self) -> _http.AsyncBaseTransport:
        if self._transport is None:
            from tiered_router._lean_http import LeanAsyncTransport

            self._transport = LeanAsyncTransport()
        return self._transport

    def _lean_head(self) -> tuple[tuple[str, str, int], bytes]:
        """Return the origin and the request head up to ``content-length`` (built once)."""
        if self._head is None:
            from urllib.parse import urlsplit

            url = urlsplit(self._url)
            scheme = url.scheme or "https"
            port = url.port or (443 if scheme == "https" else 80)
            host = url.hostname or ""
            default = 443 if scheme == "https" else 80
            host_header = host if port == default else f"{host}:{port}"
            if ":" in host and not host.startswith("["):
                host_header = f"[{host}]" if port == default else f"[{host}]:{port}"
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            lines = [f"POST {path} HTTP/1.1", f"host: {host_header}"]
            lines.extend(f"{k}: {v}" for k, v in self._headers_for())
            lines.append("accept-encoding: identity")
            self._head = ((scheme, host, port), ("\r\n".join(lines) + "\r\n").encode())
        return self._head

    async def _send(self, request: CompletionRequest, *, stream: bool) -> Any:
        """Send one call; return a lean response or an httpx2 ``Response``.

        Both have ``status_code``, ``headers``, ``stream``, ``aread()`` and ``aclose()``.
        """
        from tiered_router import _http
        from tiered_router._lean_http import LeanAsyncTransport

        body = self._build_kwargs(request, stream=stream)
        timeout = body.pop("timeout", None)
        extra_body = body.pop("extra_body", None)
        extra_headers = body.pop("extra_headers", None)
        if extra_body:
            body.update(extra_body)  # the SDK merges extra_body into the JSON body the same way
        content = _dumps(body).encode()
        connect = None if timeout is None else min(timeout, _http.DEFAULT_CONNECT_TIMEOUT_S)
        transport = self._get_transport()
        try:
            if isinstance(transport, LeanAsyncTransport):
                origin, head = self._lean_head()
                if extra_headers:
                    head += "".join(
                        f"{_clean(k)}: {_clean(v)}\r\n" for k, v in extra_headers.items()
                    ).encode()
                data = b"%scontent-length: %d\r\n\r\n%s" % (head, len(content), content)
                return await transport.send(
                    origin, data, connect_timeout=connect, read_timeout=timeout
                )
            headers = self._headers_for()
            if extra_headers:
                headers = [*headers, *((str(k), str(v)) for k, v in extra_headers.items())]
            http_request = _http.Request(
                "POST",
                self._url,
                headers=headers,
                content=content,
                extensions={"timeout": {"connect": connect, "read": timeout, "write": timeout}},
            )
            return await transport.handle_async_request(http_request)
        except _convert.caught_errors() as exc:
            raise self._translate(exc) from exc

    def _status_error(self, status: int, headers: Any, data: bytes) -> BackendError:
        from tiered_router import _http

        try:
            parsed: Any = json.loads(data)
        except ValueError:
            parsed = data.decode("utf-8", "replace")
        detail = _convert.server_message(parsed) or f"HTTP {status}"
        retry_after = _http.parse_retry_after(headers)
        error: BackendError
        if status == 429:
            error = BackendRateLimited(
                f"HTTP 429 rate limited: {detail}", backend=self.name, retry_after_s=retry_after
            )
        else:
            error = BackendStatusError(
                f"HTTP {status}: {detail}",
                backend=self.name,
                status_code=status,
                retry_after_s=retry_after,
            )
        key = self._sdk_kwargs()["api_key"]
        if key and len(key) >= 8 and key in str(error):  # a server that echoes the key
            error.args = tuple(
                a.replace(key, "***") if isinstance(a, str) else a for a in error.args
            )
        return error


def _clean(value: object) -> str:
    """Return a header name or value without line breaks (no header injection)."""
    return str(value).replace("\r", " ").replace("\n", " ")


async def _sse_data(stream: Any) -> AsyncIterator[bytes]:
    """Yield the ``data`` of each Server-Sent Event in a byte stream."""
    buffer = b""
    async for part in stream:
        buffer += part
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            event, buffer = buffer[:end], buffer[end + 2 :]
            data = _event_data(event)
            if data is not None:
                yield data
    if buffer.strip():
        data = _event_data(buffer)
        if data is not None:
            yield data


def _event_data(event: bytes) -> bytes | None:
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None  # a comment, or only event/id/retry fields
    return b"\n".join(line[6:] if line[5:6] == b" " else line[5:] for line in lines)
