"""The examples in docs/gate.md and docs/routing.md run, and what the pages list matches the code.

Every ```python block runs on its own, in a fresh namespace and a scratch directory, so a
block that leans on another block fails. Every ```yaml block is merged into a minimal
two-tier policy, loaded, and turned into a router (which builds its gate). The built-in checks
and their options, the escalation keys, the trace fields and the error tree are compared with
the pages, so that adding an option or an error without documenting it fails here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import tiered_router.exceptions
from tiered_router import Router, Turn, load_policy
from tiered_router.exceptions import PolicyError
from tiered_router.gate import default_registry
from tiered_router.policy import (
    BreakerConfig,
    EscalationConfig,
    GateConfig,
    ResilienceConfig,
    RetryConfig,
    RuleCondition,
)
from tiered_router.routing import Decision
from tiered_router.testing import ScriptedBackend
from tiered_router.trace import Attempt, Trace

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ("gate.md", "routing.md")
_FENCE = re.compile(r"^```(\w*)\s*$")

# what the built-in checks that need options are built with, to find their classes
REQUIRED_OPTIONS: dict[str, dict[str, Any]] = {"regex": {"pattern": "x"}, "max_chars": {"limit": 1}}
# read at collection time, before any test registers a check of its own
BUILTIN_NAMES = default_registry().names()

BASE_POLICY: dict[str, Any] = {
    "version": 1,
    "backends": {
        "fast": {"model": "fast-model", "kind": "diffusion"},
        "frontier": {"model": "big-model"},
    },
    "tiers": {"fast": "fast", "frontier": "frontier"},
}


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _blocks(page: str, lang: str) -> list[tuple[int, str]]:
    """Return ``(first line, code)`` of every fenced block of ``lang`` in ``page``."""
    found: list[tuple[int, str]] = []
    current: list[str] | None = None
    start = 0
    current_lang = ""
    for number, line in enumerate(_page(page).splitlines(), start=1):
        fence = _FENCE.match(line)
        if current is None:
            if fence is not None:
                current, start, current_lang = [], number + 1, fence.group(1)
        elif line.rstrip() == "```":
            if current_lang == lang:
                found.append((start, "\n".join(current) + "\n"))
            current = None
        else:
            current.append(line)
    assert current is None, f"{page}: a code block opened at line {start - 1} is never closed"
    return found


def _cases(lang: str) -> list[Any]:
    return [
        pytest.param(page, line, code, id=f"{page}:{line}")
        for page in PAGES
        for line, code in _blocks(page, lang)
    ]


def _section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading.split(" ", 1)[0])
    out: list[str] | None = None
    fenced = False
    for line in _page(page).splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            if out is not None and hashes <= level:
                break
            if line == heading:
                out = []
        if out is not None:
            out.append(line)
    assert out is not None, f"{page}: no heading {heading!r}"
    return "\n".join(out)


def _documented_output(code: str) -> list[str]:
    """The output a block shows: ``# ...`` lines at column 0 right after a ``print(`` line."""
    shown: list[str] = []
    after_print = False
    for line in code.splitlines():
        if after_print and line.startswith("# "):
            shown.append(line[2:])
            continue
        after_print = "print(" in line
    return shown


def _shown_as(shown: str) -> re.Pattern[str]:
    """A pattern for a shown output line, where ``...`` stands for any text."""
    return re.compile(".*".join(re.escape(part) for part in shown.split("...")))


