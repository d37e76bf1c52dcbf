"""dlmserve's own request model and FastAPI app, loaded without torch, for conformance tests.

The test extra installs ``dlmserve==0.1.1`` with ``--no-deps`` (its dependencies include
torch and transformers). Its package ``__init__`` imports torch, so nothing here imports
``dlmserve``: the files are found with ``importlib.util.find_spec`` (which does not run the
package) and loaded one by one.

- :func:`load_protocol` loads ``dlmserve/api/protocol.py`` (pydantic only) as is.
- :func:`serve` runs dlmserve's real app (``dlmserve/api/server.py``: its FastAPI routes,
  request validation, prompt rendering, response and SSE building) on 127.0.0.1 with its
  engine replaced by :class:`FakeEngine`. While ``server.py`` and ``sampler.py`` are being
  imported, ``torch`` and ``transformers`` are small stand-ins (the server only calls
  ``torch.cuda.is_available`` and ``torch.randint`` on this path) and ``dlmserve.engine``,
  ``dlmserve.denoise_loop`` and ``dlmserve.metrics`` are fakes; ``sys.modules`` is restored
  afterwards, so no other test sees them.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

VERSION = "0.1.1"
MODEL = "gsai-ml/LLaDA-8B-Instruct"


def package_dir() -> Path | None:
    """Where dlmserve is installed, or ``None`` (its ``__init__`` is not run)."""
    spec = importlib.util.find_spec("dlmserve")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def require_dlmserve() -> Path:
    """Return dlmserve's directory, or skip the test with how to install it."""
    where = package_dir()
    if where is None:
        pytest.skip(
            f"dlmserve is not installed: pip install --no-deps dlmserve=={VERSION} "
            "(pip install --no-deps -r tests/conformance-requirements.txt; Python >= 3.11)"
        )
    return where


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_PROTOCOL: types.ModuleType | None = None


def load_protocol() -> types.ModuleType:
    """dlmserve's ``api/protocol.py``, loaded from the installed files (skips if absent)."""
    global _PROTOCOL
    if _PROTOCOL is None:
        # a private name: pydantic resolves the module's annotations through sys.modules
        _PROTOCOL = _load("_dlmserve_protocol", require_dlmserve() / "api" / "protocol.py")
    return _PROTOCOL


# -- the fake engine ----------------------------------------------------------------------------


@dataclass
class _Ids:
    shape: tuple[int, ...]


class FakeTokenizer:
    """Renders the chat template as ``<|role|>content`` lines, like LLaDA's in spirit."""

    def apply_chat_template(
        self, messages: list[dict[str, str]], *, add_generation_prompt: bool, tokenize: bool
    ) -> str:
        assert tokenize is False and add_generation_prompt is True
        lines = [f"<|{m['role']}|>\n{m['content']}" for m in messages]
        return "\n".join([*lines, "<|assistant|>\n"])


@dataclass
class FakeEngine:
    """Stands in for dlmserve's Engine: answers each prompt with ``reply(prompt, params)``.

    Attributes:
        reply: Returns the generated text for a rendered prompt and its SamplingParams.
        prompts: Every rendered prompt, in order.
        params: Every SamplingParams the server built, in order.
    """

    reply: Callable[[str, Any], str]
    tokenizer: FakeTokenizer = field(default_factory=FakeTokenizer)
    prompts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    async def generate_async(
        self, prompts: list[str], params: Any, prerendered: bool = False
    ) -> list[Any]:
        assert prerendered
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            self.params.append(params)
            text = self.reply(prompt, params)
            out.append(
                _GenerationOutput(
                    prompt_ids=_Ids((max(1, len(prompt) // 4),)),
                    output_ids=_Ids((params.gen_length,)),  # the canvas, as dlmserve counts
                    text=text,
                )
            )
        return out


@dataclass
class _GenerationOutput:
    prompt_ids: _Ids
    output_ids: _Ids
    text: str


def _stand_ins() -> dict[str, types.ModuleType]:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)  # type: ignore[attr-defined]
    torch.randint = lambda low, high, size: types.SimpleNamespace(item=lambda: 7)  # type: ignore[attr-defined]
    torch.Tensor = object  # type: ignore[attr-defined]
    torch.Generator = object  # type: ignore[attr-defined]
    transformers = types.ModuleType("transformers")
    transformers.PreTrainedTokenizerBase = object  # type: ignore[attr-defined]
    transformers.PreTrainedModel = object  # type: ignore[attr-defined]
    engine = types.ModuleType("dlmserve.engine")
    engine.Engine = FakeEngine  # type: ignore[attr-defined]
    engine.GenerationOutput = _GenerationOutput  # type: ignore[attr-defined]
    denoise_loop = types.ModuleType("dlmserve.denoise_loop")

    def denoise(**_: Any) -> Any:
        raise RuntimeError("the fake engine has no denoising loop (force_single_batch)")

    denoise_loop.denoise = denoise  # type: ignore[attr-defined]
    metrics = types.ModuleType("dlmserve.metrics")
    metrics.metrics_response = lambda: b""  # type: ignore[attr-defined]
    metrics.record_request_admitted = lambda: None  # type: ignore[attr-defined]
    metrics.record_request_done = lambda tokens: None  # type: ignore[attr-defined]
    return {
        "torch": torch,
        "transformers": transformers,
        "dlmserve.engine": engine,
        "dlmserve.denoise_loop": denoise_loop,
        "dlmserve.metrics": metrics,
    }


def load_server() -> types.ModuleType:
    """dlmserve's ``api/server.py`` with its engine stand-ins; ``sys.modules`` is restored."""
    pytest.importorskip("fastapi", reason="dlmserve's server needs fastapi (the test extra)")
    root = require_dlmserve()
    names = [
        "torch",
        "transformers",
        "dlmserve",
        "dlmserve.api",
        "dlmserve.api.protocol",
        "dlmserve.api.server",
        "dlmserve.logging_config",
        "dlmserve.sampler",
        "dlmserve.engine",
        "dlmserve.denoise_loop",
        "dlmserve.metrics",
    ]
    saved = {n: sys.modules[n] for n in names if n in sys.modules}
    try:
        sys.modules.update(_stand_ins())
        for name, where in (("dlmserve", root), ("dlmserve.api", root / "api")):
            package = types.ModuleType(name)
            package.__path__ = [str(where)]
            sys.modules[name] = package
        _load("dlmserve.logging_config", root / "logging_config.py")
        _load("dlmserve.sampler", root / "sampler.py")
        _load("dlmserve.api.protocol", root / "api" / "protocol.py")
        return _load("dlmserve.api.server", root / "api" / "server.py")
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@dataclass
class Running:
    """A running dlmserve app: its base URL and its fake engine."""

    base_url: str
    engine: FakeEngine
    module: types.ModuleType


@contextmanager
def serve(reply: Callable[[str, Any], str]) -> Iterator[Running]:
    """Run dlmserve's app on 127.0.0.1 (uvicorn, in a thread) with a fake engine."""
    import uvicorn

    module = load_server()
    engine = FakeEngine(reply=reply)
    module._engine = engine
    module._ready = True
    # the app's lifespan would load the model and install a SIGTERM handler: off
    config = uvicorn.Config(module.app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("dlmserve's app did not start")
        time.sleep(0.01)
    try:
        yield Running(base_url=f"http://127.0.0.1:{port}/v1", engine=engine, module=module)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
