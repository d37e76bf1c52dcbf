"""The scripted server's open connections, and closing every one of them at stop.

A test server must not leave a socket behind: a transport that outlives its event loop is
collected later, in some other test, as a ``ResourceWarning`` (an error under the suite's
``filterwarnings``). Three kinds of connection can be open when the server stops: one
accepted just before the listening socket closed (its task created but not yet started, so
a cancel never runs its cleanup), one mid-reply (a slow or dropped reply), and one whose
close is still flushing to a client that stopped reading. :meth:`Connections.close_all`
cuts all three, and lets the loop run until each socket is closed. (A socket accepted just
before the stop but not yet a transport is a fourth: the server stops reading its listening
socket first, and close_all gives those a few loop turns to become connections.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Connections"]

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


async def _turns(n: int) -> None:
    """Give the loop ``n`` turns (the callbacks scheduled by the previous one run)."""
    for _ in range(n):
        await asyncio.sleep(0)


class Connections:
    """Each open connection's writer and task, from the moment it is accepted until closed."""

    def __init__(self, serve: Serve) -> None:
        """Serve each accepted connection with ``serve(reader, writer)``."""
        self._serve = serve
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Track a new connection and start serving it (``asyncio.start_server``'s callback).

        A plain function, not a coroutine: the connection is known before its task runs.
        """
        self._writers.add(writer)
        task = asyncio.get_running_loop().create_task(self._run(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            return  # only close_all() cancels: it aborts the connection
        finally:
            writer.close()  # flushes what was written (a dropped stream's chunks), then FIN
        try:
            await writer.wait_closed()
        except (ConnectionError, asyncio.CancelledError):
            return  # close_all() aborts what is still flushing
        self._writers.discard(writer)

    async def close_all(self) -> None:
        """Cancel every connection's task and abort every transport still open.

        Call it once the listening socket accepts no more (its reader removed), and before
        the server closes: a socket accepted but not yet made a transport needs the server
        open to get one.
        """
        await _turns(3)  # accepted sockets become transports, then reach accept()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in list(self._writers):
            writer.transport.abort()
        await _turns(2)  # connection_lost runs and closes each socket
        self._writers.clear()
