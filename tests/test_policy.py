from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml

from tiered_router.exceptions import PolicyError
from tiered_router.policy import BackendConfig, Policy, Tiers, load_policy

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
"""A valid policy; tests append sections to it (its last line is line 8)."""

SECRET = "sk-very-secret-0123456789"


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth line of ``text`` that contains ``needle``."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[nth - 1]


def problems_of(source: object, **kw: object) -> list[tuple[int | None, str | None, str]]:
    with pytest.raises(PolicyError) as info:
        load_policy(source, **kw)  # type: ignore[arg-type]
    return list(info.value.problems)


def only_problem(source: object, **kw: object) -> tuple[int | None, str | None, str]:
    problems = problems_of(source, **kw)
    assert len(problems) == 1, problems
    return problems[0]


# -- sources ----------------------------------------------------------------------------------


def test_loads_yaml_text() -> None:
    policy = load_policy(BASE)
    assert policy.tiers == Tiers(fast="fast", frontier="big")
    assert policy.backends["fast"].kind == "diffusion"
    assert policy.scoring.threshold == 0.58895  # the default transfer scorer's threshold


def test_loads_str_path_and_pathlike(tmp_path: Path) -> None:
    file = tmp_path / "policy.yaml"
    file.write_text(BASE, encoding="utf-8")
    assert load_policy(str(file)) == load_policy(file) == load_policy(BASE)


def test_loads_existing_file_without_yaml_suffix(tmp_path: Path) -> None:
    file = tmp_path / "policy.conf"
    file.write_text(BASE, encoding="utf-8")
    assert load_policy(str(file)).backends["big"].model == "large"


def test_loads_mapping_and_returns_policy_as_is() -> None:
    data = {
        "version": 1,
        "backends": {"a": {"model": "m"}, "b": {"model": "n"}},
        "tiers": {"fast": "a", "frontier": "b"},
    }
    policy = load_policy(data)
    assert policy.backends["a"].model == "m"
    assert load_policy(policy) is policy


def test_from_yaml_is_load_policy(tmp_path: Path) -> None:
    file = tmp_path / "p.yml"
    file.write_text("version: 1\nbackends: {a: {model: '${M}'}}\ntiers: {fast: a, frontier: a}\n")
    policy = Policy.from_yaml(file, env={"M": "mercury-2"})
    assert policy.backends["a"].model == "mercury-2"


def test_policy_built_in_python() -> None:
    policy = Policy(
        backends={"f": BackendConfig(preset="mercury-2"), "b": BackendConfig(model="gpt-5.2")},
        tiers=Tiers(fast="f", frontier="b"),
    )
    assert load_policy(policy) is policy
    assert policy.backend_for("frontier") == "b"


def test_unsupported_source_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="int"):
        load_policy(42)  # type: ignore[arg-type]


# -- interpolation ----------------------------------------------------------------------------


def _with_key(value: str) -> str:
    return BASE.replace("    model: large\n", f"    model: large\n    base_url: {value}\n")


def test_interpolates_whole_and_partial_strings() -> None:
    text = _with_key('"https://${HOST}:${PORT}/v1"')
    policy = load_policy(text, env={"HOST": "example.test", "PORT": "8443"})
    assert policy.backends["big"].base_url == "https://example.test:8443/v1"


def test_default_used_when_unset_or_empty_and_ignored_when_set() -> None:
    text = _with_key("${URL:-http://127.0.0.1:30000/v1}")
    assert load_policy(text, env={}).backends["big"].base_url == "http://127.0.0.1:30000/v1"
    assert load_policy(text, env={"URL": ""}).backends["big"].base_url == (
        "http://127.0.0.1:30000/v1"
    )
    assert load_policy(text, env={"URL": "http://h/v1"}).backends["big"].base_url == "http://h/v1"


def test_empty_default_and_empty_value() -> None:
    assert load_policy(_with_key('"x${A:-}y"'), env={}).backends["big"].base_url == "xy"
    assert load_policy(_with_key('"x${A}y"'), env={"A": ""}).backends["big"].base_url == "xy"


