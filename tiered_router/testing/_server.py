"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests and benchmarks.

The server runs an asyncio event loop in a background thread, so it serves sync and async
clients alike, many requests at once (a slow reply only delays its own request), over real
sockets with HTTP/1.1 keep-alive and real Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tiered_router.testing import _http11 as http
from tiered_router.testing._answers import drip, embeddings, send, send_events
from tiered_router.testing._connections import Connections
from tiered_router.testing._recorded import RecordedRequest
from tiered_router.testing._render import (
    Rendered,
    broken_events,
    completion_body,
    error_body,
    stream_events,
)
from tiered_router.testing._reply import Reply, ReplyLike

if TYPE_CHECKING:
    from tiered_router._types import PolicySource
    from tiered_router.policy._schema import Policy

__all__ = ["RecordedRequest", "ScriptedServer"]

_HOST = "127.0.0.1"
_COMPLETIONS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS = frozenset({"/v1/models", "/models"})
_EMBEDDINGS = frozenset({"/v1/embeddings", "/embeddings"})
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0
_DEFAULT = Reply.text("ok")


class _Fail(Exception):
    def __init__(self, status: int, message: str, error_type: str, code: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.error_type, self.code = status, message, error_type, code


class ScriptedServer:
    """An OpenAI-compatible server on ``127.0.0.1`` that answers from scripted queues.

    ``POST /v1/chat/completions`` takes the next entry of the queue for the request body's
    ``model``; when that queue is empty, the next entry of the any-model queue
    (``model=None``); when that is empty too, :attr:`default`. ``GET /v1/models`` lists the
    scripted model names plus ``"scripted"``. ``POST /v1/embeddings`` answers every input
    with a small deterministic vector (from a hash of the text), for code that embeds as well
    as chats. Unknown paths get a 404 and bodies that are not JSON objects a 400, both in
    OpenAI's error shape. A JSON (not streamed) request with ``n > 1`` takes one further
    entry per extra choice, in order (a draft panel sampled in one request).

    Example:
        ```python
        with ScriptedServer() as server:
            server.script([Reply.text("hi"), Reply.status(429, retry_after=1.5)],
                          model="fast-model")
            client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
            ...
            assert server.requests_for("fast-model")[0].body["messages"] == [...]
        ```

    ``async with ScriptedServer() as server:`` works the same way, as do explicit
    :meth:`start` and :meth:`stop`.

    Attributes:
        default: What to serve when no queue has an entry for a request; ``None`` answers
            500 with a message naming the model (and records the problem in :attr:`errors`).

    """

    def __init__(
        self,
        *,
        port: int = 0,
        default: ReplyLike | None = _DEFAULT,
        models: Iterable[str] = (),
    ) -> None:
        """Prepare a server; nothing listens until :meth:`start`.

        Args:
            port: The port to bind on 127.0.0.1; ``0`` picks a free one.
            default: The initial :attr:`default` reply (``Reply.text("ok")``).
            models: Extra model ids for ``GET /v1/models``.

        """
        self.default = default
        self._requested_port = port
        self._port: int | None = None
        self._extra_models = tuple(models)
        self._lock = threading.Lock()
        self._queues: dict[str | None, deque[ReplyLike]] = {}
        self._models: dict[str, None] = dict.fromkeys(self._extra_models)
        self._requests: list[RecordedRequest] = []
        self._errors: list[Exception] = []
        self._seq = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._connections = Connections(self._serve)

    @property
    def port(self) -> int:
        """The bound port (``RuntimeError`` when the server is not running)."""
        if self._port is None:
            raise RuntimeError("ScriptedServer is not running: call start() or use `with`")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{_HOST}:{self.port}/v1"

    @property
    def running(self) -> bool:
        """Whether the server is listening."""
        return self._port is not None

    def stand_in(self, policy: Policy | PolicySource) -> Policy:
        """Return ``policy`` with its OpenAI-compatible backends pointed at this server.

        Models, presets (prices, dialects), rules and the gate are kept; keys become a test
        key, so a policy that names ``${OPENAI_API_KEY}`` runs with no key set.

        Example:
            ```python
            with ScriptedServer() as upstream:
                upstream.script([Reply.bad_json()], model="mercury-2")
                router = Router(upstream.stand_in("policy.yaml"))
            ```

        """
        from tiered_router.testing._offline import stand_in

        return stand_in(policy, self.base_url)

    def script(self, replies: ReplyLike | Iterable[ReplyLike], *, model: str | None = None) -> None:
        """Append replies to the queue of ``model`` (``None``: the any-model queue).

        Args:
            replies: Replies or callables ``(request_body) -> Reply``, served in order, one
                per request; a single reply or callable is accepted too.
            model: The request ``model`` the replies are for.

        """
        entries: list[ReplyLike] = (
            [replies] if isinstance(replies, Reply) or callable(replies) else list(replies)
        )
        with self._lock:
            self._queues.setdefault(model, deque()).extend(entries)
            if model is not None:
                self._models.setdefault(model, None)

    def pending(self) -> dict[str | None, int]:
        """Return how many scripted replies are still queued, per model (non-empty only)."""
        with self._lock:
            return {model: len(queue) for model, queue in self._queues.items() if queue}

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """Return the requests whose body named ``model``."""
        with self._lock:
            return [r for r in self._requests if r.model == model]

    @property
    def errors(self) -> list[Exception]:
        """Problems met while serving (a copy).

        Callables that raised or returned a non-Reply, and requests with nothing to serve
        (when :attr:`default` is ``None``).
        """
        with self._lock:
            return list(self._errors)

    def reset(self) -> None:
        """Forget queues, recorded requests and errors; restore the default reply."""
        with self._lock:
            self._queues.clear()
            self._requests.clear()
            self._errors.clear()
            self._models = dict.fromkeys(self._extra_models)
        self.default = _DEFAULT

    def start(self) -> ScriptedServer:
        """Start listening on 127.0.0.1 in a background thread; return ``self``.

        Raises:
            RuntimeError: When already running.
            OSError: When the port cannot be bound.

        """
        if self._thread is not None:
            raise RuntimeError("ScriptedServer is already running")
        self._ready.clear()
        self._startup_error = None
        thread = threading.Thread(target=self._run, name="tiered-router-scripted-server")
        thread.daemon = True  # a forgotten stop() must not hang interpreter exit
        self._thread = thread
        thread.start()
        if not self._ready.wait(_START_TIMEOUT_S):
            raise RuntimeError("ScriptedServer did not start in time")
        if self._startup_error is not None:
            thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def stop(self) -> None:
        """Close every connection, stop the loop and join the thread (idempotent).

        Raises:
            RuntimeError: When the server thread does not finish in time.

        """
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and thread.is_alive():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop has closed already
                pass
        thread.join(_STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError("ScriptedServer thread did not stop in time")
        self._thread = None
        self._loop = None
        self._stopping = None
        self._port = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.base_url if self.running else "stopped"
        return f"ScriptedServer({where})"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            if not self._ready.is_set():
                self._startup_error = exc
                self._ready.set()
            else:
                raise

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._connections.accept, _HOST, self._requested_port)
        self._port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            # stop accepting before closing: a connection the socket accepted but asyncio has
            # not yet made a transport would find the server closed and be left half-built,
            # its socket never closed (3.11); close_all lets those reach accept first
            for sock in server.sockets:
                self._loop.remove_reader(sock.fileno())
            await self._connections.close_all()
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request = await http.read_request(reader)
                except http.BadRequest as exc:
                    body = error_body(exc.message, "invalid_request_error", None)
                    head = http.response_head(
                        exc.status, (), keep_alive=False, content_length=len(body)
                    )
                    writer.write(head + body)
                    await writer.drain()
                    break
                if request is None or not await self._handle(request, writer):
                    break
                if not request.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing left to answer

    async def _handle(self, request: http.Request, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; return whether the connection may be reused."""
        body: dict[str, Any] = {}
        problem: str | None = None
        if request.body:
            try:
                parsed = json.loads(request.body)
            except ValueError as exc:
                problem = f"request body is not valid JSON: {exc}"
            else:
                if isinstance(parsed, dict):
                    body = parsed
                else:
                    problem = "request body must be a JSON object"
        with self._lock:
            self._requests.append(
                RecordedRequest(
                    path=request.path,
                    method=request.method,
                    headers=request.headers,
                    body=body,
                    raw_body=request.body,
                )
            )
        try:
            if problem is not None:
                raise _Fail(400, problem, "invalid_request_error", None)
            if request.path in _COMPLETIONS:
                self._require_method(request, "POST")
                if not request.body:
                    raise _Fail(400, "request body is empty", "invalid_request_error", None)
                return await self._complete(body, request, writer)
            if request.path in _MODELS:
                self._require_method(request, "GET")
                return await self._send_json(writer, 200, self._model_list(), request.keep_alive)
            if request.path in _EMBEDDINGS:
                self._require_method(request, "POST")
                return await self._send_json(writer, 200, embeddings(body), request.keep_alive)
            raise _Fail(404, f"unknown path {request.path}", "invalid_request_error", None)
        except _Fail as fail:
            data = error_body(fail.message, fail.error_type, fail.code)
            return await send(writer, fail.status, (), data, request.keep_alive)
        except ConnectionError:
            raise
        except Exception as exc:  # a bug here must reach the test as a 500, not a hang
            self._record_error(exc)
            data = error_body(f"scripted server failed: {exc!r}", "server_error", None)
            return await send(writer, 500, (), data, request.keep_alive)

    @staticmethod
    def _require_method(request: http.Request, method: str) -> None:
        if request.method != method:
            message = f"method {request.method} not allowed on {request.path}"
            raise _Fail(405, message, "invalid_request_error", None)

    def _model_list(self) -> dict[str, Any]:
        with self._lock:
            names = [*self._models, "scripted"]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "scripted"} for n in names]
        return {"object": "list", "data": data}

    def _next_entry(self, model: Any) -> ReplyLike | None:
        with self._lock:
            for key in (model, None) if isinstance(model, str) else (None,):
                queue = self._queues.get(key)
                if queue:
                    return queue.popleft()
        return self.default

    def _resolve(self, entry: ReplyLike | None, body: dict[str, Any]) -> Reply:
        if entry is None:
            message = f"no reply scripted for model {body.get('model')!r} and no default"
            self._record_error(LookupError(message))
            raise _Fail(500, f"scripted server: {message}", "server_error", "no_scripted_reply")
        if isinstance(entry, Reply):
            return entry
        try:
            reply = entry(body)
        except Exception as exc:
            self._record_error(exc)
            message = f"scripted server: reply callable raised {exc!r}"
            raise _Fail(500, message, "server_error", "scripted_callable_failed") from exc
        if not isinstance(reply, Reply):
            exc = TypeError(f"reply callable returned {type(reply).__name__}, not Reply")
            self._record_error(exc)
            raise _Fail(500, f"scripted server: {exc}", "server_error", "scripted_callable_failed")
        return reply

    async def _more_choices(self, body: dict[str, Any], ctx: Rendered, n: int) -> list[Any]:
        # choices 1..n-1: one further scripted reply each (slow ones delay the answer; one
        # that is not a completion ends the choices, so the answer has fewer than n)
        choices: list[Any] = []
        for index in range(1, n):
            reply = self._resolve(self._next_entry(body.get("model")), body)
            while reply.kind == "slow":
                await asyncio.sleep(reply.delay_s)
                reply = self._resolve(reply.then if reply.then is not None else self.default, body)
            if reply.kind != "completion":
                break
            choice = dict(completion_body(reply, ctx)["choices"][0])
            choice["index"] = index
            choices.append(choice)
        return choices

    def _record_error(self, exc: Exception) -> None:
        with self._lock:
            self._errors.append(exc)

    async def _complete(
        self, body: dict[str, Any], request: http.Request, writer: asyncio.StreamWriter
    ) -> bool:
        keep_alive = request.keep_alive
        reply = self._resolve(self._next_entry(body.get("model")), body)
        while reply.kind == "slow":
            await asyncio.sleep(reply.delay_s)
            reply = self._resolve(reply.then if reply.then is not None else self.default, body)
        seq = next(self._seq)
        extra = (*reply.headers, ("x-request-id", f"req_scripted_{seq}"))
        if reply.kind == "status":
            data = error_body(reply.message, reply.error_type, reply.error_code)
            return await send(writer, reply.status_code, extra, data, keep_alive)
        if reply.kind == "raw":
            return await send(writer, reply.status_code, extra, reply.body, keep_alive)
        if reply.kind == "drop":
            return False
        requested = body.get("model")
        ctx = Rendered(
            seq=seq,
            created=int(time.time()),
            model=reply.model or (requested if isinstance(requested, str) else "scripted"),
            request=body,
        )
        stream = body.get("stream") is True
        if reply.kind == "broken":
            if not stream:
                data = json.dumps(completion_body(reply, ctx)).encode()
                return await send(writer, 200, extra, data[: len(data) // 2], keep_alive)
            events, drop = broken_events(reply, ctx)
            await send_events(writer, extra, events, keep_alive, finish=not drop)
            return not drop and keep_alive
        if not stream:
            payload = completion_body(reply, ctx)
            n = body.get("n")
            if isinstance(n, int) and not isinstance(n, bool) and n > 1:
                payload["choices"] += await self._more_choices(body, ctx, n)
            data = json.dumps(payload).encode()
            if reply.chunk_delay_s > 0:
                return await drip(writer, extra, data, keep_alive, reply)
            return await send(writer, 200, extra, data, keep_alive)
        events = stream_events(reply, ctx)
        await send_events(
            writer, extra, events, keep_alive, finish=True, delay_s=reply.chunk_delay_s
        )
        return keep_alive

    async def _send_json(
        self, writer: asyncio.StreamWriter, status: int, obj: Any, keep_alive: bool
    ) -> bool:
        return await send(writer, status, (), json.dumps(obj).encode(), keep_alive)
