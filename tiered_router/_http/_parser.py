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
_LINE = {"head": "status line or a header line", "trailers": "a trailer line"}
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
        "_head_buf",
        "_left",
        "_line",
        "_lines",
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
        self._head_buf = bytearray()
        self._line = 0  # bytes of the head's current, unfinished line
        self._lines = 0  # finished lines of the head
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
                if self._left:
                    self._state = _DATA
                else:
                    self._state, self._lines = _TRAILERS, 1  # no status line before them
            elif state == _DATA_END:
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise _error("chunk data not followed by CRLF")
                buf = buf[2:]
                self._state = _SIZE
            elif state == _TRAILERS:  # read as a head is (an empty first line ends them)
                whole = self._gather(buf, "trailers")
                if whole is None:
                    buf = b""
                    break
                buf = whole[1]
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

    def _gather(self, data: bytes, what: str = "head") -> tuple[bytes, bytes] | None:
        """Add ``data`` to the head (or trailers) being read; once whole, ``(it, what follows)``.

        Each byte is looked at once however the head is split over reads (a server that
        sends it a byte at a time costs no more than one that sends it whole), and the
        limits on a line, the head and the fields are checked as the bytes come.

        Raises:
            httpx2.RemoteProtocolError: A limit is passed, or a line ends in a bare LF.
        """
        head = self._head_buf
        start = len(head)
        head += data
        if len(head) > MAX_HEAD + 4 and head.find(b"\r\n\r\n", max(0, start - 3)) < 0:
            raise _error(f"{what} longer than {MAX_HEAD} bytes")
        line, lines = self._line, self._lines
        at = start
        while True:
            nl = head.find(b"\n", at)
            if nl < 0:
                line += len(head) - at
                break
            if nl == 0 or head[nl - 1] != 13:  # 13: CR
                raise _error("a line of the head ends in a bare LF")
            line += nl - at  # the CR is counted: lines are checked at MAX_LINE + 1
            if line > MAX_LINE + 1:
                raise _error(f"{_LINE[what]} longer than {MAX_LINE} bytes")
            if line == 1 and lines:  # an empty line: the head ends here
                self._head_buf, self._line, self._lines = bytearray(), 0, 0
                if nl - 3 > MAX_HEAD:
                    raise _error(f"{what} longer than {MAX_HEAD} bytes")
                return bytes(head[: nl + 1]), bytes(head[nl + 1 :])
            lines += 1
            if lines > MAX_HEADERS + 1:
                raise _error(f"more than {MAX_HEADERS} {what.rstrip('s')} fields")
            line, at = 0, nl + 1
        if line > MAX_LINE + 1:
            raise _error(f"{_LINE[what]} longer than {MAX_LINE} bytes")
        self._line, self._lines = line, lines
        return None

    def _head(self, buf: bytes) -> bytes | None:
        """Read a head from ``buf``; return what follows it, or ``None`` to wait for more."""
        whole = self._gather(buf)
        if whole is None:
            return None
        head, after = whole
        lines = head[:-4].decode("latin-1").split("\r\n")
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
        if not 100 <= status <= 599:
            raise _error("status code outside 100-599")
        if 100 <= status < 200:
            if status == 101:
                raise _error("unexpected 101 Switching Protocols")
            return after  # an interim answer (100 Continue): the real one follows
        self.status_code = status
        self.headers = Headers(fields)
        connection = fields.get("connection", "").lower()
        self.reusable = (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        )
        self._state = self._framing(status, fields)
        return after

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

    __slots__ = ("_coding", "_decoder", "_tail", "_wait")

    def __init__(self, coding: str) -> None:
        coding = coding.strip(" \t").lower()
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise RemoteProtocolError(  # the value is not quoted: a server may echo anything
                "bad HTTP response: a content-encoding other than gzip, deflate or identity "
                "(the request asked for identity)"
            )
        self._coding = coding
        self._decoder: zlib._Decompress | None = None
        self._tail = b""  # input left over from the last call (``has_more``)
        self._wait = b""  # input that needs more before it can be decoded

    @property
    def has_more(self) -> bool:
        """Whether input is left over from the last call."""
        return bool(self._tail)

    def decode(self, data: bytes = b"") -> bytes:
        """Return the next decoded bytes of ``data`` (after what was left over).

        Raises:
            httpx2.RemoteProtocolError: The data is not validly encoded.

        """
        if self._tail or self._wait:
            data = self._wait + self._tail + data
            self._tail = self._wait = b""
        decoder = self._decoder
        if decoder is None or decoder.eof:
            if decoder is not None and (self._coding == "deflate" or data[:2] != b"\x1f\x8b"):
                # after a gzip member only another may follow (RFC 1952); the rest is ignored
                if data == b"\x1f":
                    self._wait = data  # perhaps the start of the next member
                return b""
            if not data or (decoder is None and self._coding == "deflate" and len(data) < 2):
                self._wait = data  # the first two bytes say whether it is zlib-wrapped
                return b""
            decoder = self._decoder = zlib.decompressobj(self._wbits(data))
        try:
            out = decoder.decompress(data, _CHUNK_OUT)
        except zlib.error as exc:
            raise RemoteProtocolError(f"bad HTTP response: invalid {self._coding} body") from exc
        self._tail = decoder.unconsumed_tail or (decoder.unused_data if decoder.eof else b"")
        return out

    def _wbits(self, data: bytes) -> int:
        if self._coding != "deflate":
            return zlib.MAX_WBITS | 16
        # zlib-wrapped as RFC 9110 says, or raw as some servers send it
        wrapped = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        return zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS

    def finish(self) -> bytes:
        """Return the last decoded bytes once the body has ended.

        Raises:
            httpx2.RemoteProtocolError: The encoded body stopped before its end.

        """
        if self._decoder is None:
            if self._wait:
                raise RemoteProtocolError(
                    f"bad HTTP response: the {self._coding} body is cut short"
                )
            return b""
        out = self._decoder.flush()
        if not self._decoder.eof:
            raise RemoteProtocolError(f"bad HTTP response: the {self._coding} body is cut short")
        return out
