"""Errors of the request path: translation to ``BackendError``, key scrubbing.

Every way an upstream call can fail (an HTTP status, a timeout, a refused connection, an
unreadable body) becomes the most specific :class:`~tiered_router.BackendError`; the API
key is scrubbed from the error and from the foreign exception it is raised ``from``,
whatever the key's length.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from tiered_router import _limits
from tiered_router.backends._openai_convert import server_message
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendError,
    BackendRateLimited,
    BackendResponseError,
    BackendStatusError,
    BackendTimeout,
)

__all__ = ["caught", "clip", "scrub", "status_error", "translate"]

_MAX_MESSAGE = 500


def clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def scrub(exc: BaseException, secret: str | None) -> None:
    """Replace ``secret`` with ``***`` in ``exc`` and its causes, whatever its length."""
    if not secret:
        return
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(isinstance(a, str) and secret in a for a in current.args):
            current.args = tuple(
                a.replace(secret, "***") if isinstance(a, str) else a for a in current.args
            )
        message = getattr(current, "message", None)
        if isinstance(message, str) and secret in message:
            with contextlib.suppress(AttributeError):
                current.message = message.replace(secret, "***")  # type: ignore[attr-defined]
        current = current.__cause__ or current.__context__


def status_error(
    status: int, headers: Mapping[str, str] | None, data: bytes, *, backend: str
) -> BackendError:
    """Return the error for an HTTP error status, with the server's message made readable."""
    from tiered_router import _http

    try:
        parsed: Any = _limits.loads(data)
    except ValueError:
        parsed = data.decode("utf-8", "replace")
    detail = server_message(parsed) or f"HTTP {status}"
    retry_after = _http.parse_retry_after(headers)
    if status == 429:
        return BackendRateLimited(
            f"HTTP 429 rate limited: {detail}", backend=backend, retry_after_s=retry_after
        )
    return BackendStatusError(
        f"HTTP {status}: {detail}",
        backend=backend,
        status_code=status,
        retry_after_s=retry_after,
    )


def translate(exc: BaseException, *, backend: str) -> BackendError:
    """Translate an HTTP or decoding exception to the most specific backend error.

    The caller scrubs the key and raises the result ``from exc``.
    """
    from tiered_router import _http

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, _http.TimeoutException)):
        return BackendTimeout(f"request timed out: {type(exc).__name__}", backend=backend)
    if isinstance(exc, _http.HTTPError):
        return BackendConnectionError(
            f"connection failed: {type(exc).__name__}: {clip(str(exc))}", backend=backend
        )
    if isinstance(exc, _limits.JSONTooDeep):
        return BackendResponseError(f"unreadable response body: {exc}", backend=backend)
    if isinstance(exc, (ValueError, RecursionError)):
        return BackendResponseError(
            f"unreadable response body: {type(exc).__name__}: {clip(str(exc))}", backend=backend
        )
    return BackendError(f"{type(exc).__name__}: {clip(str(exc))}", backend=backend)


def caught() -> tuple[type[BaseException], ...]:
    from tiered_router import _http

    return (_http.HTTPError, ValueError, RecursionError, TimeoutError, asyncio.TimeoutError)
