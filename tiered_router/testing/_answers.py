"""How the scripted server writes an answer: a whole body, a dripped body, or SSE events.

Plus the embeddings endpoint's deterministic answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from tiered_router.testing import _http11 as http
from tiered_router.testing._reply import Reply

__all__ = ["EMBEDDING_DIM", "drip", "embeddings", "send", "send_events"]

EMBEDDING_DIM = 8
"""Length of the scripted embedding vectors."""


async def send(
    writer: asyncio.StreamWriter,
    status: int,
    headers: Iterable[tuple[str, str]],
    data: bytes,
    keep_alive: bool,
) -> bool:
    head = http.response_head(status, headers, keep_alive=keep_alive, content_length=len(data))
    writer.write(head + data)
    await writer.drain()
    return keep_alive


async def drip(
    writer: asyncio.StreamWriter,
    headers: Iterable[tuple[str, str]],
    data: bytes,
    keep_alive: bool,
    reply: Reply,
) -> bool:
    """Send a JSON body in ``reply.chunks`` pieces, ``reply.chunk_delay_s`` apart."""
    head = http.response_head(200, headers, keep_alive=keep_alive, content_length=len(data))
    writer.write(head)
    pieces = max(1, reply.chunks)
    size = -(-len(data) // pieces)
    for index in range(pieces):
        if index:
            await asyncio.sleep(reply.chunk_delay_s)
        writer.write(data[index * size : (index + 1) * size])
        await writer.drain()
    return keep_alive


async def send_events(
    writer: asyncio.StreamWriter,
    headers: Iterable[tuple[str, str]],
    events: list[bytes],
    keep_alive: bool,
    *,
    finish: bool,
    delay_s: float = 0.0,
) -> None:
    sse_headers = (
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
        *headers,
    )
    head = http.response_head(200, sse_headers, keep_alive=keep_alive, content_length=None)
    if delay_s <= 0:
        tail = http.last_chunk() if finish else b""
        writer.write(head + b"".join(http.chunk(e) for e in events) + tail)
        await writer.drain()
        return
    writer.write(head)
    for index, event in enumerate(events):
        if index:
            await asyncio.sleep(delay_s)
        writer.write(http.chunk(event))
        await writer.drain()
    if finish:
        writer.write(http.last_chunk())
        await writer.drain()


def embeddings(body: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's embeddings answer: one deterministic unit-ish vector per input text."""
    import hashlib

    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
    data = []
    for index, text in enumerate(texts):
        digest = hashlib.sha256(str(text).encode()).digest()
        vector = [round(b / 255 - 0.5, 6) for b in digest[:EMBEDDING_DIM]]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = sum(max(1, len(str(t)) // 4) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": body.get("model") or "scripted",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