def test_dollar_dollar_brace_escapes_a_literal() -> None:
    text = _with_key('"$${NOT_A_VAR} and $$ and $5 and ${A}"')
    url = load_policy(text, env={"A": "a"}).backends["big"].base_url
    assert url == "${NOT_A_VAR} and $$ and $5 and a"


def test_interpolated_strings_are_converted_by_the_schema() -> None:
    text = BASE.replace("    model: large\n", "    model: large\n    timeout_s: ${T:-12.5}\n")
    text += "escalation: {on_gate_failure: '${ESC}'}\n"
    policy = load_policy(text, env={"ESC": "false"})
    assert policy.backends["big"].timeout_s == 12.5
    assert policy.escalation.on_gate_failure is False


def test_values_are_not_interpolated_twice() -> None:
    url = load_policy(_with_key("${A}"), env={"A": "${B}", "B": "no"}).backends["big"].base_url
    assert url == "${B}"


def test_unset_variable_names_file_line_field_and_variable(tmp_path: Path) -> None:
    file = tmp_path / "policy.yaml"
    text = _with_key('"https://${MISSING_HOST}/v1"')
    file.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(file, env={})
    exc = info.value
    assert exc.file == str(file)
    assert exc.line == line_of(text, "base_url") == 8
    assert exc.field == "backends.big.base_url"
    assert "MISSING_HOST" in str(exc)
    assert str(exc).startswith(f"{file}:8: backends.big.base_url: environment variable")


def test_every_unset_variable_is_reported() -> None:
    text = BASE.replace("model: small", "model: ${M1}").replace("model: large", "model: ${M2}")
    problems = problems_of(text, env={})
    assert [(p[0], p[1]) for p in problems] == [
        (4, "backends.fast.model"),
        (7, "backends.big.model"),
    ]
    assert "M1" in problems[0][2] and "M2" in problems[1][2]


@pytest.mark.parametrize("bad", ["${1X}", "${X-d}", "${X", "${}", "${X:?err}"])
def test_malformed_reference(bad: str) -> None:
    line, field, message = only_problem(_with_key(f'"{bad}"'), env={"X": "x"})
    assert (line, field) == (8, "backends.big.base_url")
    assert "malformed" in message


def test_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _with_key("${TR_TEST_URL}")
    monkeypatch.delenv("TR_TEST_URL", raising=False)
    with pytest.raises(PolicyError, match="TR_TEST_URL"):
        load_policy(text)
    monkeypatch.setenv("TR_TEST_URL", "http://set-later/v1")
    assert load_policy(text).backends["big"].base_url == "http://set-later/v1"


def test_mapping_sources_are_interpolated_without_being_changed() -> None:
    data: dict[str, Any] = {
        "backends": {"a": {"model": "${M}", "api_key": "${K}"}},
        "tiers": {"fast": "a", "frontier": "a"},
    }
    policy = load_policy(data, env={"M": "m", "K": SECRET})
    assert policy.backends["a"].model == "m"
    assert policy.backends["a"].api_key is not None
    assert policy.backends["a"].api_key.get_secret_value() == SECRET
    assert data["backends"]["a"]["model"] == "${M}"


def test_mapping_source_errors_have_a_field_but_no_line() -> None:
    data = {
        "backends": {"a": {"model": "m", "timeout_s": 0}},
        "tiers": {"fast": "a", "frontier": "a"},
    }
    with pytest.raises(PolicyError) as info:
        load_policy(data)
    assert info.value.file == "<dict>"
    assert info.value.problems[0][:2] == (None, "backends.a.timeout_s")
    assert (
        str(info.value) == "<dict>: backends.a.timeout_s: Input should be greater than 0 (input: 0)"
    )


# -- validation errors, each with its line ----------------------------------------------------


