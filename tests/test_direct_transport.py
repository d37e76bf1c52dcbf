"""Our HTTP/1.1 client over real sockets: framing, pool, stale connections, cancellation.

Each test starts :class:`RawServer`, a real server on 127.0.0.1 whose connections are
answered, byte for byte, by a handler in a thread (so it can close, reset or stall a
connection while the client's event loop is busy). The tests run under asyncio's own loop
and under uvloop, the proxy's.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tiered_router import _http
from tiered_router._http._direct import DirectTransport, Exchange
from tiered_router._http._pool import Connection, Pool
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends.openai_compat import OpenAICompatBackend
from tiered_router.exceptions import BackendConnectionError

HEADERS = (("authorization", "Bearer sk-secret"), ("content-type", "application/json"))
BODY = b'{"model": "m"}'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4\r\n\r\n{ok}"


def _pool_of(transport: DirectTransport) -> Pool:
    """The running loop's pool of ``transport``."""
    return transport._pools[asyncio.get_running_loop()][0]


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"


class Peer:
    """One accepted connection, as a handler sees it."""

    def __init__(self, sock: socket.socket, server: RawServer) -> None:
        self.sock = sock
        self.server = server
        self._buf = b""

    def request(self) -> bytes | None:
        """Read one request (head and content-length body); ``None`` when the client left."""
        while b"\r\n\r\n" not in self._buf:
            data = self._recv()
            if not data:
                return None
            self._buf += data
        head, _, rest = self._buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += self._recv()
        self._buf = rest[length:]
        request = head + b"\r\n\r\n" + rest[:length]
        self.server.requests.append(request)
        return request

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except OSError:  # reset, or 5 s without a byte
            return b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def client_left(self) -> bool:
        """Wait (at most 5 s) for the client to close the connection."""
        return self._recv() == b""

    def reset(self) -> None:
        """Close with a reset (RST), not a FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


Handler = Callable[[Peer], None]


class RawServer:
    """A real server on 127.0.0.1; each connection is handled by ``handler`` in a thread."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.left: list[bool] = []  # per connection, whether the client closed it
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(5)
        with sock:
            self.handler(Peer(sock, self))

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join()
        for thread in self._threads:
            thread.join(10)
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], RawServer]]:
    servers: list[RawServer] = []

    def start(handler: Handler) -> RawServer:
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def answering(*answers: bytes) -> Handler:
    """Answer each request on a connection with the next of ``answers`` (the last repeats)."""

    def handler(peer: Peer) -> None:
        n = 0
        while peer.request() is not None:
            peer.send(answers[min(n, len(answers) - 1)])
            n += 1

    return handler


async def _read(answer: Any) -> bytes:
    try:
        return b"".join([part async for part in answer.aiter_bytes()])
    finally:
        await answer.aclose()


async def _call(transport: DirectTransport, url: str, timeout_s: float = 5.0) -> bytes:
    return await _read(await transport.exchange(url, HEADERS, BODY, timeout_s))


def _held(serve: Callable[[Handler], RawServer]) -> tuple[RawServer, threading.Event]:
    """A server that answers each request once the event is set (at most 5 s later)."""
    release = threading.Event()

    def handler(peer: Peer) -> None:
        while peer.request() is not None:
            release.wait(5)
            peer.send(OK)

    return serve(handler), release


