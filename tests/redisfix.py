"""A real redis-server on 127.0.0.1 for the shared-state tests (Debian's ``redis-server``).

The tests that need it skip with a message naming the package when the binary is absent;
``.ci/run`` installs it, so CI always runs them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

SKIP_MESSAGE = (
    "redis-server is not installed: `apt-get install redis-server` (Debian) to run the "
    "shared-state tests; .ci/run installs it"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process without persistence, on a free loopback port.

    ``stop()`` kills it (SIGKILL, like a crash); ``start()`` brings it back on the same port,
    empty.
    """

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip(SKIP_MESSAGE)
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tr-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.password: str | None = None  # requirepass, kept across restarts

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--protected-mode",
            "no",
        ]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10.0
        while not self.ping():
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited at start: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                answer = sock.recv(64)
                return answer.startswith(b"+PONG") or answer.startswith(b"-NOAUTH")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
