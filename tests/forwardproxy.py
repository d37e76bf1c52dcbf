"""A forward HTTP proxy on 127.0.0.1 for tests: ``CONNECT`` tunnels and absolute-form requests.

It does what a forward proxy such as Squid does for a client configured with
``HTTP_PROXY`` / ``HTTPS_PROXY``, over real sockets, one thread per client connection:

- ``CONNECT host:port``: opens a TCP connection to the target, answers ``200`` and relays
  bytes both ways (TLS passes through untouched);
- ``POST http://host:port/path``: opens a connection to the target, sends the request in
  origin form with ``connection: close`` (``Proxy-*`` headers dropped), and relays the
  answer back until the target closes.

Host names are resolved through ``hosts`` first, so a test can address an upstream by a name
only the proxy knows (``upstream.invalid``): an answer then proves the call went through
the proxy. Every request line and its headers are recorded in :attr:`ForwardProxy.seen`.
"""

from __future__ import annotations

import selectors
import socket
import socketserver
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return
            data += part
        head, rest = data.split(b"\r\n\r\n", 1)
        line, *lines = head.decode("latin-1").split("\r\n")
        method, target, version = line.split(" ")
        fields = [tuple(x.strip() for x in item.split(":", 1)) for item in lines]
        owner = self.server.owner
        owner.seen.append(Seen(method, target, {k.lower(): v for k, v in fields}))
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            first = rest
        else:
            url = urlsplit(target)
            host, port = url.hostname or "", str(url.port or 80)
            path = url.path + (f"?{url.query}" if url.query else "")
            kept = [
                f"{k}: {v}"
                for k, v in fields
                if not k.lower().startswith("proxy-") and k.lower() != "connection"
            ]
            first = (
                "\r\n".join([f"{method} {path} {version}", *kept, "connection: close"]) + "\r\n\r\n"
            ).encode("latin-1") + rest
        try:
            upstream = socket.create_connection((owner.hosts.get(host, host), int(port)), 5)
        except OSError:
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            return
        with upstream:
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if first:
                upstream.sendall(first)
            self._relay(conn, upstream)

    def _relay(self, conn: socket.socket, upstream: socket.socket) -> None:
        peers = {conn: upstream, upstream: conn}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            while not self.server.owner.stopping.is_set():
                for key, _ in selector.select(timeout=0.1):
                    sock: Any = key.fileobj
                    try:
                        data = sock.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        return
                    if not data:
                        return
                    peers[sock].setblocking(True)
                    peers[sock].sendall(data)
                    peers[sock].setblocking(False)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = True
    owner: ForwardProxy


class ForwardProxy:
    """A forward proxy on a free port of 127.0.0.1 (a context manager; see the module doc).

    Args:
        hosts: Names the proxy resolves itself, e.g. ``{"upstream.invalid": "127.0.0.1"}``.

    """

    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self.hosts = dict(hosts or {})
        self.seen: list[Seen] = []
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()  # joins the connection threads (block_on_close)
        self._thread.join(5)
