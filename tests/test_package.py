"""The package's public face: __all__, lazy imports, nothing heavy at import time."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import tiered_router

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(statement: str, modules: str) -> list[str]:
    """Which of ``modules`` (space-separated) a fresh interpreter has loaded after
    running ``statement``."""
    names = modules.split()
    code = f"import sys; {statement}; print([m for m in {names!r} if m in sys.modules])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return list(ast.literal_eval(out.stdout.strip()))


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = tiered_router.__all__
    assert names == sorted(names, key=str.casefold)
    for name in names:
        assert getattr(tiered_router, name) is not None, name
    assert set(names) <= set(dir(tiered_router))


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        tiered_router.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_loads_nothing_heavy() -> None:
    heavy = "openai httpx2 aiohttp pydantic yaml typer rich jsonschema tiered_router.router"
    assert _loaded_after("import tiered_router", heavy) == []


def test_public_import_does_not_load_the_sdk_or_the_cli() -> None:
    heavy = "openai httpx2 aiohttp typer rich starlette ruamel re2 yaml jsonschema jsonschema_rs"
    assert _loaded_after("from tiered_router import Router, Turn, load_policy", heavy) == []


def test_importing_the_router_does_not_load_pydantic() -> None:
    # the policy schema is pydantic; it loads when a policy is, not with `import Router`
    modules = "pydantic tiered_router.policy"
    assert _loaded_after("from tiered_router import Router, Turn", modules) == []


def test_importing_the_router_loads_no_asyncio_retries_or_training_code() -> None:
    # they load on first use: the first async call, the first retry loop, a learned scorer
    modules = (
        "asyncio ssl tenacity importlib.resources tiered_router.scoring.learned "
        "tiered_router.scoring.learned._train"
    )
    assert _loaded_after("from tiered_router import Router, Turn", modules) == []


def test_the_lazy_scoring_names_resolve_and_unknown_ones_fail() -> None:
    import pytest

    import tiered_router.scoring as scoring
    import tiered_router.scoring.learned as learned
    from tiered_router.scoring.learned._train import fit_model

    assert scoring.fit_model is learned.fit_model is fit_model
    assert scoring.LearnedScorer is learned.LearnedScorer
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        scoring.nothing  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        learned.nothing  # type: ignore[attr-defined]  # noqa: B018