def test_error_format_names_file_line_and_field(tmp_path: Path) -> None:
    text = BASE.replace("    model: large\n", "    model: large\n    timeout_s: -1\n")
    file = tmp_path / "policy.yaml"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(file)
    assert str(info.value) == (
        f"{file}:8: backends.big.timeout_s: Input should be greater than 0 (input: -1)"
    )
    assert (info.value.line, info.value.field) == (8, "backends.big.timeout_s")


def test_text_source_is_named_string() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(BASE + "scoring: {threshold: 2}\n")
    assert info.value.file == "<string>"
    assert str(info.value).startswith("<string>:9: scoring.threshold: ")


def test_unknown_top_level_key_suggests_a_name() -> None:
    assert only_problem(BASE + "escalaton: {}\n") == (
        9,
        "escalaton",
        "unknown key; did you mean 'escalation'?",
    )


def test_unknown_nested_key_lists_known_keys_when_nothing_is_close() -> None:
    line, field, message = only_problem(BASE + "escalation:\n  zzz: 1\n")
    assert (line, field) == (10, "escalation.zzz")
    assert "expected one of: on_gate_failure, on_backend_error, when_frontier_fails_gate" in message


def test_unknown_key_in_a_backend_and_in_a_rule_condition() -> None:
    text = BASE.replace("kind: diffusion", "kind: diffusion\n    timout_s: 3")
    text += "rules:\n  - name: r\n    when: {final: true, min_tool: 3}\n    tier: frontier\n"
    problems = problems_of(text)
    assert problems == [
        (6, "backends.fast.timout_s", "unknown key; did you mean 'timeout_s'?"),
        (12, "rules[0].when.min_tool", "unknown key; did you mean 'min_tools'?"),
    ]


def test_wrong_types() -> None:
    text = (
        BASE
        + "scoring:\n  type: heuristic\n  threshold: high\nescalation:\n  on_gate_failure: maybe\n"
    )
    problems = problems_of(text)
    assert [(p[0], p[1]) for p in problems] == [
        (11, "scoring.threshold"),
        (13, "escalation.on_gate_failure"),
    ]
    assert "valid number" in problems[0][2] and "'high'" in problems[0][2]
    assert "valid boolean" in problems[1][2]


def test_section_of_the_wrong_shape() -> None:
    line, field, message = only_problem(BASE + "rules: {name: x}\n")
    assert (line, field) == (9, "rules")
    assert "valid list" in message


@pytest.mark.parametrize(
    ("value", "word"), [("1.5", "less than or equal to 1"), ("-0.1", "greater")]
)
def test_threshold_outside_unit_interval(value: str, word: str) -> None:
    line, field, message = only_problem(BASE + f"scoring:\n  threshold: {value}\n")
    assert (line, field) == (10, "scoring.threshold")
    assert word in message


def test_version_must_be_1() -> None:
    line, field, message = only_problem(BASE.replace("version: 1", "version: 2"))
    assert (line, field) == (1, "version")
    assert "Input should be 1" in message


def test_tier_naming_a_missing_backend() -> None:
    line, field, message = only_problem(BASE.replace("frontier: big}", "frontier: bigg}"))
    assert (line, field) == (8, "tiers.frontier")
    assert message == "names backend 'bigg', which is not defined; did you mean 'big'?"


def test_both_tiers_naming_missing_backends_are_both_reported() -> None:
    text = BASE.replace("tiers: {fast: fast, frontier: big}", "tiers:\n  fast: x\n  frontier: y")
    problems = problems_of(text)
    assert [(p[0], p[1]) for p in problems] == [(9, "tiers.fast"), (10, "tiers.frontier")]
    assert "expected one of: big, fast" in problems[0][2]


def test_rule_naming_an_unknown_tier() -> None:
    text = BASE + "rules:\n  - {name: r, when: {}, tier: medium}\n"
    line, field, message = only_problem(text)
    assert (line, field) == (10, "rules[0].tier")
    assert "'fast' or 'frontier'" in message and "'medium'" in message


