"""Test doubles shipped with tiered_router.

:class:`ScriptedServer` is a real OpenAI-compatible HTTP server on ``127.0.0.1`` whose answers
are scripted per request with :class:`Reply` values: valid and invalid JSON, tool calls,
truncation, refusals, error statuses with ``Retry-After``, slow answers, dropped connections
and broken Server-Sent Event streams. It uses the standard library only.

:class:`ScriptedBackend` and :class:`FunctionBackend` are in-process backends for router
tests that need no HTTP at all.

Example:
    ```python
    from openai import OpenAI
    from tiered_router.testing import Reply, ScriptedServer

    with ScriptedServer() as server:
        server.script([Reply.status(429, retry_after=1), Reply.json({"answer": 4})])
        client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...
    ```


Wing (docs/architecture.md): owns the test doubles; may import ``backends``, ``policy``,
``_http`` and the root's shared values, never the router (tests drive the router through
these). Production code never imports it; the command line's ``demo`` does.
"""

from __future__ import annotations

from tiered_router.testing._doubles import (
    FunctionBackend,
    ScriptedBackend,
    ScriptError,
    ScriptItem,
)
from tiered_router.testing._reply import (
    AgentReply,
    BrokenMode,
    Reply,
    ReplyFn,
    ReplyLike,
    ToolCallSpec,
)
from tiered_router.testing._server import RecordedRequest, ScriptedServer

__all__ = [
    "AgentReply",
    "BrokenMode",
    "FunctionBackend",
    "RecordedRequest",
    "Reply",
    "ReplyFn",
    "ReplyLike",
    "ScriptError",
    "ScriptItem",
    "ScriptedBackend",
    "ScriptedServer",
    "ToolCallSpec",
]
