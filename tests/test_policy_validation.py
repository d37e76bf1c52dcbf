"""One validation pass: every policy Router() would reject is refused at load, at its line.

A table of bad policies, each with the line, field and message it must be refused with;
then the property that ``tiered-router validate`` says ok exactly when ``Router()`` accepts
the policy and can build every backend (keys aside).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiered_router import PolicyError, Router, load_policy
from tiered_router.cli import build_app
from tiered_router.policy import Policy
from tiered_router.policy._loader import MAX_DEPTH, MAX_NODES, MAX_POLICY_CHARS

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
version: 1
backends:
  fast:
    model: small
    kind: diffusion
  big:
    model: large
tiers: {fast: fast, frontier: big}
"""


def fast(*lines: str) -> str:
    """BASE with ``lines`` added to the fast backend."""
    added = "".join(f"    {line}\n" for line in lines)
    return BASE.replace("    kind: diffusion\n", f"    kind: diffusion\n{added}")


def checks(*items: str) -> str:
    return BASE + "gate:\n  checks:\n" + "".join(f"    - {item}\n" for item in items)


def deep_flow(levels: int) -> str:
    return fast("extra_body: {x: " + "[" * levels + "]" * levels + "}")


def deep_block(levels: int) -> str:
    body = "".join("  " * (i + 3) + f"k{i}:\n" for i in range(levels))
    return BASE.replace("    kind: diffusion\n", "    kind: diffusion\n    extra_body:\n" + body)