def test_duplicate_rule_names() -> None:
    text = BASE + (
        "rules:\n"
        "  - {name: r, when: {final: true}, tier: frontier}\n"
        "  - {name: r, when: {}, tier: fast}\n"
    )
    assert only_problem(text) == (11, "rules[1].name", "duplicate rule name 'r' (also rules[0])")


def test_empty_backends() -> None:
    text = "version: 1\nbackends: {}\ntiers: {fast: a, frontier: a}\n"
    assert only_problem(text) == (2, "backends", "define at least one backend")


def test_missing_key_points_at_the_parent_mapping() -> None:
    assert only_problem("version: 1\nbackends: {a: {model: m}}\n") == (
        1,
        "tiers",
        "required key is missing",
    )
    text = BASE + "rules:\n  - name: r\n    tier: fast\n"
    assert only_problem(text) == (10, "rules[0].when", "required key is missing")


def test_openai_backend_needs_a_model_or_a_preset() -> None:
    text = BASE.replace("    model: large\n", "    type: openai\n    timeout_s: 5\n")
    assert only_problem(text) == (
        6,
        "backends.big.model",
        "an openai backend needs `model` (or a `preset` that names one)",
    )
    with_preset = BASE.replace("    model: large\n", "    preset: mercury-2\n")
    assert load_policy(with_preset).backends["big"].model is None
    replay = BASE.replace("    model: large\n", "    type: replay\n    options: {data: x.jsonl}\n")
    assert load_policy(replay).backends["big"].type == "replay"


def test_gate_check_mapping_with_more_than_one_key() -> None:
    text = BASE + (
        "gate:\n"
        "  checks:\n"
        "    - non_empty\n"
        "    - {repetition: {max_ratio: 0.5}, regex: {pattern: x}}\n"
    )
    line, field, message = only_problem(text)
    assert (line, field) == (12, "gate.checks[1]")
    assert "exactly one key" in message and "repetition, regex" in message


def test_gate_check_shapes() -> None:
    text = BASE + (
        "gate:\n"
        "  checks:\n"
        "    - 5\n"
        "    - regex: pattern\n"
        "    - repetition:\n"
        "    - {max_chars: {limit: 10}}\n"
    )
    problems = problems_of(text)
    assert problems == [
        (11, "gate.checks[0]", "a check is a name or a one-key mapping {name: {options}}"),
        (12, "gate.checks[1].regex", "a check's options must be a mapping"),
    ]
    fixed = text.replace("    - 5\n", "").replace("    - regex: pattern\n", "")
    assert load_policy(fixed).gate.checks == [{"repetition": {}}, {"max_chars": {"limit": 10}}]


def test_every_problem_is_collected_and_sorted_by_line() -> None:
    text = (
        "version: 1\n"
        "backends:\n"
        "  a:\n"
        "    model: m\n"
        "    max_retries: 99\n"
        "    kind: autoregresive\n"
        "    price: {input_per_mtok: -1}\n"
        "tiers: {fast: a, frontier: a}\n"
        "scoring: {threshold: 3}\n"
        "gate: {checks: [{a: {}, b: {}}]}\n"
        "bogus: 1\n"
    )
    problems = problems_of(text)
    assert [(p[0], p[1]) for p in problems] == [
        (5, "backends.a.max_retries"),
        (6, "backends.a.kind"),
        (7, "backends.a.price.input_per_mtok"),
        (9, "scoring.threshold"),
        (10, "gate.checks[0]"),
        (11, "bogus"),
    ]
    with pytest.raises(PolicyError) as info:
        load_policy(text)
    assert len(str(info.value).splitlines()) == 6
    assert (info.value.line, info.value.field) == (5, "backends.a.max_retries")


