"""The package's one Server-Sent Events parser.

:class:`SSEDecoder` splits a byte stream, fed in pieces as they arrive, into the ``data`` of
its events: CRLF and CR line ends, multi-line data, comments and ``event``/``id``/``retry``
fields are handled, and an event larger than a limit is refused rather than buffered.
"""

from __future__ import annotations

__all__ = ["MAX_EVENT_BYTES", "SSEDecoder"]

MAX_EVENT_BYTES = 1024 * 1024
"""Largest single Server-Sent Event."""


class SSEDecoder:
    r"""Split a byte stream into the ``data`` of its Server-Sent Events.

    Example:
        ```python
        decoder = SSEDecoder()
        decoder.feed(b'data: {"a": 1}\n\ndata: [DO')  # [b'{"a": 1}']
        decoder.feed(b"NE]\n\n")  # [b"[DONE]"]
        ```

    Args:
        max_event_bytes: Largest event; a longer one raises ``ValueError``.

    """

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._max = max_event_bytes

    def feed(self, part: bytes) -> list[bytes]:
        """Add bytes; return the data of every event they complete."""
        buffer = self._buffer + part
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[bytes] = []
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            data = _event_data(buffer[:end])
            buffer = buffer[end + 2 :]
            if data is not None:
                out.append(data)
        if len(buffer) > self._max:
            raise ValueError(f"a Server-Sent Event is larger than {self._max} bytes")
        self._buffer = buffer
        return out

    def flush(self) -> list[bytes]:
        """Return the data of a last event the stream did not end with a blank line."""
        buffer, self._buffer = self._buffer, b""
        data = _event_data(buffer) if buffer.strip() else None
        return [] if data is None else [data]


def _event_data(event: bytes) -> bytes | None:
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None  # a comment, or only event/id/retry fields
    return b"\n".join(line[6:] if line[5:6] == b" " else line[5:] for line in lines)
