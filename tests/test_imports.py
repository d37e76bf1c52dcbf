"""The package's import graph: no circles, and the escalation engine at the bottom of its floor.

The graph is read from the source (``ast``): an edge for every ``import`` statement naming a
``tiered_router`` module, at module level, inside a function, and under
``if TYPE_CHECKING:`` (annotations are dependencies too). ``from pkg import sub`` is an edge
to ``pkg.sub``. A package's ``__init__`` running before its submodules is not an edge: a
wing's face re-exports its modules, and none of them imports the face back.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import tiered_router

ROOT = Path(tiered_router.__file__).parent


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = ["tiered_router", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path, *, lazy: bool, typing: bool = False) -> set[str]:
    """The tiered_router modules ``name`` imports.

    ``lazy``: inside functions too; ``typing``: under ``if TYPE_CHECKING:`` too.
    """
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                not typing
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                out.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - child.level + 1]
                    base = ".".join([*parts, *([child.module] if child.module else [])])
                subs = {f"{base}.{a.name}" for a in child.names} & MODULES.keys()
                out.update(subs)
                if len(subs) < len(child.names):
                    out.add(base)
            if lazy or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in out if m in MODULES and m != name}


@functools.cache
def _graph(*, lazy: bool, typing: bool = False) -> dict[str, set[str]]:
    return {name: _imports(name, path, lazy=lazy, typing=typing) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_checker_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_at_import_time() -> None:
    assert _cycles(_graph(lazy=False)) == []


def test_no_import_circles_counting_lazy_and_type_only_imports() -> None:
    assert _cycles(_graph(lazy=True, typing=True)) == []


def test_the_graph_sees_lazy_and_type_only_imports() -> None:
    every = _graph(lazy=True, typing=True)
    # the policy face imports the wings it composes inside load_policy only
    assert "tiered_router.gate" in every["tiered_router.policy"]
    assert "tiered_router.gate" not in _graph(lazy=False)["tiered_router.policy"]
    # a TYPE_CHECKING import is an edge
    checks = "tiered_router.policy._checks"
    assert "tiered_router.policy._schema" in every[checks]
    assert "tiered_router.policy._schema" not in _graph(lazy=True)[checks]


CORE = (
    "tiered_router.engine._machine",
    "tiered_router.engine._dispatch",
    "tiered_router.engine._streaming",
    "tiered_router.router",
    "tiered_router.task",
    "tiered_router.openai",
    "tiered_router.server._app",
    "tiered_router.exceptions",
    "tiered_router.engine.resilience",
    "tiered_router.state",
)


def test_the_routing_core_is_in_no_circle_even_through_lazy_imports() -> None:
    graph = _graph(lazy=True)
    for component in _cycles(graph):
        assert not set(CORE) & set(component), component


@pytest.mark.parametrize(
    "name",
    [
        "tiered_router.engine._machine",
        "tiered_router.engine._dispatch",
        "tiered_router.engine._streaming",
        "tiered_router.task",
        "tiered_router.openai._wire",
    ],
)
def test_nothing_below_the_router_imports_it_back(name: str) -> None:
    assert "tiered_router.router" not in _reach(_graph(lazy=True), name)


def test_the_engine_does_no_io() -> None:
    reached = _reach(_graph(lazy=False), "tiered_router.engine._machine")
    for io in ("tiered_router._http", "tiered_router.backends.openai_compat"):
        assert io not in reached
    assert "tiered_router.engine._dispatch" not in reached


def test_exceptions_import_nothing_not_even_for_types() -> None:
    path = MODULES["tiered_router.exceptions"]
    assert _imports("tiered_router.exceptions", path, lazy=True, typing=True) == set()


def test_the_policy_loader_and_checks_ask_the_wings_through_registries() -> None:
    every = _graph(lazy=True, typing=True)
    wings = ("tiered_router.gate", "tiered_router.scoring", "tiered_router.backends")
    for name in ("tiered_router.policy._loader", "tiered_router.policy._checks"):
        for reached in _reach(every, name):
            assert not reached.startswith(wings), (name, reached)