def test_anchor_merge_keys_point_at_their_lines() -> None:
    text = (
        "version: 1\n"
        "backends:\n"
        "  a: &common\n"
        "    model: m\n"
        "    timeout_s: 0\n"
        "  b:\n"
        "    <<: *common\n"
        "    model: n\n"
        "tiers: {fast: a, frontier: b}\n"
    )
    problems = problems_of(text)
    assert [(p[0], p[1]) for p in problems] == [
        (5, "backends.a.timeout_s"),
        (5, "backends.b.timeout_s"),
    ]
    fixed = load_policy(text.replace("timeout_s: 0", "timeout_s: 9"))
    assert fixed.backends["b"].model == "n" and fixed.backends["b"].timeout_s == 9


def test_aliases_point_at_the_alias_and_are_interpolated_once() -> None:
    text = (
        "version: 1\n"
        "backends:\n"
        "  a: &common\n"
        "    model: ${MODEL}\n"
        "    timeout_s: 0\n"
        "  c: *common\n"
        "tiers: {fast: a, frontier: c}\n"
        "rules: &loop [*loop]\n"
    )
    # a recursive alias is refused before anything else is checked: nothing may recurse over it
    assert only_problem(text, env={"MODEL": "m"}) == (
        8,
        "rules[0]",
        "a value contains itself (a recursive YAML alias)",
    )
    problems = problems_of(text.replace(" &loop [*loop]", " []"), env={"MODEL": "m"})
    assert [(p[0], p[1]) for p in problems] == [
        (5, "backends.a.timeout_s"),
        (6, "backends.c.timeout_s"),
    ]
    ok = load_policy(
        text.replace("timeout_s: 0", "timeout_s: 1").replace(" &loop [*loop]", " []"),
        env={"MODEL": "m"},
    )
    assert ok.backends["c"] == ok.backends["a"]
    assert ok.backends["c"].model == "m"


def test_unknown_keys_in_nested_and_optional_sections() -> None:
    text = BASE.replace(
        "kind: diffusion",
        "kind: diffusion\n    price: {input_per_mtk: 1}\n    latency: {ttfb_s: 1}",
    )
    text += "resilience:\n  breaker: {cooldown: 1}\n"
    assert problems_of(text) == [
        (6, "backends.fast.price.input_per_mtk", "unknown key; did you mean 'input_per_mtok'?"),
        (7, "backends.fast.latency.ttfb_s", "unknown key; did you mean 'ttft_s'?"),
        (12, "resilience.breaker.cooldown", "unknown key; did you mean 'cooldown_s'?"),
    ]


def test_gate_checks_must_be_a_list() -> None:
    line, field, message = only_problem(BASE + "gate:\n  checks: non_empty\n")
    assert (line, field) == (10, "gate.checks")
    assert "valid list" in message


def test_unset_variable_inside_a_list() -> None:
    text = BASE + "rules:\n  - name: r\n    when: {metadata: {team: '${TEAM}'}}\n    tier: fast\n"
    assert only_problem(text, env={}) == (
        11,
        "rules[0].when.metadata.team",
        "environment variable TEAM is not set (or write ${TEAM:-default})",
    )


# -- YAML and file errors ---------------------------------------------------------------------


def test_yaml_syntax_error_has_the_line_of_the_mark() -> None:
    text = BASE + "scoring:\n  threshold: [0.5\nrules: []\n"
    line, field, message = only_problem(text)
    assert line == 11 and field is None
    assert message.startswith("invalid YAML: ")


def test_unquoted_variable_in_a_flow_mapping_gets_a_hint() -> None:
    text = BASE.replace("    model: large\n", "    model: large\n    headers: {X-Key: ${K}}\n")
    line, _, message = only_problem(text, env={"K": "k"})
    assert line == 8
    assert "quote values that use ${VAR}" in message


def test_duplicate_keys_are_errors() -> None:
    text = BASE + "scoring: {threshold: 0.4}\nscoring: {threshold: 0.7}\n"
    assert only_problem(text) == (10, "scoring", "duplicate key 'scoring' (first at line 9)")
    nested = BASE.replace("    model: large\n", "    model: large\n    model: larger\n")
    assert only_problem(nested)[:2] == (8, "backends.big.model")


