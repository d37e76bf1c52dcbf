"""Measures of the engine wing's shape, read from the source (no import of the package).

Run ``python tests/engine_house.py`` to print them; ``tests/test_engine_house.py`` holds the
engine to the targets of issue 31:

- ``turn_writes``: statements outside ``engine/_machine.py`` that assign or mutate a field
  of a ``TurnRun`` (``run.x = ...``, ``run.x.append(...)``, ``run.x[k] = ...``);
- ``complexity``: each function's cyclomatic complexity, counted as radon counts it (one,
  plus one per ``if``, loop, ``except``, boolean operand, comprehension clause, ``assert``),
  and its length in lines;
- ``twin_overlap``: for each async/sync twin pair, the share of the sync body's lines that
  are the async body's lines word for word (after ``ast.unparse``: comments aside);
- ``both_paths``: the test functions that drive a turn (``complete``, ``acomplete``,
  ``stream``, ``astream``) and those among them that run both paths (they take the
  ``path`` fixture, or call a sync and an async entry themselves).
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tiered_router"
ENGINE = PACKAGE / "engine"
MACHINE = ENGINE / "_machine.py"
TESTS = REPO / "tests"

_MUTATORS = frozenset(
    {"append", "add", "pop", "update", "extend", "discard", "clear", "remove", "insert"}
    | {"setdefault", "popitem", "__setitem__", "__delitem__"}
)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def turn_fields() -> set[str]:
    """The names ``TurnRun.__init__`` binds on ``self`` (public or private)."""
    for node in ast.walk(_tree(MACHINE)):
        if isinstance(node, ast.ClassDef) and node.name == "TurnRun":
            fields: set[str] = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    for sub in ast.walk(item):
                        if (
                            isinstance(sub, ast.Attribute)
                            and isinstance(sub.ctx, ast.Store)
                            and isinstance(sub.value, ast.Name)
                            and sub.value.id == "self"
                        ):
                            fields.add(sub.attr)
            return fields
    raise AssertionError("engine/_machine.py has no class TurnRun")


def _run_names(func: ast.AST) -> set[str]:
    """Names a function binds to a ``TurnRun``: ``run``, ``shadow`` and annotated ones."""
    names = {"run", "shadow"}
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for arg in (*func.args.args, *func.args.kwonlyargs, *func.args.posonlyargs):
            if arg.annotation is not None and "TurnRun" in ast.unparse(arg.annotation):
                names.add(arg.arg)
    return names


def _is_run(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    # self._run: the streams hold their turn there
    return isinstance(node, ast.Attribute) and node.attr == "_run"


def _field_of(node: ast.expr, names: set[str], fields: set[str]) -> str | None:
    """The TurnRun field ``node`` names (``run.x``, ``run.x[k]``), if it names one."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in fields and _is_run(node.value, names):
        return node.attr
    return None


@dataclass(frozen=True)
class Write:
    """One statement outside the machine that changes a turn's field."""

    path: str
    line: int
    field: str
    code: str


def turn_writes() -> list[Write]:
    """Every assignment to, or mutating call on, a ``TurnRun`` field outside the machine."""
    fields = turn_fields()
    found: list[Write] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != MACHINE:
            source = path.read_text(encoding="utf-8")
            found.extend(writes_in(source, str(path.relative_to(REPO)), fields))
    return found


def writes_in(source: str, where: str, fields: set[str]) -> list[Write]:
    """The writes to ``fields`` of a ``TurnRun`` in ``source`` (see :func:`turn_writes`)."""
    found: list[Write] = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        names = _run_names(func)
        for node in ast.walk(func):
            for target in _targets(node):
                field = _field_of(target, names, fields)
                if field is not None:
                    found.append(Write(where, node.lineno, field, ast.unparse(node)))
    return sorted(set(found), key=lambda w: (w.path, w.line))


def _targets(node: ast.AST) -> list[ast.expr]:
    """What ``node`` changes: assignment targets, or the object a mutating call is on."""
    targets: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _MUTATORS
    ):
        targets = [node.func.value]
    flat: list[ast.expr] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            flat.extend(target.elts)
        else:
            flat.append(target)
    return flat


# -- complexity ----------------------------------------------------------------------------


def _branches(node: ast.AST) -> int:
    """Decision points in ``node``, not counting nested functions (radon's rules)."""
    count = 0
    stack = list(ast.iter_child_nodes(node))
    while stack:
        sub = stack.pop()
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(sub, ast.Try):
            count += len(sub.handlers) + bool(sub.orelse)
        elif isinstance(sub, ast.BoolOp):
            count += len(sub.values) - 1
        elif isinstance(sub, (ast.If, ast.IfExp, ast.Assert)):
            count += 1
        elif isinstance(sub, (ast.For, ast.While, ast.AsyncFor)):
            count += 1 + bool(sub.orelse)
        elif isinstance(sub, ast.comprehension):
            count += 1 + len(sub.ifs)
        elif isinstance(sub, ast.Match):
            wild = any(getattr(c.pattern, "pattern", False) is None for c in sub.cases)
            count += max(0, len(sub.cases) - wild)
        stack.extend(ast.iter_child_nodes(sub))
    return count


