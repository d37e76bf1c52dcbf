"""A sans-I/O parser of HTTP/1.1 responses, for :mod:`tiered_router._http._direct`.

:class:`ResponseParser` is fed the bytes of one connection as they arrive and reads one
response at a time: the status line and headers (bounded: :data:`MAX_LINE` bytes a line,
:data:`MAX_HEAD` bytes and :data:`MAX_HEADERS` fields in all), then the body framed by
``content-length``, by chunked transfer coding (extensions and trailers skipped) or by the
server closing the connection. Body pieces are queued as they come, still content-encoded;
:class:`BodyDecoder` undoes ``gzip`` and ``deflate``, bounded per piece. Every malformed
response is a :class:`httpx2.RemoteProtocolError` that says what was wrong, and no bytes of
the response (which might carry secrets echoed back) are quoted in it.
"""

from __future__ import annotations

import re
import zlib
from collections import deque
from collections.abc import Iterator, Mapping

from httpx2 import RemoteProtocolError

__all__ = ["MAX_HEAD", "MAX_HEADERS", "MAX_LINE", "BodyDecoder", "Headers", "ResponseParser"]

MAX_LINE = 8190
"""Longest status line, header line or chunk-size line, in bytes (aiohttp's limit)."""

MAX_HEAD = 65536
"""Largest response head (status line, headers, or a chunked body's trailers), in bytes."""

MAX_HEADERS = 128
"""Most header fields in a response head."""

_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_HEAD, _LENGTH, _SIZE, _DATA, _DATA_END, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)