@pytest.mark.anyio
async def test_keep_alive_reuses_a_connection_until_it_expires(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(answering(OK))
    transport = DirectTransport(limits=_http.Limits(keepalive_expiry=0.2))
    try:
        for _ in range(3):
            assert await _call(transport, server.url) == b"{ok}"
        assert server.connections == 1
        sent = server.requests[0]
        assert sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")
        assert b"content-length: 14\r\n" in sent and b"accept-encoding: identity\r\n" in sent
        await asyncio.sleep(0.3)
        assert await _call(transport, server.url) == b"{ok}"
        assert server.connections == 2  # the idle one had expired
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_chunked_answer_with_extensions_streams_and_keeps_the_connection(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        while peer.request() is not None:
            peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n")
            time.sleep(0.05)
            peer.send(b"6 ; ext\r\n world\r\n0\r\nx-trailer: yes\r\n\r\n")

    server = serve(handler)
    transport = DirectTransport()
    try:
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0)
        pieces = [piece async for piece in answer.aiter_bytes()]
        await answer.aclose()
        assert pieces == [b"hello", b" world"]  # handed over as it came
        assert await _call(transport, server.url) == b"hello world"
        assert server.connections == 1
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_answers_that_spoil_the_connection_are_read_whole_and_not_reused(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        request = peer.request()
        if request is not None and b"close" in request:
            peer.send(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")  # no length: ends with a close
        elif request is not None:
            peer.send(b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nold")

    server = serve(handler)
    transport = DirectTransport()
    try:
        answer = await transport.exchange(server.url, HEADERS, b"close", 5.0)
        assert await _read(answer) == b"until the end"
        assert await _call(transport, server.url) == b"old"
        assert await _call(transport, server.url) == b"old"
        assert server.connections == 3
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_connection_closed_mid_body_is_an_error_and_a_backend_error(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{partial")

    server = serve(handler)
    transport = DirectTransport()
    try:
        with pytest.raises(_http.RemoteProtocolError, match="middle of the body"):
            await _call(transport, server.url)
    finally:
        await transport.aclose()
    backend = OpenAICompatBackend("b", model="m", base_url=server.url[:-17], api_key="sk-secret")
    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=5)
    try:
        with pytest.raises(BackendConnectionError) as failed:
            await backend.acomplete(request)
        assert isinstance(failed.value.__cause__, _http.RemoteProtocolError)
        assert "sk-secret" not in str(failed.value)
    finally:
        await backend.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"HTTP/1.1 OK\r\n\r\n", "invalid status line"),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"v" * 70000 + b"\r\n\r\n", "longer than"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nab", "conflicting"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\nab", "invalid content-length"),
    ],
)
async def test_malformed_answers_are_protocol_errors_and_close_the_connection(
    serve: Callable[[Handler], RawServer], raw: bytes, message: str
) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(raw)
            peer.server.left.append(peer.client_left())

    server = serve(handler)
    transport = DirectTransport()
    try:
        with pytest.raises(_http.RemoteProtocolError, match=message):
            await _call(transport, server.url)
    finally:
        await transport.aclose()
    server.close()
    assert server.left == [True]


@pytest.mark.anyio
async def test_an_idle_connection_the_server_closed_is_not_sent_on(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(OK)  # then close: the connection was kept alive, the server ends it

    server = serve(handler)
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == b"{ok}"
        await asyncio.sleep(0.1)  # the close arrives and is seen
        assert await _call(transport, server.url) == b"{ok}"
        assert (server.connections, len(server.requests)) == (2, 2)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_close_the_loop_has_not_seen_yet_is_found_before_sending(
    serve: Callable[[Handler], RawServer],
) -> None:
    closed = threading.Event()

    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(OK)
            peer.sock.shutdown(socket.SHUT_WR)
            closed.set()
            peer.client_left()

    server = serve(handler)
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == b"{ok}"
        assert closed.wait(5)
        time.sleep(1.1)  # blocks the loop: the close is in the socket, not yet seen
        assert await _call(transport, server.url) == b"{ok}"
        assert (server.connections, len(server.requests)) == (2, 2)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_write_refused_by_a_reset_connection_is_sent_once_more(
    serve: Callable[[Handler], RawServer], anyio_backend: Any
) -> None:
    reset = threading.Event()

    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(OK)
            if peer.server.connections == 1:
                time.sleep(0.05)
                peer.reset()
                reset.set()
            else:
                peer.request()

    server = serve(handler)
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == b"{ok}"
        assert reset.wait(5)
        time.sleep(0.2)  # blocks the loop: the reset is in the socket, not yet seen
        try:
            assert await _call(transport, server.url) == b"{ok}"
            resent = True
        except _http.RemoteProtocolError:
            # older uvloop (0.19, our floor) reports a write to a reset socket only later, as
            # TLS does: the call fails then, and is not sent twice
            resent = False
        assert resent or anyio_backend != "asyncio"
        assert (server.connections, len(server.requests)) == (1 + resent, 1 + resent)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_request_the_server_may_have_read_is_never_sent_again(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(OK)
        peer.request()  # read the second request, then close without answering

    server = serve(handler)
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == b"{ok}"
        with pytest.raises(_http.RemoteProtocolError, match="without sending a response"):
            await _call(transport, server.url)
        assert (server.connections, len(server.requests)) == (1, 2)
    finally:
        await transport.aclose()


def _stalling(peer: Peer) -> None:
    if peer.request() is not None:
        peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{partial")
        peer.server.left.append(peer.client_left())


@pytest.mark.anyio
async def test_a_cancelled_read_closes_the_connection(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(_stalling)
    transport = DirectTransport()
    try:
        reading = asyncio.ensure_future(_call(transport, server.url))
        await asyncio.sleep(0.2)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        pool = _pool_of(transport)
        assert pool is not None and not pool._open
    finally:
        await transport.aclose()
    server.close()
    assert server.left == [True]  # the server saw the client close its socket


@pytest.mark.anyio
async def test_an_abandoned_answer_closes_the_connection(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(_stalling)
    transport = DirectTransport()
    try:
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0)
        assert isinstance(answer, Exchange) and answer.status_code == 200
        del answer
        gc.collect()
        await asyncio.sleep(0.05)
        pool = _pool_of(transport)
        assert pool is not None and not pool._open
    finally:
        await transport.aclose()
    server.close()
    assert server.left == [True]


@pytest.mark.anyio
async def test_each_read_is_bounded(serve: Callable[[Handler], RawServer]) -> None:
    server = serve(_stalling)
    transport = DirectTransport()
    try:
        with pytest.raises(_http.ReadTimeout):
            await _call(transport, server.url, timeout_s=0.3)
    finally:
        await transport.aclose()


def _answering_after(*delays_s: float) -> Handler:
    """Answer the n-th request on a connection ``delays_s[n]`` seconds after it came."""

    def handler(peer: Peer) -> None:
        for delay in delays_s:
            if peer.request() is None:
                return
            time.sleep(delay)
            peer.send(OK)

    return handler


@pytest.mark.anyio
async def test_a_shorter_read_timeout_on_a_reused_connection_still_holds(
    serve: Callable[[Handler], RawServer],
) -> None:
    # one read timer per connection: the first call armed it 30 s ahead; the second call's
    # 0.3 s must arm an earlier one, not wait for the first
    server = serve(_answering_after(0.0, 3.0))
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url, timeout_s=30.0) == b"{ok}"
        started = time.monotonic()
        with pytest.raises(_http.ReadTimeout):
            await _call(transport, server.url, timeout_s=0.3)
        assert time.monotonic() - started < 2.0
        assert server.connections == 1
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_longer_read_timeout_outlives_the_timer_an_earlier_call_armed(
    serve: Callable[[Handler], RawServer],
) -> None:
    # the first call armed the connection's timer 0.3 s ahead; when it fires during the
    # second call (1.5 s allowed, answered after 0.6 s) it sleeps again instead of failing
    server = serve(_answering_after(0.0, 0.6))
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url, timeout_s=0.3) == b"{ok}"
        assert await _call(transport, server.url, timeout_s=1.5) == b"{ok}"
        assert server.connections == 1
    finally:
        await transport.aclose()


def _trickling(peer: Peer) -> None:
    """Answer with a 40-byte body, one byte every 0.1 s: each read in time, the whole not."""
    if peer.request() is not None:
        peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n")
        for _ in range(40):
            time.sleep(0.1)
            try:
                peer.send(b"x")
            except OSError:  # the client closed it: the deadline held
                return


@pytest.mark.anyio
async def test_a_deadline_bounds_the_whole_exchange_body_included(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(_trickling)
    transport = DirectTransport()
    try:
        assert transport.owns(server.url)
        started = time.monotonic()
        deadline = asyncio.get_running_loop().time() + 0.5
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0, deadline=deadline)
        with pytest.raises(_http.ReadTimeout):
            await _read(answer)
        assert 0.4 < time.monotonic() - started < 2.0  # each read alone had 5 s
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_backend_call_over_our_connections_keeps_its_timeout_without_a_timer(
    serve: Callable[[Handler], RawServer],
) -> None:
    from tiered_router.backends import _wire
    from tiered_router.exceptions import BackendTimeout

    server = serve(_trickling)
    transport = DirectTransport()
    call = _wire.Call(
        backend="b", url=_http.URL(server.url), headers=HEADERS, body=BODY, timeout_s=0.5
    )
    try:
        started = time.monotonic()
        with pytest.raises(BackendTimeout):
            await _wire.acall(transport, call)
        assert 0.4 < time.monotonic() - started < 2.0
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_the_wait_for_room_is_taken_off_the_connect_under_a_deadline(
    serve: Callable[[Handler], RawServer],
) -> None:
    # one place in the pool, held 0.6 s by a call to one server; the next call, to a host
    # that never accepts, waits for the place and then connects: 1 s in all, not 1 s each
    from tiered_router.backends import _wire
    from tiered_router.exceptions import BackendTimeout

    held = serve(_answering_after(0.6))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    transport = DirectTransport(limits=_http.Limits(max_connections=1))
    try:
        for _ in range(4):  # fill the accept queue: further handshakes go unanswered
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        holding = asyncio.ensure_future(_call(transport, held.url))
        await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        call = _wire.Call(
            backend="b", url=_http.URL(url), headers=HEADERS, body=BODY, timeout_s=1.0
        )
        started = time.monotonic()
        with pytest.raises(BackendTimeout):
            await _wire.acall(transport, call)
        assert time.monotonic() - started < 1.4
        assert await holding == b"{ok}"
    finally:
        await transport.aclose()
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.mark.anyio
async def test_a_read_timer_that_fires_early_does_not_spin(
    serve: Callable[[Handler], RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvloop rounds timers to the millisecond and may fire one early: armed again for the
    # same time it would fire at once, over and over, until the next millisecond
    from tiered_router._http import _pool

    fired = []
    check = _pool.Connection._check_wait

    def counted(self: _pool.Connection) -> None:
        fired.append(1)
        check(self)

    def silent(peer: Peer) -> None:
        if peer.request() is not None:
            peer.client_left()

    monkeypatch.setattr(_pool.Connection, "_check_wait", counted)
    server = serve(silent)
    transport = DirectTransport()
    timeouts = (0.0504, 0.0105, 0.0333, 0.0017, 0.0499)  # between two milliseconds
    try:
        for timeout_s in timeouts:
            with pytest.raises(_http.ReadTimeout):
                await _call(transport, server.url, timeout_s=timeout_s)
    finally:
        await transport.aclose()
    assert len(fired) <= 2 * len(timeouts)  # one or two a timeout, not dozens


@pytest.mark.anyio
async def test_a_read_timer_armed_by_an_earlier_wait_does_not_end_a_later_one_early() -> None:
    # the timer a wait due sooner armed fires: a wait due half a millisecond later sleeps
    # on until its own time; a timer armed for this wait's own time that fires half a
    # millisecond early (uvloop's rounding) ends it
    loop = asyncio.get_running_loop()
    conn = Connection(Pool(loop, _http.Limits(max_connections=1)), ("http", "127.0.0.1", 9))
    waiter = conn._waiter = loop.create_future()
    now = loop.time()
    conn._timer_at, conn._due = now, now + 0.0005
    conn._check_wait()
    assert not waiter.done()
    assert conn._timer is not None and conn._timer_at == conn._due  # armed for its time
    conn._timer.cancel()
    conn._timer = None
    conn._timer_at = conn._due = loop.time() + 0.0005
    conn._check_wait()
    assert waiter.done() and isinstance(waiter.exception(), _http.ReadTimeout)


@pytest.mark.anyio
async def test_a_deadline_is_refused_for_a_url_another_transport_sends(
    serve: Callable[[Handler], RawServer],
) -> None:
    transport = DirectTransport(proxies={"http": "http://127.0.0.1:9"})
    server = serve(answering(OK))
    try:
        assert not transport.owns(server.url)
        with pytest.raises(ValueError, match="only for a URL this transport owns"):
            await transport.exchange(server.url, HEADERS, BODY, 5.0, deadline=1.0)
    finally:
        await transport.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("calls", [32, 64])
async def test_concurrent_calls_share_one_bounded_pool(
    serve: Callable[[Handler], RawServer], calls: int
) -> None:
    server = serve(answering(OK))
    transport = DirectTransport(limits=_http.Limits(max_connections=16))
    unbounded = DirectTransport(limits=_http.Limits(max_connections=None))
    try:
        for pool in (transport, unbounded):
            answers = await asyncio.gather(*(_call(pool, server.url) for _ in range(calls)))
            assert answers == [b"{ok}"] * calls
        assert server.connections <= 16 + calls
        assert len(_pool_of(transport)._open) <= 16
        answers = await asyncio.gather(*(_call(transport, server.url) for _ in range(calls)))
        assert len(answers) == calls and len(server.requests) == 3 * calls
    finally:
        await transport.aclose()
        await unbounded.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("coding", "encode"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
async def test_a_compressed_answer_is_decoded(
    serve: Callable[[Handler], RawServer], coding: str, encode: Callable[[bytes], bytes]
) -> None:
    data = b'{"answer": "' + b"x" * 5000 + b'"}'
    packed = encode(data)
    server = serve(
        answering(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (coding.encode(), len(packed), packed)
        )
    )
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == data
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_large_answer_read_slowly_arrives_whole(
    serve: Callable[[Handler], RawServer],
) -> None:
    data = bytes(range(256)) * (6 * 4096)  # 6 MiB: reading pauses and resumes
    server = serve(
        answering(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
    )
    transport = DirectTransport()
    try:
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0)
        pieces = []
        async for piece in answer.aiter_bytes():
            pieces.append(piece)
            await asyncio.sleep(0.001)
        await answer.aclose()
        assert b"".join(pieces) == data
        assert await _call(transport, server.url) == data
        assert server.connections == 1
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_bad_requests_and_closed_answers_are_refused(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(answering(OK))
    transport = DirectTransport()
    try:
        with pytest.raises(ValueError, match="line break"):
            await transport.exchange(server.url, (("x-a", "1\r\nx-b: 2"),), BODY, 5.0)
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0)
        body = answer.aiter_bytes()
        await answer.aclose()
        with pytest.raises(_http.ReadError, match="closed"):
            await body.__anext__()
        assert "sk-secret" not in repr(answer.headers)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_reset_mid_body_is_a_read_error(serve: Callable[[Handler], RawServer]) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{partial")
            time.sleep(0.1)
            peer.reset()

    server = serve(handler)
    transport = DirectTransport()
    try:
        with pytest.raises(_http.ReadError, match="connection lost while reading"):
            await _call(transport, server.url)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_connection_that_is_never_accepted_times_out_connecting() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    waiting = []
    try:
        for _ in range(4):  # fill the accept queue: further handshakes go unanswered
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            waiting.append(filler)
        transport = DirectTransport()
        try:
            with pytest.raises(_http.ConnectTimeout, match="timed out connecting to 127.0.0.1"):
                await transport.exchange(f"http://127.0.0.1:{port}/v1", HEADERS, BODY, 0.3)
        finally:
            await transport.aclose()
    finally:
        for filler in waiting:
            filler.close()
        listener.close()


@pytest.mark.anyio
async def test_tls_over_our_client(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, serve: Callable[[Handler], RawServer]
) -> None:
    import ssl

    from test_http_transport import _self_signed

    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(OK)
            await writer.drain()
        writer.close()

    tls = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{tls.sockets[0].getsockname()[1]}/v1/chat/completions"
    plain = serve(lambda peer: peer.send(b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    try:
        untrusting = DirectTransport()
        try:
            with pytest.raises(_http.ConnectError, match="cannot connect to 127.0.0.1"):
                await _call(untrusting, url)  # before SSL_CERT_FILE names the server's CA
            with pytest.raises(_http.ConnectError):  # TLS to a server that speaks plain HTTP
                await _call(untrusting, plain.url.replace("http://", "https://"))
        finally:
            await untrusting.aclose()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        transport = DirectTransport()
        try:
            assert await _call(transport, url) == b"{ok}"
            assert await _call(transport, url) == b"{ok}"  # kept alive over TLS
            assert len(_pool_of(transport)._open) == 1
        finally:
            await transport.aclose()
    finally:
        tls.close()
        await tls.wait_closed()


@pytest.mark.anyio
async def test_a_full_pool_closes_another_origins_idle_connection(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        while peer.request() is not None:
            peer.send(OK)
        peer.server.left.append(True)  # the client closed the connection

    first, second = serve(handler), serve(handler)
    transport = DirectTransport(limits=_http.Limits(max_connections=1))
    try:
        assert await _call(transport, first.url) == b"{ok}"
        assert await _call(transport, second.url) == b"{ok}"  # room made: first's idle one
        first.close()
        assert first.left == [True]
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_a_cancelled_wait_for_room_leaves_the_pool_usable(
    serve: Callable[[Handler], RawServer],
) -> None:
    server, release = _held(serve)
    transport = DirectTransport(limits=_http.Limits(max_connections=1))
    try:
        held = asyncio.ensure_future(_call(transport, server.url))
        await asyncio.sleep(0.1)
        waiting = asyncio.ensure_future(_call(transport, server.url))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        after = asyncio.ensure_future(_call(transport, server.url))
        await asyncio.sleep(0.1)
        release.set()
        assert await held == b"{ok}" and await after == b"{ok}"
        assert server.connections == 1
    finally:
        release.set()
        await transport.aclose()


@pytest.mark.anyio
async def test_bytes_on_an_idle_connection_retire_it(
    serve: Callable[[Handler], RawServer],
) -> None:
    def handler(peer: Peer) -> None:
        if peer.request() is not None:
            peer.send(OK + b"HTTP/1.1 408 Request Timeout\r\n\r\n")  # an answer nobody asked for
            peer.request()

    server = serve(handler)
    transport = DirectTransport()
    try:
        assert await _call(transport, server.url) == b"{ok}"
        assert await _call(transport, server.url) == b"{ok}"
        assert server.connections == 2
    finally:
        await transport.aclose()


def test_a_transport_used_from_two_event_loops(serve: Callable[[Handler], RawServer]) -> None:
    server = serve(answering(OK))
    transport = DirectTransport()

    async def call() -> bytes:
        return await _call(transport, server.url)

    assert asyncio.run(call()) == b"{ok}"
    assert asyncio.run(call()) == b"{ok}"  # a new pool on the new loop
    asyncio.run(transport.aclose())


def test_preload_imports_aiohttp_only_when_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from tiered_router._http import _direct; _direct.preload(); "
        "print('aiohttp' in sys.modules)"
    )
    env = {"PATH": "", "PYTHONPATH": "."}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    proxied = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "HTTPS_PROXY": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
    )
    assert (plain.stdout.strip(), proxied.stdout.strip()) == ("False", "True")


# -- found by the outside review of the client ----------------------------------------------

BIG = b"x" * (1024 * 1024 + 1)  # only its last byte takes the untaken body over 1 MiB: paused
BIG_OK = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(BIG), BIG)


@pytest.mark.anyio
async def test_a_connection_paused_on_a_large_answer_reads_again_when_pooled(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(answering(BIG_OK, OK))
    transport = DirectTransport()
    try:
        answer = await transport.exchange(server.url, HEADERS, BODY, 5.0)
        conn = answer._conn
        assert conn is not None
        for _ in range(200):  # nothing taken: the whole answer arrives and reading pauses
            if conn.parser.complete:
                break
            await asyncio.sleep(0.01)
        assert conn.parser.complete and conn.parser.pending > 1024 * 1024
        await answer.aclose()  # read whole from the socket: back to the pool
        assert await _call(transport, server.url, timeout_s=2.0) == b"{ok}"
        assert server.connections == 1  # the same connection, reading again
    finally:
        await transport.aclose()


def test_one_transport_serves_two_threads_each_with_its_own_loop(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(answering(OK))
    transport = DirectTransport()
    results: list[Any] = []

    async def calls() -> None:
        try:
            for _ in range(15):
                results.append(await _call(transport, server.url))
        finally:
            await transport.aclose()

    threads = [threading.Thread(target=asyncio.run, args=(calls(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [b"{ok}"] * 30


@pytest.mark.anyio
async def test_closing_the_transport_fails_a_call_waiting_for_room(
    serve: Callable[[Handler], RawServer],
) -> None:
    server, release = _held(serve)
    transport = DirectTransport(limits=_http.Limits(max_connections=1))
    first = asyncio.ensure_future(transport.exchange(server.url, HEADERS, BODY, 5.0))
    await asyncio.sleep(0.1)
    waiting = asyncio.ensure_future(transport.exchange(server.url, HEADERS, BODY, 5.0))
    await asyncio.sleep(0.05)
    await transport.aclose()
    release.set()
    with pytest.raises(_http.ConnectError, match="closed"):
        await waiting
    with pytest.raises(_http.TransportError):
        await first  # its connection went with the pool
    gc.collect()  # nothing left open (the suite turns a ResourceWarning into an error)


@pytest.mark.anyio
async def test_the_callers_host_replaces_ours_and_its_framing_headers_are_dropped(
    serve: Callable[[Handler], RawServer],
) -> None:
    server = serve(answering(OK))
    transport = DirectTransport()
    headers = (
        ("Host", "api.example.test"),
        ("Content-Length", "0"),
        ("Transfer-Encoding", "chunked"),
        ("content-type", "application/json"),
    )
    try:
        assert await _read(await transport.exchange(server.url, headers, BODY, 5.0)) == b"{ok}"
        sent = server.requests[0].lower()
        assert sent.count(b"\r\nhost:") == 1 and b"\r\nhost: api.example.test\r\n" in sent
        assert sent.count(b"content-length:") == 1 and b"content-length: 14\r\n" in sent
        assert b"transfer-encoding" not in sent and sent.endswith(BODY.lower())
        with pytest.raises(ValueError, match="control byte"):
            await transport.exchange(server.url, (("x-a", "b\x00c"),), BODY, 5.0)
    finally:
        await transport.aclose()


@pytest.mark.anyio
async def test_an_error_answer_with_non_ascii_headers_is_a_backend_error(
    serve: Callable[[Handler], RawServer],
) -> None:
    from tiered_router.exceptions import BackendRateLimited

    answer = (
        b"HTTP/1.1 429 Too Many Requests\r\nx-note: caf\xc3\xa9 \xe9\r\n"
        b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )
    server = serve(answering(answer))
    backend = OpenAICompatBackend("b", model="m", base_url=server.url[:-17], api_key="sk-secret")
    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=5)
    try:
        with pytest.raises(BackendRateLimited) as failed:  # not a UnicodeEncodeError
            await backend.acomplete(request)
        assert "sk-secret" not in str(failed.value)
    finally:
        await backend.aclose()
