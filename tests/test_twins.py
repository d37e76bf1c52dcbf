"""The engine's sync twins cannot drift from their async cores.

Every sync function of ``tiered_router/engine`` with an async twin (``acall``/``call``,
``_aopened``/``_opened``, a method of ``AsyncRoutedStream`` and the same of
``RoutedStream``...) is either rebuilt here from the async body and compared line for line,
or says in its docstring how it differs on purpose (``Differs from the async twin: ...``).
The rebuilding is mechanical: ``await x`` is ``x``, ``async for``/``async with`` (and an
async comprehension) are ``for``/``with``, and the names in :data:`SYNC_NAMES` are swapped
(as names, attributes and the strings ``getattr`` looks up); ``for x in it: yield x``,
which an async generator must write, is ``yield from it`` (comments are not
compared: ``ast.unparse`` drops them). A change to an async body without its twin fails
here, as httpcore's check of its generated sync code fails its CI.
"""

from __future__ import annotations

import ast

import pytest
from engine_house import DIFFERS, _Func, body_lines, synced, twin_pairs

PAIRS = twin_pairs()


def test_the_engine_has_twins_to_check() -> None:
    names = {where.split(":")[1] for where, _a, _s in PAIRS}
    assert {"RoutedStream._generate", "Driver.drive", "Dispatcher.call"} <= names
    checked = [w for w, _a, s in PAIRS if DIFFERS not in (ast.get_docstring(s) or "")]
    assert len(checked) >= 10


@pytest.mark.parametrize("pair", PAIRS, ids=[p[0] for p in PAIRS])
def test_a_sync_twin_is_its_async_core_rebuilt(pair: tuple[str, _Func, _Func]) -> None:
    where, core, twin = pair
    doc = ast.get_docstring(twin) or ""
    if DIFFERS in doc:
        said = doc.split(DIFFERS, 1)[1].strip(" :\n")
        assert len(said) > 20, f"{where}: say how it differs from its async twin"
        return
    assert body_lines(twin) == synced(core), (
        f"{where} drifted from its async twin: change both, or say in its docstring how "
        f"it differs on purpose ('{DIFFERS}: ...')"
    )


def test_a_drifted_twin_is_caught() -> None:
    core = ast.parse(
        "async def afinish(self, run):\n    await self.aend(run)\n    return run.outcome()\n"
    )
    same = ast.parse("def finish(self, run):\n    self.end(run)\n    return run.outcome()\n")
    drifted = ast.parse("def finish(self, run):\n    self.end(run)\n    return None\n")
    (a,), (s,), (d,) = core.body, same.body, drifted.body
    assert isinstance(a, ast.AsyncFunctionDef)
    assert isinstance(s, ast.FunctionDef) and isinstance(d, ast.FunctionDef)
    assert synced(a) == body_lines(s)
    assert synced(a) != body_lines(d)