class Headers(Mapping[str, str]):
    """Response headers by lower-case name; looked up case-insensitively.

    A name sent twice keeps both values, joined with ``", "``.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        """Return the value of ``name`` (any case), or ``default``."""
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Headers({sorted(self._fields)})"  # names only: values may be secrets


def _error(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"bad HTTP response: {message}")


class ResponseParser:
    """Reads the responses on one connection from the bytes fed to it, one at a time.

    After the head is read, ``status_code``, ``headers`` and ``reusable`` are set; body
    pieces are appended to ``body`` (``pending`` counts their bytes) until ``complete``.
    :meth:`reset` readies it for the next response on the same connection.

    Attributes:
        status_code: The status (0 until the head is read).
        headers: The headers (``None`` until the head is read).
        body: Body pieces not taken yet, still content-encoded.
        pending: Bytes in ``body``.
        complete: The whole response was read.
        reusable: The connection may carry another request once this response is read.
        started: Bytes of a response arrived.

    """

    __slots__ = (
        "_buf",
        "_left",
        "_state",
        "body",
        "complete",
        "headers",
        "pending",
        "reusable",
        "started",
        "status_code",
    )

    def __init__(self) -> None:
        self.body: deque[bytes] = deque()
        self.reset()

    def reset(self) -> None:
        """Ready the parser for the next response on the connection."""
        self._buf = b""
        self._state = _HEAD
        self._left = 0
        self.status_code = 0
        self.headers: Headers | None = None
        self.body.clear()
        self.pending = 0
        self.complete = False
        self.reusable = False
        self.started = False

    def feed(self, data: bytes) -> None:
        """Read ``data``, the next bytes on the connection.

        Raises:
            httpx2.RemoteProtocolError: The response is malformed.

        """
        if not data:
            return
        self.started = True
        buf = self._buf + data if self._buf else data
        self._buf = b""
        while buf:
            state = self._state
            if state == _LENGTH or state == _DATA:
                if len(buf) <= self._left:
                    piece, buf = buf, b""
                else:
                    piece, buf = buf[: self._left], buf[self._left :]
                self.body.append(piece)
                self.pending += len(piece)
                self._left -= len(piece)
                if self._left == 0:
                    self._state = _DATA_END if state == _DATA else self._finish()
            elif state == _HEAD:
                rest = self._head(buf)
                if rest is None:
                    return
                buf = rest
            elif state == _SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_LINE:
                        raise _error(f"chunk-size line longer than {MAX_LINE} bytes")
                    break
                size = buf[:end].split(b";", 1)[0].strip(b" \t")
                if _HEX.fullmatch(size) is None:
                    raise _error("invalid chunk size")
                buf = buf[end + 2 :]
                self._left = int(size, 16)
                self._state = _DATA if self._left else _TRAILERS
            elif state == _DATA_END:
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise _error("chunk data not followed by CRLF")
                buf = buf[2:]
                self._state = _SIZE
            elif state == _TRAILERS:
                if buf.startswith(b"\r\n"):
                    buf = buf[2:]
                    self._state = self._finish()
                    continue
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise _error(f"trailers longer than {MAX_HEAD} bytes")
                    break
                buf = buf[end + 4 :]
                self._state = self._finish()
            elif state == _UNTIL_CLOSE:
                self.body.append(buf)
                self.pending += len(buf)
                buf = b""
            else:  # _DONE: bytes nobody asked for; the connection cannot be trusted
                self.reusable = False
                buf = b""
        self._buf = buf

    def feed_eof(self) -> None:
        """Note that the server closed the connection.

        Raises:
            httpx2.RemoteProtocolError: The response was not complete.

        """
        if self._state == _UNTIL_CLOSE:
            self._state = self._finish()
        elif self._state != _DONE:
            if not self.started:
                raise RemoteProtocolError("server disconnected without sending a response")
            where = "its head" if self._state == _HEAD else "the body"
            raise RemoteProtocolError(f"server disconnected in the middle of {where}")
        self.reusable = False

    def _finish(self) -> int:
        self.complete = True
        return _DONE

    def _head(self, buf: bytes) -> bytes | None:
        """Read a head from ``buf``; return what follows it, or ``None`` to wait for more."""
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_LINE and max(map(len, buf.split(b"\r\n"))) > MAX_LINE:
                raise _error(f"status line or a header line longer than {MAX_LINE} bytes")
            if len(buf) > MAX_HEAD:
                raise _error(f"head longer than {MAX_HEAD} bytes")
            self._buf = buf
            return None
        if end > MAX_HEAD:
            raise _error(f"head longer than {MAX_HEAD} bytes")
        lines = buf[:end].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if len(lines[0]) > MAX_LINE:
            raise _error(f"status line longer than {MAX_LINE} bytes")
        if (
            version not in ("HTTP/1.1", "HTTP/1.0")
            or not (code.isdigit() and code.isascii())
            or rest[3:4] not in ("", " ")
        ):
            raise _error("invalid status line")
        if len(lines) > MAX_HEADERS + 1:
            raise _error(f"more than {MAX_HEADERS} header fields")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if len(line) > MAX_LINE:
                raise _error(f"header line longer than {MAX_LINE} bytes")
            if not colon or not name or name != name.strip(" \t") or "\n" in line:
                raise _error("invalid header line")
            name = name.lower()
            value = value.strip(" \t")
            fields[name] = f"{fields[name]}, {value}" if name in fields else value
        status = int(code)
        if 100 <= status < 200:
            if status == 101:
                raise _error("unexpected 101 Switching Protocols")
            return buf[end + 4 :]  # an interim answer (100 Continue): the real one follows
        self.status_code = status
        self.headers = Headers(fields)
        connection = fields.get("connection", "").lower()
        self.reusable = (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        )
        self._state = self._framing(status, fields)
        return buf[end + 4 :]

    def _framing(self, status: int, fields: dict[str, str]) -> int:
        """Return the state that reads the body, as RFC 9112 section 6.3 frames it."""
        if status in (204, 304):
            return self._finish()
        coding = fields.get("transfer-encoding")
        length = fields.get("content-length")
        if coding is not None:
            if length is not None:
                raise _error("both transfer-encoding and content-length")
            if coding.rsplit(",", 1)[-1].strip(" \t").lower() == "chunked":
                return _SIZE
            self.reusable = False
            return _UNTIL_CLOSE
        if length is None:
            self.reusable = False
            return _UNTIL_CLOSE
        values = {value.strip(" \t") for value in length.split(",")}
        if len(values) != 1:
            raise _error("conflicting content-length values")
        value = values.pop()
        if not (value.isdigit() and value.isascii()) or len(value) > 18:
            raise _error("invalid content-length")
        self._left = int(value)
        return _LENGTH if self._left else self._finish()


_CHUNK_OUT = 1024 * 1024
"""Most bytes one compressed piece is decoded into at a time (a small bomb stays small)."""


class BodyDecoder:
    """Undoes a body's ``gzip``, ``x-gzip`` or ``deflate`` coding, piece by piece.

    Each call returns at most :data:`_CHUNK_OUT` bytes; what is left of the input is
    decoded by the next calls (``has_more``), so the reader's size limit stops a bomb early.

    Args:
        coding: The response's ``content-encoding`` (one coding).

    Raises:
        httpx2.RemoteProtocolError: The coding is not one of those.

    """

    __slots__ = ("_coding", "_decoder", "_tail")

    def __init__(self, coding: str) -> None:
        coding = coding.strip(" \t").lower()
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise RemoteProtocolError(
                f"bad HTTP response: content-encoding {coding[:40]!r} is not supported "
                "(the request asked for identity)"
            )
        self._coding = coding
        self._decoder: zlib._Decompress | None = None
        self._tail = b""

    @property
    def has_more(self) -> bool:
        """Whether input is left over from the last call."""
        return bool(self._tail)

    def decode(self, data: bytes = b"") -> bytes:
        """Return the next decoded bytes of ``data`` (after what was left over).

        Raises:
            httpx2.RemoteProtocolError: The data is not validly encoded.

        """
        data = self._tail + data if self._tail else data
        if self._decoder is None:
            if not data:
                return b""
            wbits = zlib.MAX_WBITS | 16
            if self._coding == "deflate":  # zlib-wrapped as RFC 9110 says, or raw as some send
                wrapped = (
                    len(data) > 1 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
                )
                wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
            self._decoder = zlib.decompressobj(wbits)
        try:
            out = self._decoder.decompress(data, _CHUNK_OUT)
        except zlib.error as exc:
            raise RemoteProtocolError(f"bad HTTP response: invalid {self._coding} body") from exc
        self._tail = self._decoder.unconsumed_tail
        return out

    def finish(self) -> bytes:
        """Return the last decoded bytes once the body has ended.

        Raises:
            httpx2.RemoteProtocolError: The encoded body stopped before its end.

        """
        if self._decoder is None:
            return b""
        out = self._decoder.flush()
        if not self._decoder.eof:
            raise RemoteProtocolError(f"bad HTTP response: the {self._coding} body is cut short")
        return out
