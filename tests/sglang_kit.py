"""SGLang's own OpenAI request model, loaded without GPU dependencies.

``pip install --no-deps sglang`` puts SGLang's files in place without torch. Its package
``__init__`` imports torch (through ``sglang.srt.utils.hf_transformers_patches``), so the
protocol module ``sglang/srt/entrypoints/openai/protocol.py`` is loaded from its file with
an empty parent package. It needs pydantic, openai's types and ``msgspec`` (all light), and one
function from ``sglang/utils.py`` (``convert_json_schema_to_str``): that module imports
numpy, requests, IPython and tqdm, so the function's own source is taken from the installed
file and run alone. ``sys.modules`` is restored afterwards.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

VERSION = "0.5.23"
_PROTOCOL: types.ModuleType | None = None


def package_dir() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _utils(root: Path) -> types.ModuleType:
    """``sglang.utils`` with only ``convert_json_schema_to_str``, from SGLang's own source."""
    source = (root / "utils.py").read_text()
    tree = ast.parse(source)
    (fn,) = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "convert_json_schema_to_str"
    ]
    module = types.ModuleType("sglang.utils")
    from typing import Union

    from pydantic import BaseModel

    module.__dict__.update(json=json, BaseModel=BaseModel, Union=Union, Type=type)
    code = compile(ast.Module(body=[fn], type_ignores=[]), str(root / "utils.py"), "exec")
    exec(code, module.__dict__)
    return module


def load_protocol() -> types.ModuleType:
    """SGLang's protocol module, or skip the test saying why it cannot be loaded."""
    global _PROTOCOL
    if _PROTOCOL is not None:
        return _PROTOCOL
    root = package_dir()
    if root is None:
        pytest.skip(
            f"sglang is not installed: pip install --no-deps sglang=={VERSION} "
            "(pip install --no-deps -r tests/conformance-requirements.txt; Linux x86_64, "
            "Python 3.11 or 3.12)"
        )
    pytest.importorskip("msgspec", reason="SGLang's protocol module imports msgspec")
    saved = {n: sys.modules[n] for n in ("sglang", "sglang.utils") if n in sys.modules}
    try:
        package = types.ModuleType("sglang")
        package.__path__ = [str(root)]
        sys.modules["sglang"] = package
        sys.modules["sglang.utils"] = _utils(root)
        # a private top-level name: pydantic resolves the module's annotations through it
        path = root / "srt" / "entrypoints" / "openai" / "protocol.py"
        spec = importlib.util.spec_from_file_location("_sglang_protocol", path)
        assert spec is not None and spec.loader is not None
        protocol = importlib.util.module_from_spec(spec)
        sys.modules["_sglang_protocol"] = protocol
        spec.loader.exec_module(protocol)
    finally:
        sys.modules.pop("sglang", None)
        sys.modules.pop("sglang.utils", None)
        sys.modules.update(saved)
    _PROTOCOL = protocol
    return protocol


def validate(body: dict[str, Any]) -> Any:
    """Validate a request body with SGLang's ``ChatCompletionRequest``."""
    return load_protocol().ChatCompletionRequest.model_validate(body)