def test_unsafe_tags_are_refused() -> None:
    text = BASE + "scoring: !!python/object/apply:os.system ['echo pwned']\n"
    line, _, message = only_problem(text)
    assert line == 9
    assert "invalid YAML" in message and "python/object/apply" in message


def test_unreadable_characters_are_a_yaml_error_with_a_line() -> None:
    line, field, message = only_problem(BASE + "scoring: {threshold: 0.5}\n# bell \x07\n")
    assert (line, field) == (10, None)
    assert (
        message == "invalid YAML: unacceptable character #x0007: special characters are not allowed"
    )


def test_more_than_one_document() -> None:
    line, _, message = only_problem(BASE + "---\nversion: 1\n")
    assert line == 9
    assert message == (
        "invalid YAML: expected a single document in the stream, but found another document"
    )


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "a list"), ("42\n", "a number"), ("just text\n", "a string")]
)
def test_top_level_document_must_be_a_mapping(text: str, kind: str) -> None:
    assert only_problem(text) == (
        1,
        None,
        f"the policy must be a mapping (version, backends, tiers, ...), not {kind}",
    )


def test_empty_policy() -> None:
    assert only_problem("# nothing here\n") == (1, None, "the policy is empty")


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    for source in (missing, str(missing)):
        with pytest.raises(PolicyError) as info:
            load_policy(source)
        assert info.value.file == str(missing)
        assert str(info.value) == f"{missing}: no such policy file"


def test_bare_word_is_a_path() -> None:
    with pytest.raises(PolicyError, match="no such policy file"):
        load_policy("policy")


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(tmp_path)
    binary = tmp_path / "p.yaml"
    binary.write_bytes(b"version: 1\n\xff\xfe\n")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(binary)


# -- secrets ----------------------------------------------------------------------------------

_SECRET_POLICIES = [
    BASE.replace("model: large", "model: large\n    api_key: ${KEY}\n    timeout_s: -1"),
    BASE.replace("model: large", "model: large\n    api_kye: ${KEY}"),
    BASE.replace("model: large", "model: large\n    api_key: ${KEY}\n    api_key: ${KEY}"),
    BASE.replace(
        "model: large", "model: large\n    headers: {Authorization: 'Bearer ${KEY}', X: 1}"
    ),
    BASE.replace("model: large", "model: large\n    headers: ['${KEY}']"),
    BASE.replace("model: large", "model: large\n    api_key: ['${KEY}']"),
    BASE.replace("model: large", "model: large\n    api_key: ${KEY}\n    extra: ${KEY}"),
    BASE.replace("model: large", "model: ${KEY}\n    kind: ${KEY}"),
    BASE.replace("model: large", "model: large\n    timeout_s: ${KEY}\n    tools: ${KEY}"),
    BASE + "tiers2: ${KEY}\n",
    BASE + "rules:\n  - {name: '${KEY}', when: {}, tier: '${KEY}'}\n",
    BASE.replace("tiers: {fast: fast, frontier: big}", "tiers: {fast: '${KEY}', frontier: big}"),
    BASE.replace("model: large", "model: large\n    api_key: ${KEY} ${NOPE}"),
]


