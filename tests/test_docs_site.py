"""The documentation site covers the public API and every page is in its navigation.

``mkdocs build --strict`` (run by .ci/run) fails on a broken link, a broken anchor, a page left
out of the nav or an API reference entry that does not resolve. What it cannot see is a public
name with no entry at all: that is checked here, by object, so a name documented once under
its wing's path counts wherever else it is exported.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from test_public_api import PINNED

import tiered_router

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
# "::: dotted.path" and, indented below it, an optional "members:" list
DIRECTIVE = re.compile(r"^::: (?P<path>[\w.]+)\n(?P<options>(?:[ \t]+.*\n?)*)", re.M)
MEMBER = re.compile(r"^[ \t]+- (\w+)$", re.M)


def _directives(text: str) -> list[tuple[str, list[str] | None]]:
    """``(path, members or None)`` of every mkdocstrings directive in ``text``."""
    found = []
    for match in DIRECTIVE.finditer(text):
        options = match["options"]
        members = MEMBER.findall(options) if "members:" in options else None
        found.append((match["path"], members))
    return found


def _resolve(path: str) -> Any:
    """The object a directive names: a module, or an attribute of one."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _reference() -> list[tuple[str, str, list[str] | None]]:
    return [
        (page.name, path, members)
        for page in sorted(REFERENCE.glob("*.md"))
        for path, members in _directives(page.read_text(encoding="utf-8"))
    ]


def _documented() -> dict[int, str]:
    """``id(obj) -> where`` for every object the API reference renders."""
    seen: dict[int, str] = {}
    for page, path, members in _reference():
        target = _resolve(path)
        if not isinstance(target, type(tiered_router)):
            seen[id(target)] = f"{page}: {path}"
            continue
        for name in target.__all__ if members is None else members:
            try:
                seen[id(getattr(target, name))] = f"{page}: {path}.{name}"
            except ImportError:  # an adapter whose framework (an extra) is not installed
                continue
    return seen


def test_every_top_level_name_has_its_own_entry() -> None:
    paths = {path for _, path, _ in _reference()}
    missing = [n for n in tiered_router.__all__ if f"tiered_router.{n}" not in paths]
    assert not missing, (
        f"tiered_router.__all__ names without an API reference entry: {missing}; add "
        f"'::: tiered_router.NAME' to the page of docs/reference/ it belongs to"
    )


def test_every_public_name_of_every_public_module_is_documented() -> None:
    documented = _documented()
    missing = []
    for module_name, names in sorted(PINNED.items()):
        if any(part.startswith("_") for part in module_name.split(".")):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an integration whose framework (an extra) is not installed
            continue
        for name in sorted(names):
            try:
                value = getattr(module, name)
            except ImportError:
                continue
            if id(value) not in documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        f"public names without an API reference entry: {missing}; list them under the "
        f"'members:' of their module's directive in docs/reference/ (or add a directive)"
    )


def test_member_lists_name_only_public_names() -> None:
    for page, path, members in _reference():
        if members is None:
            continue
        exported = set(importlib.import_module(path).__all__)
        assert set(members) <= exported, f"{page}: {path}: {sorted(set(members) - exported)}"


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    listed = set(re.findall(r"([\w/]+\.md)[ \t]*$", nav, re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - pages == set(), "the nav names pages that do not exist"
