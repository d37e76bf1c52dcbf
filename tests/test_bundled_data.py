"""Only what the package may ship: every bundled data file has a source whose licence allows
redistribution, named in its folder's ATTRIBUTION.md."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tiered_router.evaluation.dataset import read_dataset

PACKAGE = Path(__file__).resolve().parents[1] / "tiered_router"

REDISTRIBUTABLE = frozenset(
    {"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause", "CC-BY-4.0", "CC0-1.0"}
)
"""SPDX ids of licences that let the package ship a source's rows (with attribution)."""

_CODE = {".py", ".pyc", ".typed"}


def _bundled_files() -> list[Path]:
    """Every file of the package that is not code or an attribution page."""
    return sorted(
        path
        for path in PACKAGE.rglob("*")
        if path.is_file()
        and path.suffix not in _CODE
        and path.name != "ATTRIBUTION.md"
        and "__pycache__" not in path.parts
    )


def _sections(page: str) -> list[dict[str, str]]:
    """The ``## `` sections of an attribution page: title and their ``- Key: value`` lines."""
    out = []
    for block in re.split(r"^## ", page, flags=re.MULTILINE)[1:]:
        title, _, body = block.partition("\n")
        fields = {"title": title}
        for key, value in re.findall(r"^- ([A-Z][a-z ]+): (.*(?:\n  .*)*)", body, re.MULTILINE):
            fields[key] = " ".join(value.split())
        out.append(fields)
    return out


def _licence(section: dict[str, str]) -> str:
    return section.get("License", "").split(" ", 1)[0].rstrip(".,;")


def _covering(path: Path) -> list[dict[str, str]]:
    page = path.parent / "ATTRIBUTION.md"
    assert page.is_file(), f"{_name(path)}: no ATTRIBUTION.md beside it"
    sections = _sections(page.read_text(encoding="utf-8"))
    return [s for s in sections if f"`{path.name}`" in s.get("Bundled in", "")]


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else path.name


def problems(files: list[Path]) -> list[str]:
    """What keeps ``files`` from being shipped (empty: all may be)."""
    out = []
    for path in files:
        name = _name(path)
        covering = _covering(path)
        if not covering:
            out.append(f"{name}: no ATTRIBUTION.md section names it in 'Bundled in'")
        for section in covering:
            if _licence(section) not in REDISTRIBUTABLE:
                out.append(
                    f"{name}: section {section['title']!r} has licence "
                    f"{section.get('License', 'none')!r}, not one that allows redistribution"
                )
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            out += _dataset_problems(path, covering)
    return out


def _dataset_problems(path: Path, covering: list[dict[str, str]]) -> list[str]:
    """Each row's source and each repository the header names must be a covered section's."""
    name = _name(path)
    data = read_dataset(path)
    covered = " ".join(s.get("Bundled in", "") + " " + s.get("Repository", "") for s in covering)
    out = []
    for repo in re.findall(r"([\w.-]+/[\w.-]+)@", data.source or ""):
        if repo not in covered:
            out.append(f"{name}: its header names {repo}, which no section covers")
    for source, count in Counter(str(r.turn.metadata.get("source")) for r in data.rows).items():
        if f"`{source}`" not in covered:
            out.append(f"{name}: {count} rows from source {source!r}, which no section covers")
    return out


def test_every_bundled_file_is_attributed_under_a_redistributable_licence() -> None:
    files = _bundled_files()
    names = {p.name for p in files}
    assert {"sample.jsonl.gz", "default_policy.yaml", "learned_default.json"} <= names
    assert problems(files) == []


def test_the_sample_holds_no_recorded_tool_calls_from_unlicensed_results() -> None:
    sample = read_dataset(PACKAGE / "evaluation" / "data" / "sample.jsonl.gz")
    assert "BFCL-Result" not in (sample.source or "")
    assert not any(r.turn.tools for r in sample.rows)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "ATTRIBUTION.md").write_text(
        "# Data\n\n## Exams\n\n- Bundled in: `rows.jsonl`, rows with `metadata.source` `mmlu`\n"
        "- Repository: lm-sys/RouteLLM\n- License: Apache-2.0 (RouteLLM)\n\n"
        "## Tool calls\n\n- Bundled in: `calls.json`\n"
        "- Repository: HuanzhiMao/BFCL-Result\n- License: none (no LICENSE file)\n",
        encoding="utf-8",
    )
    return tmp_path


def _rows(path: Path, sources: list[str], header_source: str) -> None:
    import json

    lines = [
        {
            "format": "tiered-router-eval",
            "version": 1,
            "name": "t",
            "fast_model": "a",
            "frontier_model": "b",
            "source": header_source,
        },
        *(
            {
                "id": f"r{i}",
                "messages": [{"role": "user", "content": "q"}],
                "outcomes": {"a": {"quality": 1.0}, "b": {"quality": 1.0}},
                "metadata": {"source": source},
            }
            for i, source in enumerate(sources)
        ),
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")


def test_the_check_fails_on_a_source_without_a_licence(folder: Path) -> None:
    """The check itself: what it must refuse (an unlicensed source, an unnamed file, rows
    or a repository that no section covers)."""
    (folder / "calls.json").write_text("{}", encoding="utf-8")
    (folder / "stray.bin").write_bytes(b"\0")
    both = "lm-sys/RouteLLM@0b64 HuanzhiMao/BFCL-Result@b4ad"
    _rows(folder / "rows.jsonl", ["mmlu", "bfcl"], both)
    found = problems(sorted(p for p in folder.iterdir() if p.name != "ATTRIBUTION.md"))
    text = "\n".join(found)
    assert "calls.json: section 'Tool calls' has licence 'none (no LICENSE file)'" in text
    assert "stray.bin: no ATTRIBUTION.md section names it" in text
    assert "rows.jsonl: its header names HuanzhiMao/BFCL-Result" in text
    assert "rows.jsonl: 1 rows from source 'bfcl'" in text
    assert len(found) == 4
    _rows(folder / "rows.jsonl", ["mmlu"], "lm-sys/RouteLLM@0b64")
    assert problems([folder / "rows.jsonl"]) == []