@pytest.fixture
def _scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in an empty directory; forget the checks an example registered."""
    monkeypatch.chdir(tmp_path)
    registry = default_registry()
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


def test_the_pages_have_examples() -> None:
    for page in PAGES:
        assert len(_blocks(page, "python")) >= 6, page
        assert "BENCH_" not in _page(page), f"{page}: a benchmark placeholder was left in"


@pytest.mark.usefixtures("_scratch")
@pytest.mark.parametrize(("page", "line", "code"), _cases("python"))
def test_python_example_runs(
    page: str,
    line: int,
    code: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a module of its own, as if the block were saved to a file and run
    module = types.ModuleType(f"docs_{page.removesuffix('.md')}_{line}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"docs/{page}:{line}", "exec", dont_inherit=True), module.__dict__)
    printed = capsys.readouterr().out.splitlines()
    expected = _documented_output(code)
    assert len(printed) == len(expected), printed
    for got, shown in zip(printed, expected, strict=True):
        assert _shown_as(shown).fullmatch(got), f"printed {got!r}, the page shows {shown!r}"


@pytest.mark.parametrize(("page", "line", "code"), _cases("yaml"))
def test_yaml_example_is_a_valid_policy_section(page: str, line: int, code: str) -> None:
    fragment = yaml.safe_load(code)
    assert isinstance(fragment, dict) and fragment, f"{page}:{line}: not a policy mapping"
    policy = load_policy({**BASE_POLICY, **fragment})
    router = Router(policy)
    if "gate" in fragment:
        assert len(router.gate) == len(fragment["gate"].get("checks", GateConfig().checks))


def _builtin_class(name: str) -> type[Any]:
    try:
        check = default_registry().create(name, REQUIRED_OPTIONS.get(name))
    except PolicyError as exc:  # a new built-in that needs options: add them above
        raise AssertionError(f"add {name!r} to REQUIRED_OPTIONS: {exc}") from exc
    assert dataclasses.is_dataclass(check), f"built-in check {name!r} is not a dataclass"
    return type(check)


def test_every_builtin_check_and_option_is_documented() -> None:
    builtins = _section("gate.md", "## Built-in checks")
    headings = re.findall(r"^### `(\w+)`$", builtins, flags=re.M)
    assert sorted(headings) == sorted(BUILTIN_NAMES)
    default_list = f"`[{', '.join(str(c) for c in GateConfig().checks)}]`"
    assert default_list in _page("gate.md")
    for cls in map(_builtin_class, BUILTIN_NAMES):
        section = _section("gate.md", f"### `{cls.name}`")
        assert f"| `{cls.name}` |" in builtins, f"{cls.name} is missing from the summary table"
        for field in dataclasses.fields(cls):
            if not field.init or field.name.startswith("_"):
                continue
            row = re.search(rf"^\| `{field.name}` \|(.*)$", section, flags=re.M)
            assert row is not None, f"{cls.name}.{field.name} has no row in its options table"
            default = field.default
            if default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                assert "required" in row.group(1), f"{cls.name}.{field.name} is required"
            elif isinstance(default, (bool, int, float, str)):
                shown = json.dumps(default)  # true, 0.5, "" as YAML and JSON write them
                assert f"`{shown}`" in row.group(1), f"{cls.name}.{field.name}: default"


def test_gate_page_lists_the_gate_and_escalation_keys_with_their_defaults() -> None:
    gate_section = _section("gate.md", "## Configuring the gate in policy YAML")
    escalation = _section("gate.md", "## What the router does with a failing verdict")
    for model, section in ((GateConfig(), gate_section), (EscalationConfig(), escalation)):
        for name, value in model.model_dump().items():
            row = re.search(rf"^\| `{name}` \|(.*)$", section, flags=re.M)
            assert row is not None, f"{name} is not in the table"
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            if not isinstance(value, list):
                assert f"`{shown}`" in row.group(1), f"{name}: default {shown}"


def test_routing_page_covers_the_error_tree_the_trace_and_the_rules() -> None:
    page = _page("routing.md")
    for name in tiered_router.exceptions.__all__:
        assert f"`{name}`" in page, f"{name} is not in docs/routing.md"
    for cls in (Attempt, Trace, Decision):
        for field in dataclasses.fields(cls):
            assert f"`{field.name}`" in page, f"{cls.__name__}.{field.name} is not documented"
    for name in RuleCondition.model_fields:
        assert f"| `{name}` |" in page, f"rule condition {name} has no row"
    for model in (ResilienceConfig(), RetryConfig(), BreakerConfig()):
        for name, value in model.model_dump().items():
            if isinstance(value, dict):
                continue
            row = re.search(rf"^\| `{name}` \|(.*)$", page, flags=re.M)
            assert row is not None, f"{type(model).__name__}.{name} has no row"
            shown = json.dumps(value) if value is None or isinstance(value, bool) else f"{value:g}"
            assert f"`{shown}`" in row.group(1), f"{type(model).__name__}.{name}: default"


def _shape(value: Any, *, free: frozenset[str] = frozenset()) -> Any:
    """The keys of nested mappings (first item of lists); keys in ``free`` map anything."""
    if isinstance(value, dict):
        return {k: None if k in free else _shape(v, free=free) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_shape(value[0], free=free)]
    return None


def test_the_jsonl_line_shown_has_the_shape_the_sink_writes() -> None:
    (shown,) = [json.loads(code) for _, code in _blocks("routing.md", "json")]
    router = Router(
        BASE_POLICY,
        backends={
            "fast": ScriptedBackend("fast", ['{"answer": 4']),
            "frontier": ScriptedBackend("frontier", ['{"answer": 4}']),
        },
    )
    turn = Turn([{"role": "user", "content": "2 + 2?"}], response_format={"type": "json_object"})
    written = json.loads(router.complete(turn).trace.to_json())
    free = frozenset({"features", "contributions", "metadata", "error"})
    assert _shape(shown, free=free) == _shape(written, free=free)
    assert shown["escalations"] == written["escalations"] == ["gate_failed"]


# -- every page: each python block runs, or is marked a fragment and compiles ----------------

ROOT = DOCS.parent
_FRAGMENT = "<!-- fragment"


def _every_block() -> list[Any]:
    """``(page, line, code, fragment)`` of every python block in docs/*.md and README.md."""
    cases = []
    for path in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        lines = path.read_text(encoding="utf-8").splitlines()
        current: list[str] | None = None
        start, fragment = 0, False
        for number, line in enumerate(lines, start=1):
            if current is None:
                if line.rstrip() == "```python":
                    current, start = [], number + 1
                    fragment = number >= 2 and lines[number - 2].startswith(_FRAGMENT)
            elif line.rstrip() == "```":
                name = path.relative_to(ROOT).as_posix()
                cases.append(
                    pytest.param(
                        name, start, "\n".join(current) + "\n", fragment, id=f"{name}:{start}"
                    )
                )
                current = None
            else:
                current.append(line)
    return cases


def test_the_fragment_marker_is_used_sparingly() -> None:
    cases = _every_block()
    fragments = [c for c in cases if c.values[3]]
    assert len(cases) >= 30 and len(fragments) * 2 < len(cases)
