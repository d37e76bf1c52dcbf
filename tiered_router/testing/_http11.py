"""Just enough HTTP/1.1 for the scripted server: read requests, write responses.

Keep-alive is the default (the openai SDK pools connections); every response carries a
``content-length`` or uses chunked transfer encoding, so a connection can be reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["BadRequest", "Request", "chunk", "last_chunk", "read_request", "response_head"]

_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


class BadRequest(Exception):
    """The bytes on the connection are not an HTTP/1.1 request we can serve."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One parsed request.

    Attributes:
        method: ``GET``, ``POST``, ...
        path: The path without the query string.
        headers: Header names lower-cased; repeated headers joined with ``", "``.
        body: The raw body.
        keep_alive: Whether the connection may be reused after the response.

    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest(400, "bad chunk size line") from None
        if size == 0:
            # trailers, if any, end with an empty line
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return b"".join(parts)
        total += size
        if total > _MAX_BODY:
            raise BadRequest(413, "request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request; ``None`` when the client closed the connection between requests.

    Raises:
        BadRequest: On a malformed request line, header block or body framing.
        asyncio.IncompleteReadError: When the connection closes mid-request.

    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "request header block too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, f"bad request line: {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, f"bad header line: {line[:100]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest(400, "bad content-length") from None
        if length < 0 or length > _MAX_BODY:
            raise BadRequest(413, "request body too large")
        body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return Request(
        method=method,
        path=target.split("?", 1)[0],
        headers=headers,
        body=body,
        keep_alive=keep_alive,
    )


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Scripted"


def response_head(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    keep_alive: bool,
    content_length: int | None,
) -> bytes:
    """Return a status line and header block.

    ``content_length=None`` announces chunked transfer encoding (used for SSE).
    """
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    seen: set[str] = set()
    for name, value in headers:
        key = name.lower()
        if key in ("content-length", "transfer-encoding", "connection"):
            continue
        seen.add(key)
        lines.append(f"{name}: {value}")
    if content_length is None:
        lines.append("transfer-encoding: chunked")
    else:
        lines.append(f"content-length: {content_length}")
    if "content-type" not in seen:
        lines.append("content-type: application/json")
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """Frame ``data`` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def last_chunk() -> bytes:
    """Return the terminating zero-length chunk."""
    return b"0\r\n\r\n"
