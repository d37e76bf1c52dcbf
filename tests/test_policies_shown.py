"""Every policy the README and the docs print is replayed; the figures quoted are the printed ones.

- Each policy printed in the README, in docs/*.md (a YAML block with ``version:``) or shipped
  in examples/ and deploy/ is replayed on the bundled sample with ``tiered-router eval``; one
  that keeps less quality than random or prompt length at its own frontier share must say so
  where it is printed (the word "loses" and the baseline's name, in the text after the block
  or in the file's comments).
- The README's policy, ``examples/policy.yaml`` and docs/policy.md's complete policy are the
  bundled default policy with other backends: same scorer, threshold, rules, gate and
  escalation.
- The README's headline figures and docs/evaluation.md's are what ``tiered-router eval``
  prints today (read from its output, so a change of the default policy shows here).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tiered_router.cli import build_app
from tiered_router.evaluation.calibration import load_policy_offline
from tiered_router.evaluation.sources import bundled_policy_path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)


def _printed() -> list[tuple[str, str, str]]:
    """``(name, policy text, what the page says after it)`` for every policy shown."""
    found = []
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            if not re.search(r"^version:", match.group(1), re.M):
                continue
            line = text.count("\n", 0, match.start()) + 1
            after = text[match.end() :].split("\n#", 1)[0]  # up to the next heading
            name = f"{path.relative_to(ROOT).as_posix()}:{line}"
            found.append((name, match.group(1), after))
    for path in [*sorted((ROOT / "examples").glob("*.yaml")), ROOT / "deploy" / "policy.yaml"]:
        text = path.read_text(encoding="utf-8")
        comments = "\n".join(line for line in text.splitlines() if "#" in line)
        found.append((path.relative_to(ROOT).as_posix(), text, comments))
    return found


PRINTED = _printed()


def _own_data(text: str) -> str | None:
    """The data a policy of replay backends names, when it is not the bundled sample."""
    data = yaml.safe_load(text)
    named = {
        str((b.get("options") or {}).get("data"))
        for b in (data.get("backends") or {}).values()
        if isinstance(b, dict) and b.get("type") == "replay"
    }
    named.discard("None")
    named.discard("sample")
    return sorted(named)[0] if named else None


@cache
def _eval(text: str | None) -> dict[str, Any]:
    """``tiered-router eval POLICY --data sample --json`` (the bundled default for ``None``).

    A policy whose replay backends name other recorded data (``options: {data: bfcl}``) is
    replayed on that data; without it here (the shared data folder), the test skips.
    """
    import tempfile

    own = _own_data(text) if text is not None else None
    args = ["eval", "--data", own or "sample", "--json"]
    with tempfile.TemporaryDirectory() as folder:
        if text is not None:
            path = Path(folder) / "policy.yaml"
            path.write_text(text, encoding="utf-8")
            args.insert(1, str(path))
        result = CliRunner().invoke(build_app(), args)
    if own is not None and result.exit_code != 0:
        pytest.skip(f"the policy replays {own!r}, not here: {result.output.strip()[:200]}")
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_the_printed_policies_are_found() -> None:
    names = {name for name, _, _ in PRINTED}
    assert "examples/policy.yaml" in names
    assert any(name.startswith("README.md:") for name in names)
    assert any(name.startswith("docs/policy.md:") for name in names)


@pytest.mark.parametrize(("name", "text", "said"), PRINTED, ids=[n for n, _, _ in PRINTED])
def test_a_printed_policy_that_loses_to_a_baseline_says_so(name: str, text: str, said: str) -> None:
    out = _eval(text)
    verdict = out["verdict"]
    assert verdict is not None, name
    if verdict["outcome"] != "worse":
        return
    best = max(out["baselines"], key=lambda b: b["quality"])["name"]
    flat = " ".join(said.split())
    assert re.search(rf"loses to (random and )?{best}", flat), (
        f"{name} keeps less quality than {best} at its frontier share on the bundled sample "
        f"({verdict['text']}), and the page does not say so"
    )


def _routing(source: str | Path) -> dict[str, Any]:
    policy = load_policy_offline(source) if isinstance(source, Path) else None
    if policy is None:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "p.yaml"
            path.write_text(str(source), encoding="utf-8")
            policy = load_policy_offline(path)
    return {
        "scoring": policy.scoring.model_dump(),
        "rules": [r.model_dump() for r in policy.rules],
        "gate": policy.gate.model_dump(),
        "escalation": policy.escalation.model_dump(),
        "drafts": None if policy.drafts is None else policy.drafts.model_dump(),
    }


def _readme_policy() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"### The policy\n.*?```yaml\n(.*?)```", readme, re.S)
    assert match is not None
    return match.group(1)


def test_the_readme_example_and_reference_policies_are_the_bundled_one() -> None:
    bundled = _routing(bundled_policy_path())
    assert _routing(_readme_policy()) == bundled
    assert _routing(ROOT / "examples" / "policy.yaml") == bundled
    complete = [text for name, text, _ in PRINTED if name.startswith("docs/policy.md:")]
    assert any(_routing(text) == bundled for text in complete)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def test_the_readme_headline_is_what_eval_prints() -> None:
    out = _eval(None)
    s = out["summary"]
    base = {b["name"]: b["quality"] for b in out["baselines"]}
    all_fast = max(out["sweep"], key=lambda p: p["threshold"])
    headline = (
        f"{_pct(s['quality_retained'])} % of all-frontier quality at {_pct(s['cost_saved'])} % "
        f"lower cost, {_pct(s['frontier_call_share'])} % frontier calls, APGR {s['apgr']:.3f}; "
        f"at the same frontier share random keeps {base['random']:.4f} and prompt length "
        f"{base['prompt length']:.4f} against the policy's {s['quality']:.4f}; all-fast "
        f"(threshold 1) keeps {_pct(all_fast['quality'] / s['quality_frontier'])} %"
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert headline in readme
    # the benchmarks page carries the whole table, the headline row included
    assert headline in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    page = " ".join((ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    assert (
        f"the default policy keeps {_pct(s['quality_retained'])} % of the all-frontier quality "
        f"with {_pct(s['frontier_call_share'])} % of the turns calling the frontier model "
        f"({_pct(s['cost_saved'])} % of the cost saved); at that share a random router keeps "
        f"{base['random']:.4f} and the prompt-length router {base['prompt length']:.4f}, "
        f"against the policy's {s['quality']:.4f}"
    ) in page


def test_the_readme_policy_prints_the_headline_figures_as_the_readme_says() -> None:
    ours, bundled = _eval(_readme_policy()), _eval(None)
    for key in ("quality", "quality_retained", "cost", "frontier_call_share", "apgr"):
        assert ours["summary"][key] == pytest.approx(bundled["summary"][key]), key
    assert ours["verdict"]["outcome"] == bundled["verdict"]["outcome"]
    assert ours["pair_differs_from_policy"]  # the warning the README mentions
    # the policy is YAML as written: no key the loader would not take
    assert yaml.safe_load(_readme_policy())["version"] == 1
