"""Fault matrix: every upstream fault x faulty tier x surface, over real HTTP.

Each case scripts one fault on the fast tier, the frontier tier or both (the healthy tier
answers "ok"), sends one turn through one surface (``Router.acomplete``, ``Router.astream``,
the proxy's JSON and SSE endpoints) and checks the promises:

- no lost turn: a completion with its trace, or a typed error (``TieredRouterError`` with its
  attempts / an OpenAI-shaped error body), and a trace emitted either way;
- the turn's deadline holds: the whole case takes at most ``DEADLINE_S + 0.5`` seconds, plus
  ``SLACK_S`` for a loaded CI machine (the bug this guards against overran by 13 s);
- no key leaks: neither key (one shorter than 8 characters) appears in a response body, an
  error, a trace (JSONL or in memory) or a log line.

Breaker behaviour under faults is tested with the engine; here the breaker is off so every
case starts from the same state.

Three more columns run the in-process surfaces with the fast side in flight: ``panel`` (a
panel of three concurrent fast drafts, ``drafts: {k: 3, when: [all]}``), ``hedge`` (the
frontier call started 0.1 s into the fast side, ``hedge: {after_s: 0.1}``) and
``panel_floor`` (the same panel on a turn that offers one tool, every healthy draft calling
``delete_all``, which it does not offer, and the turn starting fast whichever tier is
faulty); the same promises hold, and no turn returns the ``delete_all`` call.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import uvicorn  # noqa: E402

from tiered_router import Router, TieredRouterError, Turn, _http  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.server._protocol import guarded_protocol  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402
from tiered_router.trace import JSONLSink, MemorySink  # noqa: E402

FAST_KEY = "k3Y9zq"  # shorter than 8 characters: scrubbed all the same
FRONTIER_KEY = "sk-frontier-SECRET-0123456789"
DEADLINE_S = 1.0
SLACK_S = 0.5
BOUND_S = DEADLINE_S + 0.5 + SLACK_S
MESSAGES = [{"role": "user", "content": "Say hi."}]
MODELS = {"fast": "fast-model", "frontier": "frontier-model"}
KEYS = {"fast": FAST_KEY, "frontier": FRONTIER_KEY}


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
    }


def _chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": None, "delta": delta}],
    }


_DEEP = "[" * 1000 + '"deep"' + "]" * 1000  # too deep for json.dumps to build


def _deep(stream: bool) -> Reply:
    marker = '"__deep__"'
    if stream:
        event = json.dumps(_chunk({"content": "__deep__"})).replace(marker, _DEEP)
        body = f"data: {event}\n\ndata: [DONE]\n\n"
        return Reply.raw(200, body, {"content-type": "text/event-stream"})
    return Reply.raw(200, json.dumps(_completion({"content": "__deep__"})).replace(marker, _DEEP))


def _answer(message: dict[str, Any], stream: bool) -> Reply:
    """A 200 whose (odd) content is ``message``, as JSON or as one SSE event."""
    if stream:
        body = f"data: {json.dumps(_chunk(message))}\n\ndata: [DONE]\n\n"
        return Reply.raw(200, body, {"content-type": "text/event-stream"})
    return Reply.raw(200, json.dumps(_completion(message)))


def _echo_key(key: str, stream: bool) -> Reply:
    if stream:
        event = {"error": {"message": f"invalid api key {key}", "type": "auth"}}
        head = json.dumps(_chunk({"role": "assistant", "content": "a"}))
        body = f"data: {head}\n\ndata: {json.dumps(event)}\n\n"
        return Reply.raw(200, body, {"content-type": "text/event-stream"})
    return Reply.status(401, message=f"Incorrect API key provided: {key}")


_BIG = b'{"choices": [{"message": {"content": "' + b"x" * (17 * 1024 * 1024) + b'"}}]}'

# fault name -> (tier, stream) -> reply; "refused" is a dead port, not a reply
FAULTS: dict[str, Callable[[str, bool], Reply] | None] = {
    "status_500": lambda tier, stream: Reply.status(500, message="boom"),
    "rate_limited_429": lambda tier, stream: Reply.status(429, retry_after=0.05),
    "refused": None,
    "hang": lambda tier, stream: Reply.slow(DEADLINE_S + 3),
    "slow_drip": lambda tier, stream: Reply.text("x" * 400).streamed(chunks=40, chunk_delay_s=0.1),
    "truncated": lambda tier, stream: Reply.broken_sse("drop"),
    "bad_json": lambda tier, stream: Reply.raw(200, "this is not json {"),
    "broken_sse": lambda tier, stream: Reply.broken_sse("invalid"),
    "tool_calls_number": lambda tier, stream: _answer({"content": "", "tool_calls": 5}, stream),
    "tool_calls_bool": lambda tier, stream: _answer({"content": "", "tool_calls": True}, stream),
    "deep_nesting": lambda tier, stream: _deep(stream),
    "key_echo": lambda tier, stream: _echo_key(KEYS[tier], stream),
    "oversize": lambda tier, stream: Reply.raw(200, _BIG),
}
TIERS = {"fast": ("fast",), "frontier": ("frontier",), "both": ("fast", "frontier")}
SURFACES = ("acomplete", "astream", "proxy_json", "proxy_sse")
MODES: dict[str, dict[str, Any]] = {
    "panel": {"drafts": {"k": 3, "min_agreement": 0.67, "when": ["all"]}},
    "hedge": {"hedge": {"after_s": 0.1}},
    "panel_floor": {"drafts": {"k": 3, "min_agreement": 0.67, "when": ["all"]}},
}
OFFERED = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
NOT_OFFERED = Reply.tool_calls([("delete_all", {"path": "/"})])


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _policy(server: ScriptedServer, refused: tuple[str, ...]) -> dict[str, Any]:
    dead = _dead_url()

    def backend(tier: str) -> dict[str, Any]:
        return {
            "type": "openai",
            "base_url": dead if tier in refused else server.base_url,
            "api_key": KEYS[tier],
            "model": MODELS[tier],
            "max_retries": 0,
            **({"kind": "diffusion"} if tier == "fast" else {}),
        }

    return {
        "version": 1,
        "backends": {"fast": backend("fast"), "frontier": backend("frontier")},
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
        "resilience": {"deadline_s": DEADLINE_S, "breaker": {"enabled": False}},
    }


class _Proxy:
    """A proxy served by uvicorn in a thread, with its traces in memory and in JSONL."""

    def __init__(self, policy: dict[str, Any], jsonl: Path) -> None:
        self.memory = MemorySink()
        self.jsonl = JSONLSink(jsonl)
        app = create_app(policy, env={}, sinks=[self.memory, self.jsonl])
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            http=guarded_protocol(app.state.settings.read_timeout_s),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.jsonl.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture(scope="module")
def proxies(
    upstream: ScriptedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, ...], _Proxy]]:
    """One proxy per set of refused tiers (none, fast, frontier, both)."""
    made: dict[tuple[str, ...], _Proxy] = {}
    folder = tmp_path_factory.mktemp("proxy-traces")
    for refused in ((), ("fast",), ("frontier",), ("fast", "frontier")):
        name = "-".join(refused) or "none"
        made[refused] = _Proxy(_policy(upstream, refused), folder / f"{name}.jsonl")
    yield made
    for proxy in made.values():
        proxy.stop()


def _script(
    server: ScriptedServer,
    fault: str,
    faulty: tuple[str, ...],
    stream: bool,
    *,
    healthy_fast: Reply | None = None,
) -> None:
    make = FAULTS[fault]
    by_model = {MODELS[tier]: make(tier, stream) for tier in faulty if make is not None}
    if healthy_fast is not None and "fast" not in faulty:
        by_model[MODELS["fast"]] = healthy_fast

    def reply(body: dict[str, Any]) -> Reply:
        return by_model.get(body.get("model"), Reply.text("ok"))  # type: ignore[arg-type]

    server.reset()
    server.default = reply


def _turn(faulty_tier: str, column: str | None = None) -> Turn:
    if column == "panel_floor":  # the panel first, whichever tier is faulty
        return Turn(MESSAGES, tools=OFFERED)
    # a frontier-only fault needs a turn that goes to the frontier first
    return Turn(MESSAGES, final=faulty_tier == "frontier")


async def _run_router(
    policy: dict[str, Any], surface: str, turn: Turn, jsonl: Path
) -> tuple[str, MemorySink]:
    memory = MemorySink()
    sink = JSONLSink(jsonl)
    router = Router(policy, sinks=[memory, sink])
    try:
        if surface == "acomplete":
            try:
                result = await router.acomplete(turn)
            except TieredRouterError as exc:
                assert exc.attempts, f"{type(exc).__name__} without attempts"  # type: ignore[attr-defined]
                return f"error:{exc!r}:{exc}", memory
            assert result.trace.attempts
            names = [c.name for c in result.completion.tool_calls]
            return f"ok:{result.completion.text}{_calls(names)}", memory
        stream = router.astream(turn)
        text = []
        try:
            await stream.start()
            async for chunk in stream:
                text.append(chunk.text)
                text.append(_calls([d.name for d in chunk.tool_calls if d.name]))
        except TieredRouterError as exc:
            assert getattr(exc, "attempts", None) or getattr(exc, "trace", None)
            return f"error:{exc!r}:{exc}", memory
        finally:
            await stream.aclose()
        return "ok:" + "".join(text), memory
    finally:
        await router.aclose()
        sink.close()


def _calls(names: list[str]) -> str:
    return "".join(f"[call:{name}]" for name in names)


def _run_proxy(proxy: _Proxy, surface: str, turn: Turn) -> str:
    body: dict[str, Any] = {"model": "auto", "messages": MESSAGES}
    if turn.final:
        body["tiered_router"] = {"final": True}
    headers = {"content-type": "application/json"}
    with _http.build_client(timeout_s=30) as client:
        if surface == "proxy_json":
            response = client.post(proxy.url, json=body, headers=headers)
            data = response.json()
            if response.status_code == 200:
                assert data["choices"][0]["message"] is not None
            else:
                error = data["error"]
                assert set(error) == {"message", "type", "param", "code"}, error
            return f"{response.status_code}:{response.text}"
        body["stream"] = True
        with client.stream("POST", proxy.url, json=body, headers=headers) as response:
            text = response.read().decode()
        if response.status_code == 200:
            events = [e for e in text.split("\n\n") if e.strip()]
            last = events[-1]
            assert last == "data: [DONE]" or '"error"' in last, f"stream cut silently: {text!r}"
        else:
            assert set(json.loads(text)["error"]) == {"message", "type", "param", "code"}
        return f"{response.status_code}:{text}"


def _cases() -> Iterator[Any]:
    for fault in FAULTS:
        for tier in TIERS:
            for surface in SURFACES:
                yield pytest.param(fault, tier, surface, None, id=f"{fault}-{tier}-{surface}")
                if surface in ("acomplete", "astream"):
                    for mode in MODES:  # the panel and hedge columns
                        yield pytest.param(
                            fault, tier, surface, mode, id=f"{fault}-{tier}-{surface}-{mode}"
                        )


@pytest.mark.anyio
@pytest.mark.parametrize(("fault", "tier", "surface", "column"), list(_cases()))
async def test_fault_matrix(
    fault: str,
    tier: str,
    surface: str,
    column: str | None,
    upstream: ScriptedServer,
    proxies: dict[tuple[str, ...], _Proxy],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    mode = MODES.get(column or "")
    faulty = TIERS[tier]
    refused = faulty if fault == "refused" else ()
    stream = surface in ("astream", "proxy_sse")
    floor = column == "panel_floor"
    _script(upstream, fault, faulty, stream, healthy_fast=NOT_OFFERED if floor else None)
    turn = _turn(tier, column)
    jsonl = tmp_path / "traces.jsonl"

    started = time.monotonic()
    if surface.startswith("proxy"):
        proxy = proxies[refused]
        before = len(proxy.memory.traces)
        outcome = _run_proxy(proxy, surface, turn)
        elapsed = time.monotonic() - started
        # a stream's trace is emitted as it closes, just after its last byte
        wait_until = time.monotonic() + 2
        while len(proxy.memory.traces) == before and time.monotonic() < wait_until:
            time.sleep(0.01)
        traces = list(proxy.memory.traces)[before:]
        trace_text = Path(proxy.jsonl.path).read_text()
    else:
        policy = {**_policy(upstream, refused), **(mode or {})}
        outcome, memory = await _run_router(policy, surface, turn, jsonl)
        elapsed = time.monotonic() - started
        traces = list(memory.traces)
        trace_text = jsonl.read_text()

    assert elapsed <= BOUND_S, f"took {elapsed:.2f} s against a {DEADLINE_S} s deadline"
    assert traces, f"no trace for the turn ({outcome[:200]})"
    assert traces[-1].attempts
    if tier == "fast" and fault not in ("hang", "slow_drip"):
        # the frontier is healthy and the fast fault left it time: the turn is answered
        assert outcome.startswith(("ok:", "200:")), outcome[:300]
    last = traces[-1]
    if column in ("panel", "panel_floor") and last.decision.tier == "fast":
        assert any(a.role == "draft" for a in last.attempts), last.attempts
    if floor:  # a panel never returns a call the turn did not offer, whatever failed
        assert "[call:delete_all]" not in outcome, outcome[:300]
        if "fast" not in faulty and outcome.startswith("ok:"):
            assert last.verdict is not None and not last.verdict.passed or last.tier != "fast"
    if column == "hedge" and tier == "fast" and fault in ("hang", "slow_drip"):
        # the hedge answers while the fast side hangs: the turn is not lost to the deadline
        assert any(a.role == "hedge" and a.ok for a in last.attempts), last.attempts
        assert outcome.startswith("ok:"), outcome[:300]
    everything = "\n".join([outcome, trace_text, caplog.text, *(t.to_json() for t in traces)])
    for key in (FAST_KEY, FRONTIER_KEY):
        assert key not in everything, f"key {key[:2]}... leaked"