@pytest.mark.parametrize("text", _SECRET_POLICIES)
def test_errors_never_show_a_secret(text: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(text, env={"KEY": SECRET})
    exc = info.value
    rendered = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    for shown in (str(exc), repr(exc), rendered, repr(exc.problems)):
        assert SECRET not in shown
    assert exc.problems


def test_a_mistyped_secret_field_does_not_echo_its_input() -> None:
    text = BASE.replace("model: large", "model: large\n    api_key: 12345")
    line, field, message = only_problem(text)
    assert (line, field) == (8, "backends.big.api_key")
    assert "12345" not in message


def test_an_interpolated_value_is_shown_as_its_template() -> None:
    text = BASE.replace("model: large", "model: large\n    timeout_s: ${T}")
    line, field, message = only_problem(text, env={"T": "soon"})
    assert (line, field) == (8, "backends.big.timeout_s")
    assert "'${T}'" in message and "soon" not in message


def test_repr_and_str_of_a_policy_never_show_a_secret() -> None:
    text = BASE.replace(
        "model: large",
        "model: large\n    api_key: ${KEY}\n    headers: {Authorization: 'Bearer ${KEY}'}",
    )
    policy = load_policy(text, env={"KEY": SECRET})
    backend = policy.backends["big"]
    assert backend.api_key is not None and backend.api_key.get_secret_value() == SECRET
    assert backend.headers == {"Authorization": f"Bearer {SECRET}"}
    for shown in (repr(policy), str(policy), repr(backend), str(backend), f"{policy!r}"):
        assert SECRET not in shown
    assert "'big'" in repr(policy)


def _presets() -> object:
    presets = pytest.importorskip("tiered_router.backends.presets")
    if getattr(presets, "PRESETS", None) is None:
        pytest.skip("tiered_router.backends.presets has no PRESETS yet")
    return presets


def test_unknown_preset_is_reported_at_its_line() -> None:
    _presets()
    text = BASE.replace("    model: large\n", "    preset: mercury2\n    model: m\n")
    line, field, message = only_problem(text)
    assert (line, field) == (7, "backends.big.preset")
    presets = _presets()
    known = ", ".join(sorted(presets.PRESETS))  # type: ignore[attr-defined]
    assert message == f"unknown preset 'mercury2'; did you mean 'mercury-2'? (known: {known})"


def test_preset_without_a_default_model_needs_one() -> None:
    _presets()
    text = BASE.replace("    model: large\n", "    preset: openai\n")
    assert only_problem(text) == (
        6,
        "backends.big.model",
        "`model` is required: preset 'openai' has no default",
    )
    inferred = BASE.replace("    model: large\n", "    base_url: https://api.inceptionlabs.ai/v1\n")
    assert load_policy(inferred).backends["big"].model is None  # the preset supplies it later


# -- scoring weights against the heuristic scorer's features --------------------------------


def test_scoring_weights_must_name_heuristic_features() -> None:
    heuristic = pytest.importorskip("tiered_router.scoring.heuristic")
    names = getattr(heuristic, "FEATURE_NAMES", None)
    if names is None:
        pytest.skip("tiered_router.scoring.heuristic has no FEATURE_NAMES yet")
    good = sorted(names)[0]
    policy = load_policy(
        BASE + f"scoring:\n  type: heuristic\n  weights:\n    {good}: 0.25\n    bias: -2\n"
    )
    assert policy.scoring.weights == {good: 0.25, "bias": -2.0}
    text = (
        BASE
        + f"scoring:\n  type: heuristic\n  weights:\n    {good}: 0.25\n    not_a_feature_xyz: 1.0\n"
    )
    line, field, message = only_problem(text)
    assert (line, field) == (13, "scoring.weights.not_a_feature_xyz")
    assert message.startswith("unknown feature 'not_a_feature_xyz'")


# -- every policy in the examples and the docs loads ------------------------------------------

_FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_REQUIRED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _markdown_blocks() -> list[tuple[str, str]]:
    markdown = sorted((ROOT / "docs").rglob("*.md"))
    if (ROOT / "README.md").exists():
        markdown.append(ROOT / "README.md")
    blocks: list[tuple[str, str]] = []
    for path in markdown:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(ROOT)}:{line}", match.group(1)))
    return blocks


def _shipped_policies() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for folder in ("examples", "docs"):
        for path in sorted((ROOT / folder).rglob("*.y*ml")):
            if "deploy" in path.parts:  # compose and collector files, not policies
                continue
            found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    for name, block in _markdown_blocks():
        if re.search(r"^version:", block, re.MULTILINE):
            found.append((name, block))
    return found