@dataclass(frozen=True)
class Function:
    """One function's size."""

    path: str
    name: str
    complexity: int
    lines: int


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")


def functions(root: Path = ENGINE) -> list[Function]:
    """Every function and method under ``root`` with its complexity and length."""
    out: list[Function] = []
    for path in sorted(root.rglob("*.py")):
        for name, node in _functions(_tree(path)):
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            out.append(Function(str(path.relative_to(REPO)), name, 1 + _branches(node), lines))
    return out


def module_lines(root: Path = ENGINE) -> dict[str, int]:
    """Lines per module under ``root``."""
    return {
        str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(root.rglob("*.py"))
    }


# -- twins ----------------------------------------------------------------------------------

TWIN_PAIRS = (
    ("engine/_streaming.py", "AsyncRoutedStream._generate", "RoutedStream._generate"),
    ("engine/_drive.py", "Driver.adrive", "Driver.drive"),
    ("engine/_dispatch.py", "Dispatcher.acall", "Dispatcher.call"),
    ("engine/_dispatch.py", "Dispatcher.aonce", "Dispatcher.once"),
    ("engine/_dispatch.py", "Dispatcher.aend", "Dispatcher.end"),
)


def function_node(relpath: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The definition of ``qualname`` (``Class.method``) in package module ``relpath``."""
    for name, node in _functions(_tree(PACKAGE / relpath)):
        if name == qualname:
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            return node
    raise KeyError(f"{relpath} has no {qualname}")


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The function's body as ``ast.unparse`` writes it, docstring left out."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [line for stmt in body for line in ast.unparse(stmt).splitlines()]


def twin_overlap() -> list[tuple[str, int, int]]:
    """``(pair, sync lines equal to an async line in order, sync lines)`` per twin pair."""
    out = []
    for relpath, a, s in TWIN_PAIRS:
        try:
            left = body_lines(function_node(relpath, a))
            right = body_lines(function_node(relpath, s))
        except KeyError:
            continue
        out.append((f"{a} / {s}", _same(left, right), len(right)))
    return out


def _same(left: list[str], right: list[str]) -> int:
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


SYNC_NAMES = {
    # the calls a twin makes: async name -> sync name
    "acall": "call",
    "aend": "end",
    "afinish": "finish",
    "arecord": "record",
    "aonce": "once",
    "arun": "run",
    "aguard": "guard",
    "asnapshot": "snapshot",
    "aallow": "allow",
    "aobserve": "observe",
    "aretrying": "retrying",
    "acomplete": "complete",
    "astream": "stream",
    "aclose": "close",
    "aclosing": "closing",
    "aiter": "iter",
    "acollect": "collect",
    "aopen_stream": "open_stream",
    "aclose_stream": "close_stream",
    "_acomplete": "_complete",
    "_asleep": "_sleep",
    "_aguarded": "_guarded",
    "_abuffered": "_buffered",
    "_aopened": "_opened",
    "_athrough": "_through",
    "_may_route_around": "_may_route_around_sync",
    "_aset": "_set",
    "_aget": "_get",
    "abreaker_snapshot": "breaker_snapshot",
    "abreaker_allow": "breaker_allow",
    "abreaker_record": "breaker_record",
    "anext": "next",
    "StopAsyncIteration": "StopIteration",
    "AsyncIterator": "Iterator",
    # attributes only: the driver's flights
    ".flight": ".sync_flight",
}
"""What turns an async body into its sync twin, besides dropping ``await`` and ``async``."""

DIFFERS = "Differs from the async twin"
_CLASS_TWINS = {"AsyncRoutedStream": "RoutedStream"}
_DUNDERS = {"__aiter__": "__iter__", "__aenter__": "__enter__", "__aexit__": "__exit__"}

_Func = ast.FunctionDef | ast.AsyncFunctionDef


class _Synced(ast.NodeTransformer):
    """An async body as its sync twin would be written."""

    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self.visit(node.value)

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        return _yield_from(node) or node

    def visit_AsyncFor(self, node: ast.AsyncFor) -> ast.AST:
        self.generic_visit(node)
        loop = ast.For(node.target, node.iter, node.body, node.orelse, lineno=node.lineno)
        return _yield_from(loop) or loop

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST:
        self.generic_visit(node)
        return ast.With(node.items, node.body, lineno=node.lineno)

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.is_async = 0
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        # getattr(backend, "astream", None): a method looked up by name
        if isinstance(node.value, str):
            node.value = SYNC_NAMES.get(node.value, node.value)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = SYNC_NAMES.get(node.id, node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        attr = SYNC_NAMES.get(node.attr, node.attr)
        node.attr = SYNC_NAMES.get("." + attr, "." + attr)[1:]
        return node


def _yield_from(loop: ast.For) -> ast.Expr | None:
    """``for x in it: yield x`` as ``yield from it`` (an async generator cannot delegate)."""
    if loop.orelse or len(loop.body) != 1 or not isinstance(loop.target, ast.Name):
        return None
    (stmt,) = loop.body
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Yield)):
        return None
    value = stmt.value.value
    if not (isinstance(value, ast.Name) and value.id == loop.target.id):
        return None
    return ast.Expr(ast.YieldFrom(loop.iter), lineno=loop.lineno)


def synced(node: _Func) -> list[str]:
    """The lines of the sync twin ``node`` (an async function) rebuilds to."""
    copy = ast.parse(ast.unparse(node)).body[0]
    assert isinstance(copy, (ast.FunctionDef, ast.AsyncFunctionDef))
    rebuilt = _Synced().visit(copy)
    ast.fix_missing_locations(rebuilt)
    return body_lines(rebuilt)


def _scopes(tree: ast.Module) -> Iterator[tuple[str, dict[str, _Func]]]:
    yield (
        "",
        {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))},
    )
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            funcs = {
                n.name: n
                for n in cls.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            yield cls.name, funcs


def _async_name(name: str) -> str | None:
    if name in _DUNDERS.values():
        return {v: k for k, v in _DUNDERS.items()}[name]
    if name.startswith("__"):
        return None
    return f"_a{name[1:]}" if name.startswith("_") else f"a{name}"


def twin_pairs() -> list[tuple[str, _Func, _Func]]:
    """``(where, async, sync)`` for every twin pair in the engine wing."""
    pairs = []
    for path in sorted(ENGINE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = dict(_scopes(tree))
        rel = path.relative_to(REPO)
        for scope, funcs in scopes.items():
            async_scope = next((a for a, s in _CLASS_TWINS.items() if s == scope), scope)
            async_funcs = scopes.get(async_scope, funcs)
            for name, sync in funcs.items():
                if isinstance(sync, ast.AsyncFunctionDef):
                    continue
                twin = async_funcs.get(_async_name(name) or "")
                if twin is None and async_scope != scope:
                    twin = async_funcs.get(name)
                if isinstance(twin, ast.AsyncFunctionDef):
                    where = f"{rel}:{scope + '.' if scope else ''}{name}"
                    pairs.append((where, twin, sync))
    return pairs


# -- tests on both paths -----------------------------------------------------------------

_SYNC = frozenset({"complete", "stream"})
_ASYNC = frozenset({"acomplete", "astream"})


def both_paths() -> tuple[int, int]:
    """``(tests that drive a turn, tests that run it on both paths)`` in ``tests/``."""
    driving = both = 0
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not node.name.startswith("test_"):
                continue
            called = {
                sub.func.attr
                for sub in ast.walk(node)
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
            }
            takes_path = any(arg.arg == "path" for arg in node.args.args)
            if not (called & (_SYNC | _ASYNC)) and not takes_path:
                continue
            driving += 1
            if takes_path or (called & _SYNC and called & _ASYNC):
                both += 1
    return driving, both


def main() -> None:
    """Print the measures."""
    writes = turn_writes()
    print(f"TurnRun field writes outside engine/_machine.py: {len(writes)}")
    for w in writes:
        print(f"  {w.path}:{w.line} {w.field}: {w.code.splitlines()[0][:80]}")
    funcs = functions()
    over = [f for f in funcs if f.complexity > 12 or f.lines > 60]
    print(f"engine functions: {len(funcs)}; above complexity 12 or 60 lines: {len(over)}")
    for f in sorted(funcs, key=lambda f: -f.complexity)[:8]:
        print(f"  {f.path} {f.name}: complexity {f.complexity}, {f.lines} lines")
    sizes = module_lines()
    print(f"engine modules: {len(sizes)}; largest: {max(sizes.values())} lines")
    for path, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {path}: {n}")
    print("twin overlap (sync lines equal to the async body's, before any substitution):")
    for pair, same, total in twin_overlap():
        print(f"  {pair}: {same}/{total}")
    pairs = twin_pairs()
    declared = [w for w, _a, s in pairs if DIFFERS in (ast.get_docstring(s) or "")]
    rebuilt = [w for w, a, s in pairs if w not in declared and synced(a) == body_lines(s)]
    print(
        f"twin pairs in engine/: {len(pairs)}; rebuilt from the async body exactly: "
        f"{len(rebuilt)}; differing on purpose (said in the docstring): {len(declared)}; "
        f"drifted: {len(pairs) - len(rebuilt) - len(declared)}"
    )
    driving, both = both_paths()
    print(f"tests that drive a turn: {driving}; on both paths: {both}")


if __name__ == "__main__":
    main()
