"""docs/architecture.md matches the code: every wing it names exists, every module belongs to
one of its rows, and every import (module level, inside functions, under TYPE_CHECKING) is one
its "may import" column allows."""

from __future__ import annotations

import re
from pathlib import Path

from test_imports import MODULES, ROOT, _graph

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_HEADER = "| wing | owns | may import |"


def _rules() -> dict[str, set[str]]:
    """``{wing: the wings it may import}`` from the page's table."""
    text = PAGE.read_text(encoding="utf-8")
    assert _HEADER in text, "docs/architecture.md has lost its rules table"
    table = text.split(_HEADER, 1)[1].strip().splitlines()[1:]  # skip the | --- | line
    rules: dict[str, set[str]] = {}
    for line in table:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == 3, line
        (wing,) = re.findall(r"`([^`]+)`", cells[0])
        assert wing not in rules, f"{wing} has two rows"
        rules[wing] = set(re.findall(r"`([^`]+)`", cells[2]))
    return rules


def _wing(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return f"{parts[1]}/" if (ROOT / parts[1]).is_dir() else parts[1]


RULES = _rules()


def test_the_page_has_a_rule_for_every_wing_and_root_module() -> None:
    assert len(RULES) >= 25
    assert {_wing(m) for m in MODULES} == set(RULES)


def test_every_wing_the_page_names_exists() -> None:
    for wing, allowed in RULES.items():
        for name in (wing, *allowed):
            if name == "__init__":
                path = ROOT / "__init__.py"
            elif name.endswith("/"):
                path = ROOT / name / "__init__.py"
            else:
                path = ROOT / f"{name}.py"
            assert path.is_file(), f"docs/architecture.md names {name}, but {path} is missing"


def _broken(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if _wing(target) != _wing(module) and _wing(target) not in RULES[_wing(module)]
    )


def test_every_import_is_one_the_page_allows() -> None:
    assert _broken(_graph(lazy=True, typing=True)) == []


def test_a_broken_rule_is_caught() -> None:
    graph = {
        "tiered_router.engine._machine": {"tiered_router.router", "tiered_router.engine._dispatch"},
        "tiered_router.router": {"tiered_router.engine._machine"},
    }
    assert _broken(graph) == ["tiered_router.engine._machine -> tiered_router.router"]


def test_only_the_policy_face_imports_the_wings_it_composes() -> None:
    graph = _graph(lazy=True, typing=True)
    composed = ("gate/", "scoring/", "backends/")
    for module, targets in graph.items():
        if _wing(module) == "policy/" and module != "tiered_router.policy":
            assert not {_wing(t) for t in targets} & set(composed), module
    assert {_wing(t) for t in graph["tiered_router.policy"]} >= set(composed)


def test_no_module_is_over_500_lines() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}