def _doc_fragments() -> list[tuple[str, dict[str, Any]]]:
    """Docs YAML blocks that are whole top-level sections of a policy, without ``version``."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, block in _markdown_blocks():
        data = yaml.safe_load(block)
        if isinstance(data, dict) and data and "version" not in data:
            if set(data) <= set(Policy.model_fields):
                found.append((name, data))
    return found


_SHIPPED = _shipped_policies()


def _stand_in(name: str) -> str:
    """A value for a variable the docs leave to the reader (a Redis URL must look like one)."""
    if name == "REDIS_URL":
        return "redis://:test-password@test-redis:6379/0"
    return f"test-{name.lower()}"


def test_the_examples_are_found() -> None:
    names = {name for name, _ in _SHIPPED}
    assert {"examples/policy.yaml", "examples/local_diffusion.yaml"} <= names
    assert any(name.startswith("docs/policy.md:") for name in names)


@pytest.mark.parametrize("text", [text for _, text in _SHIPPED], ids=[n for n, _ in _SHIPPED])
def test_shipped_policy_loads(text: str) -> None:
    env = {name: _stand_in(name) for name in _REQUIRED_VAR.findall(text)}
    policy = load_policy(text, env=env)
    assert policy.version == 1
    assert policy.backend_for("fast") in policy.backends
    # every required variable was used, and no value leaks into the repr
    for value in env.values():
        assert value not in repr(policy)


_FRAGMENTS = _doc_fragments()


def test_doc_fragments_are_found() -> None:
    sections = {key for _, data in _FRAGMENTS for key in data}
    assert {"backends", "scoring", "rules", "gate", "escalation", "resilience"} <= sections


@pytest.mark.parametrize("data", [d for _, d in _FRAGMENTS], ids=[n for n, _ in _FRAGMENTS])
def test_doc_fragment_validates_inside_a_policy(
    data: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = data.get("scoring", {}).get("options", {}).get("path")
    if weights is not None:  # loading reads the learned scorer's weights file: provide it
        shipped = ROOT / "tiered_router" / "scoring" / "data" / "learned_default.json"
        (tmp_path / weights).write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
        monkeypatch.chdir(tmp_path)
    merged: dict[str, Any] = {
        "backends": {"a": {"model": "m"}},
        "tiers": {"fast": "a", "frontier": "a"},
        **data,
    }
    if "backends" in data and "tiers" not in data:
        first = next(iter(data["backends"]))
        merged["tiers"] = {"fast": first, "frontier": first}
    if "tiers" in data and "backends" not in data:
        merged["backends"] = {name: {"model": "m"} for name in data["tiers"].values()}
    env = {name: _stand_in(name) for name in _REQUIRED_VAR.findall(str(data))}
    policy = load_policy(merged, env=env)
    for key in data:
        assert key in policy.model_fields_set


def test_example_policies_say_what_the_docs_say() -> None:
    env = {"INCEPTION_API_KEY": SECRET, "OPENAI_API_KEY": "sk-o"}
    policy = load_policy(ROOT / "examples" / "policy.yaml", env=env)
    fast = policy.backends[policy.tiers.fast]
    assert (fast.base_url, fast.model, fast.kind) == (
        "https://api.inceptionlabs.ai/v1",
        "mercury-2",
        "diffusion",
    )
    assert (fast.price.input_per_mtok, fast.price.output_per_mtok) == (0.25, 0.75)
    assert fast.api_key is not None and fast.api_key.get_secret_value() == SECRET
    assert [r.name for r in policy.rules] == ["final-answer", "agent-step"]
    assert policy.backends[policy.tiers.frontier].kind == "autoregressive"

    local = load_policy(ROOT / "examples" / "local_diffusion.yaml", env={"OPENAI_API_KEY": "k"})
    backend = local.backends[local.tiers.fast]
    assert backend.base_url == "http://127.0.0.1:30000/v1"
    assert backend.tools is False
    assert backend.api_key is not None and backend.api_key.get_secret_value() == "none"
    assert backend.preset == "sglang" and backend.max_concurrency == 1 and not backend.extra_body
