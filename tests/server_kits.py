"""The request models of LMDeploy, dfastllm and ollada, loaded from their installed files.

``pip install --no-deps -r tests/conformance-requirements.txt`` puts each server's files in
place without its GPU stack. Nothing here imports the packages themselves (their
``__init__`` may pull torch): the files are found with ``importlib.util.find_spec`` and
loaded one by one, and ``sys.modules`` is restored afterwards.

- LMDeploy 0.18.0: ``lmdeploy/serve/openai/protocol.py`` (pydantic, plus ``shortuuid``
  for response ids, stood in here) and ``chat_completions/validation.py`` (``check_request``,
  the 400s of ``/v1/chat/completions``), run with a stand-in server context: no logprobs
  mode, no session, and a tool parser only when asked.
- dfastllm 0.0.4: ``dfastllm/entrypoints/openai/protocol.py`` (pydantic only).
- ollada 0.3.0: its real FastAPI app (``ollada/server.py``, ``create_app``) on 127.0.0.1 with
  a stand-in model manager that records what it was asked.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

VERSIONS = {"lmdeploy": "0.18.0", "dfastllm": "0.0.4", "ollada": "0.3.0"}


def package_dir(name: str) -> Path:
    """Where ``name`` is installed (its ``__init__`` is not run), or skip saying how to get it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            f"{name} is not installed: pip install --no-deps {name}=={VERSIONS[name]} "
            "(pip install --no-deps -r tests/conformance-requirements.txt)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def _modules(names: list[str]) -> Iterator[None]:
    saved = {n: sys.modules[n] for n in names if n in sys.modules}
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


# -- LMDeploy -----------------------------------------------------------------------------------

_LMDEPLOY: tuple[types.ModuleType, types.ModuleType] | None = None


def load_lmdeploy() -> tuple[types.ModuleType, types.ModuleType]:
    """LMDeploy's protocol and validation modules."""
    global _LMDEPLOY
    if _LMDEPLOY is not None:
        return _LMDEPLOY
    root = package_dir("lmdeploy") / "serve" / "openai"
    names = [
        "shortuuid",
        "lmdeploy",
        "lmdeploy.serve",
        "lmdeploy.serve.openai",
        "lmdeploy.serve.openai.protocol",
    ]
    with _modules(names):
        shortuuid = types.ModuleType("shortuuid")
        shortuuid.random = lambda length=22: "x" * length  # type: ignore[attr-defined]
        sys.modules["shortuuid"] = shortuuid
        for name in names[1:4]:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
        # private names: pydantic resolves the modules' annotations through sys.modules
        protocol = _load("lmdeploy.serve.openai.protocol", root / "protocol.py")
        sys.modules["_lmdeploy_protocol"] = protocol
        validation = _load("_lmdeploy_validation", root / "chat_completions" / "validation.py")
    _LMDEPLOY = (protocol, validation)
    return _LMDEPLOY


class _Sessions:
    def has(self, session_id: Any) -> bool:
        return False


def lmdeploy_refusal(body: dict[str, Any], *, tool_parser: bool = False) -> str:
    """What LMDeploy answers 400 with for ``body`` ('' when it accepts it).

    Runs its own request model, then its own ``check_request`` (validation.py lines 12-115)
    with a server started without ``--logprobs-mode`` and, unless ``tool_parser``, without
    ``--tool-call-parser``.
    """
    from pydantic import ValidationError

    protocol, validation = load_lmdeploy()
    try:
        request = protocol.ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        return f"request model: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
    parser = types.SimpleNamespace(tool_parser_cls=object) if tool_parser else None
    context = types.SimpleNamespace(
        engine_config=types.SimpleNamespace(logprobs_mode=None),
        session_manager=_Sessions(),
        response_parser_cls=parser,
    )
    return str(validation.check_request(request, context, body))


# -- dfastllm -----------------------------------------------------------------------------------

_DFASTLLM: types.ModuleType | None = None


def load_dfastllm() -> types.ModuleType:
    """dfastllm's ``entrypoints/openai/protocol.py``."""
    global _DFASTLLM
    if _DFASTLLM is None:
        path = package_dir("dfastllm") / "entrypoints" / "openai" / "protocol.py"
        with warnings.catch_warnings():
            # its VersionResponse.model_type warns under pydantic < 2.10 (the "model_"
            # namespace was protected then): dfastllm's model, not ours, and not sent to users
            warnings.filterwarnings("ignore", 'Field "model_type" in VersionResponse')
            _DFASTLLM = _load("_dfastllm_protocol", path)
    return _DFASTLLM


def dfastllm_refusal(body: dict[str, Any]) -> str:
    """What dfastllm's request model refuses in ``body`` ('' when it accepts it)."""
    from pydantic import ValidationError

    try:
        load_dfastllm().ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        return f"{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
    return ""


# -- ollada -------------------------------------------------------------------------------------


@dataclass
class FakeManager:
    """Stands in for ollada's ModelManager: answers with ``text``, records each call."""

    text: str = "ok"
    calls: list[dict[str, Any]] = field(default_factory=list)

    def chat(
        self, name: str, messages: list[dict], overrides: dict | None = None, force: bool = False
    ) -> Any:
        self.calls.append({"model": name, "messages": messages, "overrides": overrides})
        return types.SimpleNamespace(text=self.text, tokens=7, seconds=0.1, nfe=4)

    def status(self) -> dict[str, Any]:
        return {"loaded": None, "family": None}


@dataclass
class Running:
    """A running ollada app: its base URL and its stand-in manager."""

    base_url: str
    manager: FakeManager


@contextmanager
def serve_ollada(text: str = "ok") -> Iterator[Running]:
    """Run ollada's real app (``create_app``) on 127.0.0.1 with a stand-in model manager."""
    pytest.importorskip("fastapi", reason="ollada's server needs fastapi (the test extra)")
    import uvicorn

    package_dir("ollada")
    from ollada.server import create_app

    manager = FakeManager(text=text)
    app = create_app(manager)  # type: ignore[arg-type]
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("ollada's app did not start")
        time.sleep(0.01)
    try:
        yield Running(base_url=f"http://127.0.0.1:{port}/v1", manager=manager)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
