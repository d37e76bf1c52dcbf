"""A replica's copy of the task totals it read, dropped as soon as another process writes them.

Off by default (``state.task_cache_s: 0``). When on, a task's repeat turns on this process
skip the Redis read that opens each turn: the totals read last, with this process's own
turns applied (:func:`~tiered_router.state.apply_task_delta`), are used instead, for as
long as nobody else wrote the task.

How this process learns that somebody else did: the read that makes a copy
(:data:`~tiered_router.state._lua.TASK_HOLD`) also notes this process in the task's hash as
a holder (a ``holder:<id>`` field), and every task record
(:data:`~tiered_router.state._lua.TASK_RECORD`, whichever process sends it and whether or
not that process caches) publishes the task's key on the channel
``<prefix>:task-notes:<id>`` of every *other* holder, and forgets them. One listener per
process (:class:`TaskCache`, a dedicated pub/sub connection on its own channel) drops the
copy of every task it hears of. A task whose turns stay on one process costs no note at
all; a note goes to a process only when another one wrote a task it holds. A copy is used
only

- while the listener is subscribed (a dropped connection drops every copy, since
  notes may have been lost meanwhile);
- if no note about the task arrived, and this process sent no record of it, while the
  read that made it was in flight (the read may not have seen that write);
- for at most ``task_cache_s`` after Redis last confirmed it (a bound for a connection
  that died without the listener noticing).

What this gives up, against a read per turn: another replica's turn of the same task is
seen here once its note has arrived, which is normally well under a millisecond after
Redis ran the record, but is not ordered with the next request the way a read is. Totals
in Redis stay exact either way; see ``docs/deploy.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from tiered_router.state._redis_link import ERRORS, RedisLink
from tiered_router.state._safe import Throttle

__all__ = ["TaskCache", "notes_channel"]

_KEPT = 4096
"""Copies marked current at most, and tasks whose last note is remembered."""
_WARN_EVERY_S = 30.0
"""Least seconds between two warnings about the listener."""

logger = logging.getLogger("tiered_router.state")


def notes_channel(prefix: str, holder: str = "") -> str:
    """The pub/sub channel of ``holder``'s notes (without it: every channel's start)."""
    return f"{prefix}:task-notes:{holder}"


class TaskCache:
    """Which task totals this process may reuse without reading Redis (see the module).

    The totals themselves are the store's; this class only says whether they are current.

    Args:
        link: The store's connections to Redis.
        channel: This process's channel (:func:`notes_channel`).
        task_keys: How the keys of tasks start (a note carries the key).
        max_age_s: Longest a copy is used after Redis last confirmed it.
    """

    def __init__(self, link: RedisLink, *, channel: str, task_keys: str, max_age_s: float) -> None:
        self._link = link
        self.channel = channel
        self._key_start = len(task_keys)
        self.max_age_s = max_age_s
        self._current: OrderedDict[str, float] = OrderedDict()  # task -> confirmed at
        self._notes = 0  # writes heard of so far: notes, and this process's own records
        self._noted: OrderedDict[str, int] = OrderedDict()  # task -> number of its last write
        self._epoch = 0  # subscriptions so far; a copy is only good within one
        self.listening = False
        self._listener: asyncio.Task[None] | None = None
        self._warnings = Throttle(_WARN_EVERY_S)
        self.stops = 0
        """Times the listener lost (or could not make) its subscription."""
        self.heard = 0
        """Notes received: records of tasks this process held, by other processes."""

    def __repr__(self) -> str:
        return f"TaskCache({self.channel!r}, current={len(self._current)})"

    # -- the store's questions ------------------------------------------------------------------

    def current(self, task_id: str) -> bool:
        """Whether this process's copy of ``task_id``'s totals may be used now."""
        confirmed = self._current.get(task_id)
        if confirmed is None or not self.listening:
            return False
        if time.monotonic() - confirmed >= self.max_age_s:
            del self._current[task_id]
            return False
        return True

    def mark(self) -> tuple[int, int]:
        """Note where the listener is before a read (pass it to :meth:`confirmed` after)."""
        self.listen()
        return self._epoch, self._notes

    def confirmed(self, task_id: str, mark: tuple[int, int]) -> None:
        """Make the copy Redis just returned current, unless the task was written meanwhile.

        A note that arrived while the read was in flight may be about a write the read did
        not see, so then the copy is not made current (the next turn reads again).
        """
        epoch, notes = mark
        if not self.listening or epoch != self._epoch:
            return
        since = self._notes - notes
        if since and (since > _KEPT or self._noted.get(task_id, 0) > notes):
            return  # written meanwhile, or too many notes to tell
        self._current[task_id] = time.monotonic()
        self._current.move_to_end(task_id)
        while len(self._current) > _KEPT:
            self._current.popitem(last=False)

    def wrote(self, task_id: str) -> None:
        """This process sent a record of ``task_id``: a read of it in flight may miss it.

        The copy stays current (the record is applied to it), but a read that was in
        flight does not make one (as if another process had written the task).
        """
        self._count(task_id)

    def drop(self, task_id: str) -> None:
        """Stop using the copy of ``task_id`` (its record was lost, say)."""
        self._current.pop(task_id, None)

    # -- the listener ---------------------------------------------------------------------------

    def note(self, key: bytes) -> None:
        """Take one note off the channel: another process wrote the task ``key``."""
        task_id = key[self._key_start :].decode("utf-8", "replace")
        self.heard += 1
        self._count(task_id)
        self._current.pop(task_id, None)

    def _count(self, task_id: str) -> None:
        self._notes += 1
        self._noted[task_id] = self._notes
        self._noted.move_to_end(task_id)
        if len(self._noted) > _KEPT:
            self._noted.popitem(last=False)

    def listen(self) -> None:
        """Start the listener on the running loop, unless it runs there already."""
        listener = self._listener
        loop = asyncio.get_running_loop()
        if listener is not None and not listener.done() and listener.get_loop() is loop:
            return
        self._stopped()
        self._listener = loop.create_task(self._listen(), name="tiered-router-task-notes")

    def _stopped(self) -> None:
        self.listening = False
        self._current.clear()

    async def _listen(self) -> None:
        while True:
            pubsub: Any = None
            try:
                pubsub = self._link.pubsub()
                await pubsub.subscribe(self.channel)
                reply = await pubsub.get_message(timeout=self._link.timeout_s)
                if reply is None or reply.get("type") != "subscribe":
                    raise TimeoutError("no subscription confirmed")
                self._epoch += 1
                self.listening = True
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message.get("type") == "message":
                        self.note(message["data"])
            except ERRORS as exc:
                self.stops += 1
                if self._warnings.due():  # a Redis that refuses pub/sub fails every retry
                    logger.warning(
                        "Redis state store at %s: task notes stopped (%s); every task "
                        "turn reads Redis until they resume",
                        self._link.where,
                        type(exc).__name__,
                    )
            finally:
                self._stopped()
                if pubsub is not None:
                    await _quietly(pubsub.aclose())
            await asyncio.sleep(max(self._link.retry_s, 0.05))

    async def aclose(self) -> None:
        """Stop the listener and close its connection."""
        listener, self._listener = self._listener, None
        self._stopped()
        if listener is None or listener.done():
            return
        listener.cancel()
        if listener.get_loop() is asyncio.get_running_loop():
            await asyncio.gather(listener, return_exceptions=True)


async def _quietly(closing: Any) -> None:
    try:
        await closing
    except ERRORS:  # the connection is gone already
        pass
