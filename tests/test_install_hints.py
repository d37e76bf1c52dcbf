"""Every "install ..." hint comes from one helper, and names what a pasted command installs.

From a checkout the hint is ``pip install ".[extra]"``; installed from a package index, the
name the distribution was published under; never a guessed index name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tiered_router.exceptions import install_command, missing_extra, pip_command

ROOT = Path(__file__).resolve().parents[1]


def test_from_this_checkout_the_hint_installs_the_checkout() -> None:
    assert install_command("cli") == 'pip install ".[cli]"'
    assert install_command() == 'pip install "."'
    assert missing_extra("server", "the proxy needs Starlette") == (
        'the proxy needs Starlette, from the server extra: pip install ".[server]"'
    )


@pytest.mark.parametrize(
    ("source_tree", "name", "direct_url", "expected"),
    [
        (True, "tiered-router", None, 'pip install ".[otel]"'),
        (False, None, None, 'pip install ".[otel]"'),  # not installed at all
        # pip install . / pip install -e . (PEP 610 records the directory)
        (False, "tiered-router", json.dumps({"url": "file:///src", "dir_info": {}}), None),
        (False, "tiered-router", json.dumps({"url": "f", "dir_info": {"editable": True}}), None),
        # from an index: no direct_url.json; the published name, whatever it is
        (False, "acme-tiered-router", None, 'pip install "acme-tiered-router[otel]"'),
        (False, "acme-tiered-router", "not json", 'pip install "acme-tiered-router[otel]"'),
    ],
)
def test_the_hint_follows_how_the_package_was_installed(
    source_tree: bool, name: str | None, direct_url: str | None, expected: str | None
) -> None:
    got = pip_command("otel", source_tree=source_tree, name=name, direct_url=direct_url)
    assert got == (expected or 'pip install ".[otel]"')


_HINT = re.compile(r"""pip install\s+['"]?[\w.-]*\[""")


def test_no_message_in_the_package_spells_an_install_command_itself() -> None:
    offenders = []
    for path in sorted((ROOT / "tiered_router").rglob("*.py")):
        if path.name == "exceptions.py":
            continue  # the helper
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "tiered-router[" in line or (_HINT.search(line) and "from a checkout" not in line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_docs_and_examples_name_no_unpublished_package() -> None:
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    pages += [*sorted((ROOT / "examples").glob("*.py")), ROOT / "deploy" / "compose.yaml"]
    for path in pages:
        text = path.read_text(encoding="utf-8")
        assert "tiered-router[" not in text, f"{path.relative_to(ROOT)} names tiered-router[...]"
