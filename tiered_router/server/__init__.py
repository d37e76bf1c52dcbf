"""The OpenAI-compatible proxy: point any OpenAI client's ``base_url`` at the router.

```
tiered-router serve policy.yaml --port 8100
```

```python
client = OpenAI(base_url="http://127.0.0.1:8100/v1", api_key="<a server.api_keys key>")
client.chat.completions.create(model="auto", messages=[...])
```

Endpoints: ``POST /v1/chat/completions`` (JSON and Server-Sent Events), ``GET /v1/models``,
``GET /healthz``, ``GET /readyz``, ``GET /metrics`` (Prometheus text). Responses carry the headers
``x-tiered-router-tier``, ``-escalated``, ``-score``, ``-backend``, ``-rule``, ``-turn-id``
and ``-overhead-ms``. Needs the ``server`` extra (Starlette, uvicorn, prometheus_client); see
``docs/proxy.md``.

Wing (docs/architecture.md): owns the proxy, its limits and its Prometheus metrics; may import
the router, ``openai._wire``, ``engine``, ``backends``, ``otel``, ``trace``, ``policy`` and the
root's shared values. Nothing imports it but the command line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tiered_router.policy import load_policy
from tiered_router.server._hops import calls_itself, check_port_free
from tiered_router.server._settings import API_KEYS_ENV, ServerSettings, is_loopback

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from tiered_router._types import PolicySource
    from tiered_router.backends._base import Backend
    from tiered_router.otel import OTelSink
    from tiered_router.policy._schema import Policy
    from tiered_router.trace import TraceSink

__all__ = ["API_KEYS_ENV", "ServerSettings", "create_app", "is_loopback", "serve"]

logger = logging.getLogger("tiered_router.server")

_POLICY_ENV = "TIERED_ROUTER_SERVE_POLICY"
_MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # server._metrics.MULTIPROC_DIR_ENV
GRACEFUL_SHUTDOWN_S = 30.0
"""Seconds in-flight requests get to finish after a shutdown signal."""


def _require_server_extra() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        from tiered_router.exceptions import missing_extra

        raise ImportError(missing_extra("server", "the proxy needs Starlette and uvicorn")) from exc
    # found, not imported: a worker must import it only after PROMETHEUS_MULTIPROC_DIR is set
    if importlib.util.find_spec("prometheus_client") is None:
        from tiered_router.exceptions import missing_extra

        raise ImportError(missing_extra("server", "the proxy needs prometheus_client"))


def _file_name(policy: Policy | PolicySource) -> str:
    if isinstance(policy, (str, os.PathLike)) and not str(policy).count("\n"):
        return os.fspath(policy)
    return "<policy>"


def create_app(
    policy: Policy | PolicySource,
    *,
    settings: ServerSettings | None = None,
    sinks: Sequence[TraceSink] = (),
    backends: Mapping[str, Backend] | None = None,
    env: Mapping[str, str] | None = None,
    record: bool = False,
    otel: bool | OTelSink = False,
) -> Starlette:
    """Build the proxy's ASGI app (serve it with uvicorn or any ASGI server).

    Example:
        ```python
        app = create_app("policy.yaml")
        uvicorn.run(app, host="127.0.0.1", port=8100)
        ```

    Args:
        policy: The policy (path, YAML text, mapping or :class:`Policy`).
        settings: Server settings; read from the policy's ``server`` section and
            ``TIERED_ROUTER_API_KEYS`` when ``None``.
        sinks: Extra trace sinks (the metrics sink is always there).
        backends: Backends by name, overriding the ones built from the policy.
        env: Where API keys are looked up; ``os.environ`` when ``None``.
        record: Record each request's messages and outputs in its trace (for
            ``tiered-router dataset from-traces``).
        otel: Write every turn as OpenTelemetry spans and metrics, parented to the
            request's ``traceparent``: ``True`` for an :class:`tiered_router.otel.OTelSink`
            on the global providers, or the sink to use.

    Raises:
        ImportError: When the ``server`` extra (or, with ``otel``, the ``otel`` extra) is
            not installed.
        PolicyError: An invalid policy, or a backend missing its model or API key.

    """
    _require_server_extra()
    from tiered_router.server._app import build_app

    loaded = load_policy(policy, env=env)
    if settings is None:
        settings = ServerSettings.from_policy(loaded, env=env, policy_file=_file_name(policy))
    if not otel:
        return build_app(loaded, settings, sinks=sinks, backends=backends, env=env, record=record)
    from tiered_router.otel import OTelSink, TraceContextMiddleware

    sink = otel if isinstance(otel, OTelSink) else OTelSink(policy=loaded)
    all_sinks = [*sinks, sink]
    app = build_app(loaded, settings, sinks=all_sinks, backends=backends, env=env, record=record)
    app.add_middleware(TraceContextMiddleware)
    return app


def _app_from_environment() -> Any:
    """App factory for ``--workers`` > 1: each worker process loads the policy itself."""
    import json

    spec = json.loads(os.environ[_POLICY_ENV])
    loaded = load_policy(spec["policy"])
    settings = ServerSettings.from_policy(
        loaded, policy_file=spec["policy"], max_body_bytes=spec["max_body_bytes"]
    )
    if spec.get("hop_id"):
        settings = settings.with_overrides(hop_id=spec["hop_id"])
    _configure_logging(spec.get("log_level", "info"))
    otel = bool(spec.get("otel"))
    if otel:
        from tiered_router.otel import configure_otlp

        configure_otlp()  # in each worker: exporter threads do not cross processes
    app = create_app(
        loaded,
        settings=settings,
        sinks=_trace_sinks(spec.get("trace_file")),
        record=bool(spec.get("record")),
        otel=otel,
    )
    app.state.tune_gc = True  # this process only serves the proxy
    return app


def _trace_sinks(trace_file: str | os.PathLike[str] | None) -> list[TraceSink]:
    if trace_file is None:
        return []
    from tiered_router.trace import JSONLSink

    return [JSONLSink(trace_file)]


def _turn_line(record: logging.LogRecord) -> bool:
    """Whether ``record`` is the router's INFO line for a routed turn.

    In ``serve`` the proxy's request line (:func:`._responses.access_log`) says all it says
    and more, so its handler leaves the router's out below ``debug``: one line per request.
    """
    return record.name == "tiered_router.router" and record.levelno == logging.INFO


def _configure_logging(log_level: str) -> None:
    """Send tiered_router's log lines (one per request at INFO) to stderr, as uvicorn's are.

    The handler is added only where the operator configured none on the package; below
    ``debug`` it drops the router's own turn line, which the proxy's request line repeats.
    """
    level = logging.getLevelName(log_level.upper())
    package = logging.getLogger("tiered_router")
    if not isinstance(level, int):
        level = logging.INFO  # uvicorn's own "trace" level
    package.setLevel(level)
    if not package.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        if level > logging.DEBUG:
            handler.addFilter(lambda record: not _turn_line(record))
        package.addHandler(handler)


_METRICS_PREFIX = "tiered-router-metrics-"


@contextlib.contextmanager
def _metrics_dir() -> Iterator[None]:
    """A fresh multiprocess directory for prometheus_client, removed at the end of the run.

    The workers inherit ``PROMETHEUS_MULTIPROC_DIR`` and import prometheus_client after it
    is set, so their numbers go to files there and any worker's scrape adds them up. An
    operator's own ``PROMETHEUS_MULTIPROC_DIR`` is used as it is, and left in place.

    The directory is named for this process's pid (``tiered-router-metrics-<pid>`` in the
    temporary directory). A server killed outright (SIGKILL, out of memory) cannot remove
    its own, so each start first removes those of pids that are no longer alive (only
    directories of this user, never a link).
    """
    if os.environ.get(_MULTIPROC_DIR_ENV):
        yield
        return
    root = tempfile.gettempdir()
    _remove_dead_metrics_dirs(root)
    directory = os.path.join(root, f"{_METRICS_PREFIX}{os.getpid()}")
    if _ours(directory):  # left by a dead process that had this pid: nothing in it is live
        shutil.rmtree(directory, ignore_errors=True)
    try:
        os.mkdir(directory, 0o700)
    except OSError:  # taken by another user's entry: a private one with a random name
        directory = tempfile.mkdtemp(prefix=_METRICS_PREFIX)
    os.environ[_MULTIPROC_DIR_ENV] = directory
    try:
        yield
    finally:
        os.environ.pop(_MULTIPROC_DIR_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def _ours(path: str) -> bool:
    """Whether ``path`` is a directory (not a link) owned by this user."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _remove_dead_metrics_dirs(root: str) -> None:
    """Remove the metrics directories in ``root`` of servers whose process is gone."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(_METRICS_PREFIX) :]
        if not (name.startswith(_METRICS_PREFIX) and pid.isdigit()):
            continue
        path = os.path.join(root, name)
        if int(pid) != os.getpid() and not _pid_alive(int(pid)) and _ours(path):
            logger.info("removing the metrics directory of a stopped server: %s", path)
            shutil.rmtree(path, ignore_errors=True)


def serve(
    policy: Policy | PolicySource,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int = 1,
    max_body_bytes: int | None = None,
    log_level: str = "info",
    env: Mapping[str, str] | None = None,
    trace_file: str | os.PathLike[str] | None = None,
    record: bool = False,
    otel: bool = False,
) -> None:
    """Serve the proxy with uvicorn until interrupted; in-flight requests finish on shutdown.

    Each routed chat request logs two lines at INFO: the router's line for the turn (the
    ``tiered_router.router`` logger), then the proxy's (status, tier, score, rule, escalated,
    latency, cost) on the ``tiered_router.server`` logger, which replaces uvicorn's access log.

    Args:
        policy: The policy (a path when ``workers`` > 1).
        host: Overrides ``server.host`` (``127.0.0.1`` by default).
        port: Overrides ``server.port`` (8100 by default: not the 8000 of vLLM and dlmserve).
        workers: Worker processes (each has its own connection pools; ``/metrics`` adds up
            the numbers of all of them).
        max_body_bytes: Overrides ``server.max_body_bytes``.
        log_level: uvicorn's and tiered_router's log level.
        env: Where API keys are looked up; ``os.environ`` when ``None``.
        trace_file: Append every trace to this JSONL file (each worker appends its own lines).
        record: Record each request's messages and outputs in its trace.
        otel: Export OpenTelemetry spans and metrics over OTLP/HTTP (endpoint from the
            standard ``OTEL_EXPORTER_OTLP_*`` variables); needs the ``otel`` extra.

    Raises:
        ImportError: When the ``server`` extra is not installed.
        PolicyError: An invalid policy, or a non-loopback ``host`` without client keys.
        PortInUse: The port is taken (an ``OSError``; the CLI prints one line, exit 1).
        ValueError: ``workers`` > 1 with a policy that is not a file path.

    """
    _require_server_extra()
    import uvicorn

    from tiered_router.server._protocol import HEADER_TIMEOUT_ENV, PROTOCOL_PATH, guarded_protocol

    loaded = load_policy(policy, env=env)
    settings = ServerSettings.from_policy(
        loaded,
        env=env,
        policy_file=_file_name(policy),
        host=host,
        port=port,
        max_body_bytes=max_body_bytes,
    )
    settings.check_bind()
    for name in calls_itself(loaded, host=settings.host, port=settings.port):
        logger.warning(
            "backend %r has this proxy's own address (%s:%d) as its base_url: its requests "
            "would come back here and be refused as a loop (508); point it at the model "
            "server, or serve the proxy on another port (--port)",
            name,
            settings.host,
            settings.port,
        )
    check_port_free(settings.host, settings.port)
    if not settings.api_keys:
        logger.warning(
            "no client API keys configured (server.api_keys / %s): serving %s without "
            "authentication; only loopback addresses are allowed",
            API_KEYS_ENV,
            settings.host,
        )
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": log_level,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "server_header": False,
        "proxy_headers": False,
        "http": guarded_protocol(settings.read_timeout_s),
        # the proxy serves no WebSocket route: uvicorn need not import a WebSocket library
        "ws": "none",
        "access_log": False,  # the proxy logs one richer line per chat request itself
    }
    _configure_logging(log_level)
    if workers > 1:
        if not isinstance(policy, (str, os.PathLike)) or _file_name(policy) == "<policy>":
            raise ValueError("--workers > 1 needs the policy as a file path")
        import json

        spec = {
            "policy": os.path.abspath(os.fspath(policy)),
            "max_body_bytes": max_body_bytes,
            "trace_file": os.path.abspath(os.fspath(trace_file)) if trace_file else None,
            "record": record,
            "log_level": log_level,
            "otel": otel,
            "hop_id": settings.hop_id,  # one id for every worker: a loop through any is seen
        }
        os.environ[_POLICY_ENV] = json.dumps(spec)
        # worker processes get the protocol by import path and its limit from the environment
        os.environ[HEADER_TIMEOUT_ENV] = str(settings.read_timeout_s)
        options["http"] = PROTOCOL_PATH
        with _metrics_dir():
            uvicorn.run(
                "tiered_router.server:_app_from_environment",
                factory=True,
                workers=workers,
                **options,
            )
        return
    if otel:
        from tiered_router.otel import configure_otlp

        configure_otlp()
    sinks = _trace_sinks(trace_file)
    app = create_app(loaded, settings=settings, env=env, sinks=sinks, record=record, otel=otel)
    app.state.tune_gc = True  # this process only serves the proxy
    try:
        uvicorn.run(app, **options)
    finally:
        for sink in sinks:
            sink.close()  # type: ignore[attr-defined]