def alias_bomb() -> str:
    """Anchors of 11, 111, 1,111 and 11,111 values, then one list of ten of the last."""
    lines = ["extra_body:", "  lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 4):
        lines.append(f"  lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    lines.append("  bomb: [" + ", ".join(["*l3"] * 10) + "]")
    return fast(*lines)


@dataclass(frozen=True)
class Bad:
    id: str
    text: str
    needle: str  # the offending line contains it (first such line)
    field: str | None
    message: str  # a fragment of the message


BAD: list[Bad] = [
    # schema
    Bad("unknown-top-key", BASE + "tierz: {}\n", "tierz", "tierz", "unknown key"),
    Bad("misspelled-backend-key", fast("modle: x"), "modle", "backends.fast.modle", "did you"),
    Bad("wrong-type", fast("timeout_s: soon"), "timeout_s", "backends.fast.timeout_s", "number"),
    Bad(
        "negative-timeout",
        fast("timeout_s: -1"),
        "timeout_s",
        "backends.fast.timeout_s",
        "greater than 0",
    ),
    Bad(
        "threshold-above-1",
        BASE + "scoring: {threshold: 1.5}\n",
        "threshold",
        "scoring.threshold",
        "less than or equal to 1",
    ),
    Bad("version-2", BASE.replace("version: 1", "version: 2"), "version", "version", "1"),
    Bad(
        "tier-missing-backend",
        BASE.replace("frontier: big}", "frontier: bigg}"),
        "tiers:",
        "tiers.frontier",
        "did you mean 'big'",
    ),
    Bad(
        "rule-unknown-tier",
        BASE + "rules:\n  - {name: r, when: {}, tier: middle}\n",
        "name: r",
        "rules[0].tier",
        "'fast' or 'frontier'",
    ),
    Bad(
        "duplicate-rule",
        BASE + "rules:\n  - {name: r, when: {}, tier: fast}\n  - {tier: fast, name: r, when: {}}\n",
        "- {tier: fast, name: r",
        "rules[1].name",
        "duplicate rule name",
    ),
    Bad(
        "unset-variable",
        fast("base_url: ${NOT_SET_ANYWHERE_42}"),
        "base_url",
        "backends.fast.base_url",
        "NOT_SET_ANYWHERE_42 is not set",
    ),
    Bad(
        "malformed-variable",
        fast("base_url: ${bad-name}"),
        "${",
        "backends.fast.base_url",
        "malformed",
    ),
    Bad(
        "duplicate-key",
        fast("kind: autoregressive"),
        "autoregressive",
        "backends.fast.kind",
        "duplicate key 'kind' (first at line 5)",
    ),
    Bad(
        "yaml-syntax",
        BASE + "scoring: threshold: 0.5\n",
        "scoring",
        None,
        "mapping values are not allowed here",
    ),
    Bad(
        "escalation-literal",
        BASE + "escalation: {when_frontier_fails_gate: ignore}\n",
        "escalation",
        "escalation.when_frontier_fails_gate",
        "'return' or 'raise'",
    ),
    Bad(
        "breaker-ratio-0",
        BASE + "resilience:\n  breaker: {failure_ratio: 0}\n",
        "breaker",
        "resilience.breaker.failure_ratio",
        "greater than 0",
    ),
    Bad("server-port", BASE + "server: {port: 70000}\n", "server", "server.port", "65535"),
    # gate checks and their options
    Bad(
        "unknown-check",
        checks("non_empty", "nonempty"),
        "- nonempty",
        "gate.checks[1]",
        "did you mean 'non_empty'",
    ),
    Bad(
        "misspelled-option",
        checks("repetition: {max_ratoi: 0.3}"),
        "max_ratoi",
        "gate.checks[0].repetition.max_ratoi",
        "did you mean 'max_ratio'",
    ),
    Bad(
        "missing-option",
        checks("regex: {must_match: false}"),
        "regex",
        "gate.checks[0]",
        "missing option 'pattern'",
    ),
    Bad(
        "option-value",
        checks("max_chars: {limit: -5}"),
        "max_chars",
        "gate.checks[0].max_chars.limit",
        "must be an integer >= 0",
    ),
    Bad(
        "options-on-a-plain-check",
        checks("non_empty: {strict: true}"),
        "non_empty",
        "gate.checks[0].non_empty.strict",
        "unknown option 'strict'",
    ),
    Bad(
        "two-key-check",
        checks("{non_empty: {}, regex: {pattern: x}}"),
        "non_empty",
        "gate.checks[0]",
        "exactly one key",
    ),
    Bad(
        "options-not-mapping",
        checks("regex: [x]"),
        "regex",
        "gate.checks[0].regex",
        "must be a mapping",
    ),
    Bad(
        "invalid-regex",
        checks("regex: {pattern: '(open'}"),
        "regex",
        "gate.checks[0].regex.pattern",
        "invalid regular expression",
    ),
    Bad(
        "regex-backreference",
        checks("regex: {pattern: '(a)\\1'}"),
        "regex",
        "gate.checks[0].regex.pattern",
        "no backreferences",
    ),
    Bad(
        "regex-lookahead",
        checks("regex: {pattern: 'x(?=y)'}"),
        "regex",
        "gate.checks[0].regex.pattern",
        "no lookaround",
    ),
    Bad(
        "regex-flag",
        checks("regex: {pattern: x, flags: q}"),
        "regex",
        "gate.checks[0].regex.flags",
        "unknown flag 'q'",
    ),
    # scorer
    Bad(
        "scorer-type",
        BASE + "scoring: {type: neural}\n",
        "scoring",
        "scoring.type",
        "'heuristic', 'learned' or 'transfer'",
    ),
    Bad(
        "heuristic-weight-name",
        BASE + "scoring:\n  type: heuristic\n  weights: {lenght: 1.0}\n",
        "weights",
        "scoring.weights.lenght",
        "unknown feature 'lenght'",
    ),
    Bad(
        "learned-weights-path",
        BASE + "scoring:\n  type: learned\n  options:\n    path: /nonexistent/weights.json\n",
        "path:",
        "scoring.options.path",
        "cannot read learned scorer weights",
    ),
    Bad(
        "learned-with-weights",
        BASE + "scoring:\n  type: learned\n  weights: {bias: 1}\n",
        "weights",
        "scoring.weights",
        "only the heuristic scorer",
    ),
    Bad(
        "scorer-option",
        BASE + "scoring:\n  options: {max_reason: 2}\n",
        "options",
        "scoring.options",
        "unknown option",
    ),
    # backends and presets
    Bad(
        "backend-type",
        fast("type: opneai"),
        "opneai",
        "backends.fast.type",
        "did you mean 'openai'? (known: openai, replay)",
    ),
    Bad("preset", fast("preset: mercury2"), "mercury2", "backends.fast.preset", "'mercury-2'"),
    Bad(
        "preset-without-model",
        BASE.replace("    model: large\n", "    preset: openai\n"),
        "  big:",
        "backends.big.model",
        "preset 'openai' has no default",
    ),
    Bad(
        "no-model",
        BASE.replace("    model: large\n", "    timeout_s: 5\n"),
        "  big:",
        "backends.big.model",
        "needs `model`",
    ),
    Bad(
        "backend-option",
        fast("options: {quirk: mercury}"),
        "options",
        "backends.fast.options.quirk",
        "unknown option 'quirk'",
    ),
    Bad(
        "retired-quirks",
        fast("options: {quirks: mercury}"),
        "options",
        "backends.fast.options.quirks",
        "dialect: mercury-2",
    ),
    Bad(
        "dialect",
        fast("options: {dialect: odd}"),
        "options",
        "backends.fast.options.dialect",
        "odd",
    ),
    Bad(
        "replay-data-not-a-name",
        BASE.replace("    model: large\n", "    type: replay\n    options: {data: [a, b]}\n"),
        "options: {data",
        "backends.big.options.data",
        "must be a dataset file or data name, got list",
    ),
    Bad(
        "replay-option",
        BASE.replace("    model: large\n", "    type: replay\n    options: {dataset: bfcl}\n"),
        "options: {dataset",
        "backends.big.options.dataset",
        "unknown option 'dataset' for a replay backend",
    ),
    # size and depth
    Bad("deep-flow", deep_flow(1000), "extra_body", None, f"deeper than {MAX_DEPTH} levels"),
    Bad(
        "deep-block",
        deep_block(1000),
        f"k{MAX_DEPTH - 3}:",
        None,
        f"deeper than {MAX_DEPTH} levels",
    ),
    Bad(
        "alias-bomb-in-extra-body",
        alias_bomb(),
        "bomb:",
        "backends.fast.extra_body.bomb",
        f"more than {MAX_NODES} values",
    ),
    Bad(
        "recursive-alias",
        fast("extra_body: &loop {again: *loop}"),
        "extra_body",
        "backends.fast.extra_body.again",
        "contains itself",
    ),
    Bad(
        "too-long",
        BASE + "# " + "x" * MAX_POLICY_CHARS + "\n",
        "",
        None,
        f"the limit is {MAX_POLICY_CHARS} characters",
    ),
]


def line_of(text: str, needle: str) -> int | None:
    if not needle:
        return None
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_table_covers_at_least_thirty_kinds() -> None:
    assert len({case.id for case in BAD}) == len(BAD) >= 30


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_bad_policy_is_refused_at_its_line_and_field(case: Bad) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(case.text, env={})
    problems = info.value.problems
    found = [p for p in problems if p[1] == case.field and case.message in p[2]]
    assert found, problems
    assert found[0][0] == line_of(case.text, case.needle), problems
    assert "Traceback" not in str(info.value)
    # Router() refuses it the same way
    with pytest.raises(PolicyError) as again:
        Router(case.text)
    assert again.value.problems == problems


def test_a_deep_mapping_source_is_refused_without_recursion() -> None:
    deep: dict[str, object] = {}
    current = deep
    for _ in range(5000):
        current["k"] = current = {}
    data = {
        "backends": {"a": {"model": "m", "extra_body": deep}},
        "tiers": {"fast": "a", "frontier": "a"},
    }
    with pytest.raises(PolicyError) as info:
        load_policy(data)
    assert info.value.field is not None
    assert info.value.field.startswith("backends.a.extra_body.k.k")
    assert f"deeper than {MAX_DEPTH} levels" in str(info.value)


def test_a_shared_mapping_source_is_measured_expanded() -> None:
    leaf: list[object] = list(range(10))
    for _ in range(6):
        leaf = [leaf] * 10
    data = {
        "backends": {"a": {"model": "m", "params": {"big": leaf}}},
        "tiers": {"fast": "a", "frontier": "a"},
    }
    with pytest.raises(PolicyError, match=f"more than {MAX_NODES} values"):
        load_policy(data)


def test_limits_leave_room_for_real_policies() -> None:
    nested = fast("extra_body: {x: " + "[" * (MAX_DEPTH - 5) + "]" * (MAX_DEPTH - 5) + "}")
    assert isinstance(load_policy(nested).backends["fast"].extra_body["x"], list)
    shared = fast(
        "extra_body:",
        "  a: &a {steps: 8, block: 32}",
        "  b: *a",
        "  c: *a",
    )
    assert load_policy(shared).backends["fast"].extra_body["c"] == {"steps": 8, "block": 32}


def test_too_large_policy_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(BASE + "#" * (4 * MAX_POLICY_CHARS + 1) + "\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="bytes long; the limit is") as info:
        load_policy(path)
    assert info.value.file == str(path)


def test_custom_checks_and_backend_types_registered_before_loading_are_known() -> None:
    from tiered_router.backends.registry import BackendRegistry
    from tiered_router.gate import default_registry, register_check

    name = "test_policy_validation_no_todo"
    if name not in default_registry():
        register_check(name, lambda completion, turn: None)
    assert load_policy(checks(name)).gate.checks == [name]

    registry = BackendRegistry()
    seen: list[str] = []

    def check(backend: str, config: object) -> None:
        seen.append(backend)
        raise PolicyError("needs options.region", field=f"backends.{backend}.options.region")

    registry.register("cloud", lambda *a, **k: None, check=check)  # type: ignore[arg-type,return-value]
    config = load_policy(BASE).backends["fast"].model_copy(update={"type": "cloud"})
    with pytest.raises(PolicyError, match="needs options.region") as info:
        registry.check("fast", config)
    assert info.value.field == "backends.fast.options.region" and seen == ["fast"]
    registry.register("cloud", lambda *a, **k: None, replace=True)  # type: ignore[arg-type,return-value]
    registry.check("fast", config)  # the check went with the replaced registration


# -- the property: validate says ok exactly when Router() accepts the policy ---------------

GOOD: list[tuple[str, str]] = [
    ("base", BASE),
    ("regex", checks("non_empty", "regex: {pattern: '^ANSWER: \\pL+', flags: im}")),
    ("options", checks("repetition: {max_ratio: 0.3}", "max_chars: {limit: 8000}")),
    ("learned-shipped", BASE + "scoring: {type: learned, threshold: 0.55}\n"),
    ("heuristic-weights", BASE + "scoring:\n  type: heuristic\n  weights: {bias: -1.0}\n"),
    ("preset", BASE.replace("    model: large\n", "    preset: mercury-2\n")),
    ("dialect", fast("options: {dialect: {profile: mercury-2, max_stop: 2}}")),
    ("aliases", fast("extra_body: &x {a: 1}", "params: {extra: *x}")),
]


def _validate(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), ["validate", str(path), "--json"])
    return result.exit_code, result.stdout + result.stderr


def _router_accepts(text: str) -> bool:
    try:
        router = Router(Policy.model_validate(_yaml(text)))
        for name in router.policy.backends:
            router.backend(name)
    except PolicyError:
        return False
    except ValueError:  # build_scorer's own errors, when the policy skipped load_policy
        return False
    return True


def _yaml(text: str) -> object:
    import yaml

    return yaml.safe_load(text)


# Problems of the pieces the router builds (gate checks, scorer, backends), as opposed to the
# YAML, the variables and the size limits, which only the loader sees
BUILT = ("gate.", "scoring.", "backends.")
SCHEMA_VALID: list[Bad] = []
for _case in BAD:
    if _case.id in {
        "unset-variable",
        "malformed-variable",
        "duplicate-key",
        "alias-bomb-in-extra-body",
        "recursive-alias",
        "too-long",
    }:
        continue  # the loader's own business: interpolation, YAML keys, size limits
    try:
        Policy.model_validate(_yaml(_case.text))
    except Exception:  # noqa: BLE001 - YAML or schema errors: not a case for this property
        continue
    SCHEMA_VALID.append(_case)


def test_the_property_covers_the_checks_beyond_the_schema() -> None:
    # gate, scorer and backend problems that the schema alone lets through
    assert len(SCHEMA_VALID) >= 15, [c.id for c in SCHEMA_VALID]
    assert all((c.field or "").startswith(BUILT) for c in SCHEMA_VALID)


@pytest.mark.parametrize(
    ("name", "text", "ok"),
    [(n, t, True) for n, t in GOOD] + [(c.id, c.text, False) for c in SCHEMA_VALID],
    ids=[n for n, _ in GOOD] + [c.id for c in SCHEMA_VALID],
)
def test_validate_ok_exactly_when_router_accepts(
    name: str, text: str, ok: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("INCEPTION_API_KEY", "sk-test")
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    code, out = _validate(path)
    assert (code == 0) is ok, out
    # a schema-only policy given straight to Router() (and its backends built) agrees
    assert _router_accepts(text) is ok
    if ok:
        assert json.loads(out)["ok"] is True
    else:
        assert "Traceback" not in out and out.startswith(f"{path}:")


def test_a_private_check_registry_is_used_for_the_names() -> None:
    from tiered_router.gate import default_registry

    registry = default_registry().copy()
    registry.register("test_private_only", lambda completion, turn: None)
    text = checks("non_empty", "test_private_only")
    with pytest.raises(PolicyError, match="unknown check 'test_private_only'"):
        load_policy(text)
    assert load_policy(text, check_registry=registry).gate.checks[1] == "test_private_only"


def test_load_policy_is_public_at_the_top_and_in_the_schema_module() -> None:
    import tiered_router
    import tiered_router.policy as schema

    assert tiered_router.load_policy is schema.load_policy is load_policy
    assert Policy.from_yaml(BASE).tiers.frontier == "big"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        schema.nothing_here  # noqa: B018 - the attribute access is the test


def test_the_cli_without_its_extra_names_the_extra() -> None:
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['typer'] = None\n"
        "from tiered_router.cli import main\n"
        "main(['validate', 'x.yaml'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "tiered-router: the tiered-router command line needs 'typer', from the cli extra: "
        'pip install ".[cli]"'
    )


def test_writing_a_threshold_without_ruamel_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from tiered_router.evaluation.calibration import write_threshold

    path = tmp_path / "policy.yaml"
    path.write_text(BASE, encoding="utf-8")
    monkeypatch.setitem(sys.modules, "ruamel.yaml", None)
    with pytest.raises(ImportError, match=r'pip install "\.\[cli\]"'):
        write_threshold(path, 0.4)
    assert path.read_text(encoding="utf-8") == BASE


def test_main_without_the_cli_extra_exits_1_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from tiered_router.cli import main

    monkeypatch.setitem(sys.modules, "typer", None)
    with pytest.raises(SystemExit) as info:
        main(["validate", "policy.yaml"])
    assert info.value.code == 1
    assert 'pip install ".[cli]"' in capsys.readouterr().err
