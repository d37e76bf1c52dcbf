"""What a backend streams of a reply it must finish: client-side ``stop``, prompted tools.

A server that cannot take ``stop`` (dlmserve, Diffulex, ollada, the fallback profile) gets
its stop sequences applied to the reply by the backend. On a stream, the text is passed on
as it comes, holding back only the last ``len(longest stop) - 1`` characters (a stop
sequence could begin there); when a stop sequence shows up, the text before it is sent with
``finish_reason: stop`` and nothing after it is.

Example:
    ```python
    cut = StopStream(("END",))
    [c.text for c in cut.feed(CompletionChunk(text="It is 18 C. EN"))]   # ["It is 18 C. "]
    cut.feed(CompletionChunk(text="D and more"))[0].finish_reason        # "stop"
    ```

"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tiered_router.turn import CompletionChunk

if TYPE_CHECKING:
    from tiered_router.backends._dialect_shape import Plan

__all__ = ["ReplyStream", "StopStream", "opens_as_prose"]


class StopStream:
    """Cut a stream at the first stop sequence, passing text on as it arrives.

    Args:
        stops: The stop sequences (empty ones are ignored).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._keep = max((len(s) for s in self.stops), default=1) - 1
        self._held = ""
        self.stopped = False

    def feed(self, chunk: CompletionChunk) -> list[CompletionChunk]:
        """Return what of ``chunk`` can be passed on now (possibly nothing)."""
        if self.stopped:
            # after the cut only usage is passed on (it comes in a last chunk)
            return [CompletionChunk(text="", usage=chunk.usage)] if chunk.usage else []
        text = self._held + chunk.text
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped, self._held = True, ""
            return [replace(chunk, text=text[:cut], tool_calls=(), finish_reason="stop")]
        if chunk.finish_reason is not None:
            self._held = ""
            return [replace(chunk, text=text)]
        split = max(0, len(text) - self._keep)
        self._held = text[split:]
        out = replace(chunk, text=text[:split])
        return [out] if out.text or out.tool_calls or out.usage or out.reasoning else []

    def flush(self) -> list[CompletionChunk]:
        """What is still held when the stream ended without a finish chunk."""
        held, self._held = self._held, ""
        return [CompletionChunk(text=held)] if held and not self.stopped else []


_PROSE = re.compile(r"\s*[^\W_][\w'’-]*[ \t]+[^\W_]")
"""A reply that opens with a word, a space and another word ("It is", "Let me"): no answer
made only of calls starts so (tags, JSON, fences and wrappers open with punctuation, and a
Python-style call with ``name(``), so such a reply is never lifted and may be streamed."""


def opens_as_prose(text: str) -> bool:
    """Whether ``text`` opens as prose, so it cannot be an answer made only of tool calls."""
    return _PROSE.match(text) is not None


class ReplyStream:
    """What a backend passes on of a stream, given the reply's plan.

    Prompted tool calls are lifted only when they are the whole answer
    (:mod:`tiered_router.calls._text`), so a reply with prompted tools is held until its
    opening shows what it is: one that opens as prose (:func:`opens_as_prose`) can hold no
    liftable call and streams from then on; any other is read whole and handed out as one
    finished chunk (its calls lifted). Client-side ``stop`` is applied as the chunks arrive
    (:class:`StopStream`); anything else passes straight through. The first chunk passed on
    carries the request's conversions.

    Args:
        plan: The reply's plan (from the dialect's ``shape``).
        backend: The backend's name, for the assembled completion.
    """

    def __init__(self, plan: Plan, *, backend: str) -> None:
        self.plan = plan
        self.backend = backend
        self.seen = 0
        self.finished = False
        self._held: list[CompletionChunk] = []
        self._cut = StopStream(plan.stop) if plan.stop else None
        self._holding = bool(plan.tools)
        self._sent = 0

    def feed(self, chunk: CompletionChunk) -> list[CompletionChunk]:
        """Take one chunk from the server; return the chunks to pass on now."""
        self.seen += 1
        self.finished = self.finished or chunk.finish_reason is not None
        if not self._holding:
            return self._pass([chunk])
        self._held.append(chunk)
        if chunk.tool_calls or not opens_as_prose("".join(c.text for c in self._held)):
            return []
        self._holding = False
        held, self._held = self._held, []
        return self._pass(held)

    def end(self) -> list[CompletionChunk]:
        """The chunks still to pass on when the server's stream has ended."""
        if self._holding:
            return self._mark([self.plan.finish_chunks(self._held, backend=self.backend)])
        return self._mark(self._cut.flush() if self._cut is not None else [])

    def _pass(self, chunks: list[CompletionChunk]) -> list[CompletionChunk]:
        if self._cut is None:
            return self._mark(chunks)
        return self._mark([out for chunk in chunks for out in self._cut.feed(chunk)])

    def _mark(self, out: list[CompletionChunk]) -> list[CompletionChunk]:
        if out and self._sent == 0:
            out[0] = self.plan.mark(out[0])
        self._sent += len(out)
        return out
