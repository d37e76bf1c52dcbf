"""The JSONL trace file on a full disk: no torn line, dropped traces counted, one warning.

A file-size limit (``RLIMIT_FSIZE``) makes the OS cut writes short exactly as a full disk
does, in a child process; ``/dev/full`` refuses every write.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from routerkit import make_policy

from tiered_router import JSONLSink, Router, Turn
from tiered_router.testing import Reply, ScriptedServer

CHILD = textwrap.dedent(
    """
    import json, resource, signal, sys
    from tiered_router import JSONLSink, Router, Turn
    from tiered_router.testing import Reply, ScriptedServer

    path, limit, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is cut short
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    with ScriptedServer() as server:
        server.default = Reply.text("hello there")
        policy = {
            "version": 1,
            "backends": {
                "fast": {"type": "openai", "base_url": server.base_url, "api_key": "k",
                         "model": "fast-model", "kind": "diffusion"},
                "frontier": {"type": "openai", "base_url": server.base_url, "api_key": "k",
                             "model": "frontier-model"},
            },
            "tiers": {"fast": "fast", "frontier": "frontier"},
        }
        sink = JSONLSink(path)
        with Router(policy, sinks=[sink]) as router:
            for _ in range(turns):
                router.complete(Turn([{"role": "user", "content": "Say hi."}]))
        print(json.dumps({"dropped": sink.dropped}))
    """
)


def test_a_full_disk_leaves_whole_lines_and_counts_what_it_dropped(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    turns = 12
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), "6000", str(turns)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    dropped = json.loads(done.stdout.strip().splitlines()[-1])["dropped"]
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn last line
    lines = data.decode().splitlines()
    records = [json.loads(line) for line in lines]  # every line is a whole record
    assert len({r["turn_id"] for r in records}) == len(records)
    assert dropped > 0 and len(records) > 0
    assert len(records) + dropped == turns
    # one warning for the lot, no traceback per turn
    assert done.stderr.count("could not be written") == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_an_unwritable_file_drops_every_trace_with_one_warning(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    server.default = Reply.text("hello")
    sink = JSONLSink("/dev/full")
    with caplog.at_level(logging.WARNING), Router(make_policy(server), sinks=[sink]) as router:
        for _ in range(5):
            result = router.complete(Turn([{"role": "user", "content": "Say hi."}]))
            assert result.completion.text == "hello"  # the turn is never lost to its sink
    assert sink.dropped == 5
    warnings = [r for r in caplog.records if "could not be written" in r.getMessage()]
    assert len(warnings) == 1
    assert "No space left on device" in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


def test_the_proxy_counts_the_traces_its_file_dropped(server: ScriptedServer) -> None:
    pytest.importorskip("uvicorn")
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    from proxyproc import CLIENT_KEY, parse_metrics
    from test_server import running

    from tiered_router import _http
    from tiered_router.server import create_app

    server.default = Reply.text("hello")
    policy = make_policy(server, server={"api_keys": [CLIENT_KEY]})
    sink = JSONLSink("/dev/full")
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]}
    with running(create_app(policy, env={}, sinks=[sink])) as url, _http.build_client() as http:
        for _ in range(3):
            assert (
                http.post(f"{url}/v1/chat/completions", json=body, headers=auth).status_code == 200
            )
        metrics = parse_metrics(http.get(f"{url}/metrics", headers=auth).text)
    assert sink.dropped == 3
    assert metrics["tiered_router_traces_dropped_total"] == 3


def test_another_writer_between_a_short_write_and_its_cut_leaves_no_torn_line(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """Two sinks on one file: one is cut short and cuts its part back; the other waits.

    The first writer (here a thread with its own descriptor, as another process's sink
    would have) wrote part of a record and is about to cut it back to the last newline.
    Had the second sink appended its record in between, that cut would keep the part glued
    in front of it. Each sink's write and cut hold an exclusive ``flock`` on the file, so
    the second record comes after the cut, whole.
    """
    import fcntl
    import threading

    server.default = Reply.text("hello")
    with Router(make_policy(server)) as router:
        trace = router.complete(Turn([{"role": "user", "content": "Say hi."}])).trace
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b'{"earlier": "record"}\n')
    part_written = threading.Event()

    def cut_short_writer() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, b'{"turn_id": "cut sh')  # the OS cut this record short
            part_written.set()
            threading.Event().wait(0.5)  # finding the last newline takes a moment
            data = path.read_bytes()
            os.ftruncate(fd, data.rfind(b"\n") + 1)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    first = threading.Thread(target=cut_short_writer)
    first.start()
    assert part_written.wait(10)
    sink = JSONLSink(path)
    sink.emit(trace)
    first.join(10)
    sink.close()
    lines = path.read_bytes().decode().splitlines()
    assert [json.loads(line).get("turn_id") for line in lines] == [None, trace.turn_id]
    assert sink.dropped == 0
