"""The quality monitor (``monitor:``) through the public API, over real HTTP.

A scripted OpenAI-compatible server on 127.0.0.1 serves both tiers; the fast model's calls
are right or wrong by the turn, the frontier's always right. The monitor's sampler is
injected (``router.monitor.sample``) where a test needs to say which turns are shadowed or
explore.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from routerkit import make_policy, tracked

from tiered_router import JSONLSink, MemorySink, PolicyError, Router, Turn, load_policy
from tiered_router.monitor import compare_answers, turn_kind
from tiered_router.state import MemoryStateStore, MonitorRules, perfect_needs, wilson_lower
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.turn import Completion, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MONITOR = {
    "shadow_rate": 1.0,
    "target": 0.8,
    "confidence": 0.95,
    "enforce": True,
    "window": 20,
    "min_compared": 5,
    "explore": 1e-6,  # practically never: a test picks explorers with its sampler
    "refresh_s": 0,
}


def weather_turn(i: int | str, **kw: Any) -> Turn:
    return Turn(
        [{"role": "user", "content": f"I am in Lyon, flying from Paris. Weather here? ({i})"}],
        tools=TOOLS,
        id=str(i),
        **kw,
    )


def call(city: str) -> Reply:
    return Reply.tool_calls([("get_weather", {"city": city})])


def city_of(completion: Completion) -> str:
    return str(json.loads(completion.tool_calls[0].arguments)["city"])


def monitored(server: ScriptedServer, *, sinks: Any = (), **monitor: Any) -> Router:
    policy = make_policy(server, retries=(0, 0), monitor={**MONITOR, **monitor})
    policy["backends"]["frontier"]["timeout_s"] = 2.0
    return tracked(Router(policy, sinks=sinks))


def answer_by_turn(server: ScriptedServer, wrong: set[str]) -> None:
    """Fast answers Paris (wrong) for the turn ids in ``wrong``, Lyon otherwise."""

    def reply(body: dict[str, Any]) -> Reply:
        text = body["messages"][-1]["content"]
        turn_id = text.rsplit("(", 1)[1].rstrip(")?")
        if body["model"] == "fast-model" and turn_id in wrong:
            return call("Paris")
        return call("Lyon")

    server.default = reply


# -- the statistic and the schema ------------------------------------------------------------


def test_wilson_lower_bound_values() -> None:
    assert wilson_lower(0, 0, 1.645) == 0.0
    assert wilson_lower(100, 100, 1.6448536269514722) == pytest.approx(100 / (100 + 2.7055), 1e-4)
    assert wilson_lower(97, 100, 1.6448536269514722) == pytest.approx(0.9273, abs=1e-4)
    assert perfect_needs(0.95, 1.6448536269514722) == 52  # 52/54.7 >= 0.95 > 51/53.7
    assert wilson_lower(52, 52, 1.6448536269514722) >= 0.95 > wilson_lower(51, 51, 1.64485)


def test_the_window_slides_and_says_which_record_changed_the_state() -> None:
    store = MemoryStateStore()
    rules = MonitorRules(window=20, min_compared=11, target=0.8, enforce=True)
    snaps = [store.monitor_record("tools", True, rules=rules) for _ in range(25)]
    assert snaps[-1].compared == 20 and snaps[-1].matched == 20 and snaps[-1].total == 25
    changed = [store.monitor_record("tools", False, rules=rules) for _ in range(4)]
    assert [s.changed for s in changed] == [False, True, False, False]  # 18/20: 0.738 < 0.8
    assert changed[-1].state == "enforcing" and changed[-1].matched == 16
    assert store.monitor_snapshot("tools", rules=rules).state == "enforcing"


def test_policy_errors_name_file_line_and_field(tmp_path: Path, server: ScriptedServer) -> None:
    path = tmp_path / "p.yaml"
    text = json.dumps(make_policy(server), indent=1)
    path.write_text(
        text[: text.rindex("}")] + ',\n"monitor": {"target": 0.99,\n "window": 100}\n}\n'
    )
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    message = str(err.value)
    assert "monitor.window" in message and "at least 268" in message
    assert f"{path}:" in message
    with pytest.raises(PolicyError, match=r"monitor\.kinds\[0\]"):
        load_policy({**make_policy(server), "monitor": {"kinds": ["pros"]}})


@pytest.mark.parametrize(
    ("section", "line", "field", "says"),
    [
        # target 1: the target's line, not a window the file does not set
        ("  shadow_rate: 0.05\n  target: 1.0\n", 3, "monitor.target", "must be below 1"),
        # the default window too small for the target: blame the target the file sets
        ("  target: 0.999\n", 2, "monitor.target", "(the default window)"),
        # enforcing with no explore share would never relax
        ("  enforce: true\n  explore: 0\n", 3, "monitor.explore", "never relaxes"),
    ],
)
def test_a_monitor_that_could_never_judge_or_relax_is_refused_at_its_line(
    tmp_path: Path, server: ScriptedServer, section: str, line: int, field: str, says: str
) -> None:
    import yaml

    head = yaml.safe_dump(make_policy(server), sort_keys=False)
    path = tmp_path / "p.yaml"
    path.write_text(head + "monitor:\n" + section, encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    at = head.count("\n") + line
    assert str(err.value).startswith(f"{path}:{at}: {field}: "), str(err.value)
    assert says in str(err.value)
    assert "window" not in str(err.value).split(":", 3)[2]  # the field named is the culprit


def test_a_question_with_its_options_on_one_line_is_compared(server: ScriptedServer) -> None:
    # the default kinds (tools, json, final) shadow it; the fast answer (B) is compared
    router = monitored(server, kinds=["tools", "json", "final"])
    server.default = lambda body: Reply.text(
        "The answer is (B)." if body["model"] == "fast-model" else "(B)"
    )
    prompt = "Which is a prime number? (A) 4 (B) 7 (C) 9 (D) 12"
    result = router.complete(Turn([{"role": "user", "content": prompt}], id="mc"))
    router.drain_shadows()
    assert result.tier == "fast" and result.shadowed
    assert router.quality()["final"].shadow_calls == {"matched": 1}


def test_kinds_and_comparisons() -> None:
    tools_turn = weather_turn(1)
    assert turn_kind(tools_turn) == "tools"
    assert turn_kind(Turn([{"role": "user", "content": "hi"}])) == "prose"
    assert turn_kind(Turn([{"role": "user", "content": "What is 2+2? The answer is"}])) == "final"
    fmt = {"type": "json_object"}
    assert turn_kind(Turn([{"role": "user", "content": "x"}], response_format=fmt)) == "json"
    lyon = Completion(
        tool_calls=(ToolCall(id="a", name="get_weather", arguments='{"city":"Lyon"}'),)
    )
    lyon2 = Completion(
        tool_calls=(ToolCall(id="b", name="get_weather", arguments='{ "city": "Lyon" }'),)
    )
    paris = Completion(
        tool_calls=(ToolCall(id="c", name="get_weather", arguments='{"city":"Paris"}'),)
    )
    assert compare_answers(lyon, lyon2, tools_turn) == "matched"
    assert compare_answers(lyon, paris, tools_turn) == "mismatched"
    assert compare_answers(lyon, Completion(text="It is sunny."), tools_turn) == "mismatched"
    both_prose = compare_answers(Completion(text="Sunny."), Completion(text="Sunny."), tools_turn)
    assert both_prose == "not_comparable"  # never a match
    prose = Turn([{"role": "user", "content": "hi"}])
    assert compare_answers(Completion(text="hi"), Completion(text="hi"), prose) == "not_comparable"


# -- drift, enforcement, recovery ------------------------------------------------------------


@pytest.mark.anyio
async def test_drift_enforces_then_recovery_relaxes(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemorySink()
    router = monitored(server, sinks=[sink])
    assert router.monitor is not None
    router.monitor.sample = lambda key, rate: (
        key.startswith("monitor.shadow") or key.split("|")[1].startswith("x")
    )
    wrong = {"w0"}
    answer_by_turn(server, wrong)
    caplog.set_level(logging.WARNING, logger="tiered_router.monitor")
    for i in range(15):  # right: the kind is judged ok once it has perfect_needs comparisons
        result = await router.acomplete(weather_turn(f"r{i}"))
        assert result.tier == "fast" and result.shadowed
        await router.adrain_shadows()
    q = router.quality()["tools"]
    assert (q.compared, q.matched, q.state) == (15, 15, "ok") and q.lower_bound >= 0.8
    for turn_id in sorted(wrong):  # the same wrong call: accepted fast, caught by the shadow
        result = await router.acomplete(weather_turn(turn_id))
        assert city_of(result.completion) == "Paris" and result.tier == "fast"
        await router.adrain_shadows()
    q = router.quality()["tools"]  # 15 of 16: bound 0.76
    assert q.state == "enforcing" and q.lower_bound < 0.8 and (q.compared, q.matched) == (16, 15)
    tightened = await router.acomplete(weather_turn("w-next"))
    assert tightened.tier == "frontier" and tightened.decision.rule == "monitor"
    assert city_of(tightened.completion) == "Lyon" and not tightened.shadowed
    assert "bound" in tightened.decision.reasons[0]
    explored = 0
    while router.quality()["tools"].state == "enforcing" and explored < 30:
        # explorers go fast and are compared: the fast model is right again
        explorer = await router.acomplete(weather_turn(f"x{explored}"))
        assert explorer.decision.rule == "monitor.explore" and explorer.tier == "fast"
        assert explorer.shadowed
        await router.adrain_shadows()
        explored += 1
    q = router.quality()["tools"]  # 19 of 20 (w0 still in the window): bound 0.804
    assert explored == 4 and q.state == "ok" and (q.compared, q.matched) == (20, 19)
    back = await router.acomplete(weather_turn("after"))
    assert back.tier == "fast" and back.decision.rule != "monitor"
    await router.adrain_shadows()
    changes = [r.getMessage() for r in caplog.records if "->" in r.getMessage()]
    assert len(changes) == 2 and "ok -> enforcing" in changes[0]
    assert "enforcing -> ok" in changes[1]
    traced = [t.metadata["monitor"].get("change") for t in sink.traces if "monitor" in t.metadata]
    assert [c for c in traced if c] == ["ok->enforcing", "enforcing->ok"]
    shadows = [t for t in sink.traces if t.decision.rule == "monitor.shadow"]
    assert all(t.tier == "frontier" and t.metadata["shadow"] is True for t in shadows)


@pytest.mark.anyio
async def test_tighten_drafts_overrides_the_kinds_own_panel_and_its_one_draft_zone(
    server: ScriptedServer,
) -> None:
    """``tighten: drafts`` gives an enforcing kind the stricter panel, even where the policy's
    ``drafts.kinds`` entry (what calibrate wrote) gives that kind one draft, or a zone where
    it gets one; before, the entry won and the tightening did nothing."""
    sink = MemorySink()
    policy = make_policy(
        server,
        retries=(0, 0),
        monitor={**MONITOR, "tighten": "drafts", "tighten_drafts": {"k": 3, "min_agreement": 1.0}},
        drafts={"k": 1, "n": False, "panel_above": 1.0, "kinds": {"tools": {"k": 1}}},
    )
    router = tracked(Router(policy, sinks=[sink]))
    assert router.monitor is not None
    router.monitor.sample = lambda key, rate: key.startswith("monitor.shadow")
    answer_by_turn(server, {"w0"})
    for turn_id in [*(f"r{i}" for i in range(15)), "w0"]:
        result = await router.acomplete(weather_turn(turn_id))
        assert result.tier == "fast" and sink.traces[-1].panel is None  # one draft
        await router.adrain_shadows()
    assert router.quality()["tools"].state == "enforcing"
    tightened = await router.acomplete(weather_turn("w-next"))
    assert tightened.decision.rule == "monitor" and tightened.tier == "fast"
    trace = next(t for t in reversed(sink.traces) if t.turn_id == "w-next")
    assert trace.panel is not None and trace.panel["k"] == 3
    assert sum(a.role == "draft" for a in trace.attempts) == 3


def test_measure_only_never_changes_a_decision_sync(server: ScriptedServer) -> None:
    router = monitored(server, enforce=False)
    answer_by_turn(server, {f"w{i}" for i in range(20)})
    for i in range(20):
        result = router.complete(weather_turn(f"w{i}"))
        assert result.tier == "fast" and result.decision.rule != "monitor"
        router.drain_shadows()
    q = router.quality()["tools"]
    assert q.state == "below_target" and q.compared == 20 and q.matched == 0


# -- shadow failures, cancellation -----------------------------------------------------------


@pytest.mark.anyio
async def test_a_failing_shadow_call_changes_nothing_for_the_caller(
    server: ScriptedServer,
) -> None:
    sink = MemorySink()
    router = monitored(server, sinks=[sink])
    server.script([call("Lyon"), call("Lyon")], model="fast-model")
    server.script([Reply.status(500), Reply.slow(5.0, call("Lyon"))], model="frontier-model")
    first = await router.acomplete(weather_turn("a"))
    second = await router.acomplete(weather_turn("b"))
    assert city_of(first.completion) == city_of(second.completion) == "Lyon"
    assert first.tier == second.tier == "fast" and first.shadowed and second.shadowed
    assert first.trace.latency_s < 2.0 and second.trace.latency_s < 2.0
    await router.adrain_shadows()
    q = router.quality()["tools"]
    assert q.compared == 0 and q.shadow_calls == {"failed": 2}
    failed = [t for t in sink.traces if t.decision.rule == "monitor.shadow"]
    assert [t.metadata["monitor"]["outcome"] for t in failed] == ["failed", "failed"]
    assert {a.error["type"] for t in failed for a in t.attempts if a.error} == {
        "BackendStatusError",
        "BackendTimeout",
    }


@pytest.mark.anyio
async def test_a_cancelled_turn_is_not_shadowed(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = monitored(server, sinks=[sink])
    server.script([Reply.slow(5.0, call("Lyon"))], model="fast-model")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(router.acomplete(weather_turn("c")), 0.3)
    await router.adrain_shadows()
    assert [t.interrupted for t in sink.traces] == ["CancelledError"]
    assert router.quality()["tools"].shadow_calls == {}
    assert server.requests_for("frontier-model") == []


def test_shadow_calls_cut_short_are_counted_and_traced(server: ScriptedServer) -> None:
    # in flight (the loop's tasks cancelled, as at shutdown) and never started (asyncio.run
    # ending right after the turn): each is counted `cancelled` and its trace says so
    sink = MemorySink()
    router = monitored(server, sinks=[sink])
    server.default = lambda body: (
        call("Lyon") if body["model"] == "fast-model" else Reply.slow(5.0, call("Lyon"))
    )

    async def in_flight() -> None:
        for i in range(3):
            assert (await router.acomplete(weather_turn(f"f{i}"))).shadowed
        while len(server.requests_for("frontier-model")) < 3:
            await asyncio.sleep(0.01)
        for job in asyncio.all_tasks():
            if job is not asyncio.current_task():
                job.cancel()
        await asyncio.sleep(0.05)

    async def never_started() -> None:
        assert (await router.acomplete(weather_turn("n"))).shadowed

    asyncio.run(in_flight())
    asyncio.run(never_started())
    assert router.quality()["tools"].shadow_calls == {"cancelled": 4}
    shadows = [t for t in sink.traces if t.metadata.get("shadow")]
    assert len(shadows) == 4  # each emitted once
    assert {t.metadata["monitor"]["outcome"] for t in shadows} == {"cancelled"}
    assert {t.interrupted for t in shadows} == {"CancelledError"}
    assert len(server.requests_for("frontier-model")) == 3  # the last one never started


# -- concurrency, tasks, streams -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("n", [32, 64])
async def test_concurrent_turns_are_each_compared_once(server: ScriptedServer, n: int) -> None:
    router = monitored(server, window=100)
    wrong = {f"t{i}" for i in range(0, n, 8)}
    answer_by_turn(server, wrong)
    results = await asyncio.gather(*(router.acomplete(weather_turn(f"t{i}")) for i in range(n)))
    assert all(r.tier == "fast" and r.shadowed for r in results)
    await router.adrain_shadows()
    q = router.quality()["tools"]
    assert (q.compared, q.matched) == (n, n - len(wrong))
    assert len(server.requests_for("frontier-model")) == n


def test_task_budgets_count_shadow_calls(server: ScriptedServer) -> None:
    router = monitored(server)
    server.default = call("Lyon")
    with router.task() as task:
        router.complete(weather_turn("t1"))
        router.drain_shadows()
    turn_costs = sum(t.cost for t in task.traces)
    assert task.steps == 1
    assert task.cost > turn_costs > 0  # the frontier shadow call is in the budget


@pytest.mark.anyio
async def test_streams_are_shadowed(server: ScriptedServer) -> None:
    router = monitored(server)
    server.default = call("Lyon")
    stream = router.astream(weather_turn("s1"))
    async for _ in stream:
        pass
    assert stream.result.shadowed and stream.result.tier == "fast"
    await router.adrain_shadows()
    assert router.quality()["tools"].compared == 1


def test_without_monitor_nothing_changes(server: ScriptedServer) -> None:
    router = tracked(Router(make_policy(server, retries=(0, 0))))
    server.default = call("Lyon")
    result = router.complete(weather_turn("n1"))
    router.drain_shadows()
    assert router.monitor is None and router.quality() == {} and not result.shadowed
    assert server.requests_for("frontier-model") == []


# -- the command line ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_monitor_command_prints_the_figures_over_time(
    server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("typer")
    from tiered_router.cli import main

    path = tmp_path / "traces.jsonl"
    router = monitored(server, sinks=[JSONLSink(path)])
    answer_by_turn(server, {f"w{i}" for i in range(8)})
    for turn_id in [*(f"r{i}" for i in range(12)), *(f"w{i}" for i in range(8))]:
        await router.acomplete(weather_turn(turn_id))
        await router.adrain_shadows()
    report = tmp_path / "monitor.html"
    with pytest.raises(SystemExit) as done:
        main(["monitor", str(path), "--every", "10", "--report", str(report)])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "shadow calls" in out and "enforcing" in out and "ok->enforcing" in out
    assert 'id="monitor-bound"' in report.read_text()
    with pytest.raises(SystemExit) as missing:
        main(["monitor", str(tmp_path / "missing.jsonl")])
    assert missing.value.code == 1


def test_the_documented_section_loads(server: ScriptedServer) -> None:
    import re

    import yaml

    page = (Path(__file__).resolve().parents[1] / "docs" / "monitor.md").read_text()
    block = re.search(r"```yaml\n(monitor:.*?)```", page, re.S)
    assert block is not None
    section = yaml.safe_load(block.group(1))["monitor"]
    policy = load_policy({**make_policy(server), "monitor": section})
    assert policy.monitor is not None and policy.monitor.window == 500
