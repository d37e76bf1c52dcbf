from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tiered_router import AllTiersFailed, MemorySink, PolicyError, Router, Turn, load_policy
from tiered_router.agent_signals import (
    agent_signals,
    annotate,
    is_tool_error,
    tool_call_signature,
)
from tiered_router.engine._context import CURRENT_TASK
from tiered_router.task import Task
from tiered_router.testing import Reply, ScriptedServer

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
    },
}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_policy(server: ScriptedServer, **task: Any) -> dict[str, Any]:
    backend = {
        "type": "openai",
        "base_url": server.base_url,
        "api_key": "sk-test",
        "max_retries": 0,
    }
    return {
        "version": 1,
        "backends": {
            "fast": {
                **backend,
                "model": "fast-model",
                "kind": "diffusion",
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
                "latency": {"ttft_s": 0.1, "tokens_per_s": 1000},
            },
            "frontier": {
                **backend,
                "model": "frontier-model",
                "price": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
                "latency": {"ttft_s": 1.0, "tokens_per_s": 50},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"threshold": 0.6},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
        "task": task,
    }


def router_for(
    server: ScriptedServer,
    *,
    sink: MemorySink | None = None,
    clock: Clock | None = None,
    **task: Any,
) -> Router:
    options: dict[str, Any] = {"sinks": [sink] if sink is not None else []}
    if clock is not None:
        options["clock"] = clock
    router = Router(make_policy(server, **task), **options)
    _OPEN.append(router)
    return router


_OPEN: list[Router] = []


@pytest.fixture(autouse=True)
def _close_routers() -> Iterator[None]:
    """Close the HTTP clients of every router a test built (async tests aclose their own)."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def easy(**kw: Any) -> Turn:
    return Turn([{"role": "user", "content": "Say hi."}], **kw)


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def looping_turn(result: str = "no results") -> Turn:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the population of Oslo."}]
    for i in range(2):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("search", {"q": "x"}, f"c{i}")],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
    return Turn(messages, tools=[SEARCH])


# -- agent signals (pure) ---------------------------------------------------------------------


def test_signals_of_a_fresh_request() -> None:
    s = agent_signals(Turn([{"role": "user", "content": "hi"}], tools=[SEARCH]))
    assert (s.step, s.after_tool_result, s.stalled, s.role) == (0, False, False, "plan")
    assert agent_signals(easy()).role == "answer"
    assert agent_signals(easy(final=True)).role == "answer"


def test_signals_count_steps_since_the_last_user_message() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [call("search", {"q": "a"}, "1")]},
        {"role": "tool", "tool_call_id": "1", "content": "found a"},
    ]
    s = agent_signals(Turn(messages, tools=[SEARCH]))
    assert s.step == 1
    assert s.after_tool_result is True and s.tool_results == 1
    assert s.role == "observe"
    assert s.repeated_calls == 1 and s.repeated_call is None and not s.stalled
    s2 = agent_signals(Turn(messages[:4], tools=[SEARCH], params={"tool_choice": "required"}))
    assert s2.role == "act"


def test_repeated_identical_tool_calls_are_a_stall() -> None:
    s = agent_signals(looping_turn())
    assert s.repeated_calls == 2
    assert s.repeated_call == 'search({"q":"x"})'
    assert s.stalled and "repeated 2 times" in s.stall_reason
    assert not agent_signals(looping_turn(), stall_repeated_calls=3).stalled


def test_repeated_tool_errors_are_a_stall() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i, q in enumerate(["a", "b"]):
        messages.append(
            {"role": "assistant", "content": None, "tool_calls": [call("search", {"q": q}, str(i))]}
        )
        messages.append({"role": "tool", "tool_call_id": str(i), "content": "Error: timeout"})
    s = agent_signals(Turn(messages, tools=[SEARCH]))
    assert s.tool_errors == 2 and s.repeated_calls == 1
    assert s.stalled and s.stall_reason == "2 tool errors in a row"
    messages[-1] = {"role": "tool", "tool_call_id": "1", "content": "42"}
    assert agent_signals(Turn(messages, tools=[SEARCH])).tool_errors == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Error: ValueError('bad')\n Please fix your mistakes.", True),
        ("An error occurred while running the tool. Please try again. Error: boom", True),
        ("Traceback (most recent call last):\n  File ...", True),
        ('{"error": "not found"}', True),
        ('{"error": null, "value": 3}', False),
        ("The population is 700,000.", False),
        ("", False),
    ],
)
def test_is_tool_error(content: str, expected: bool) -> None:
    assert is_tool_error({"role": "tool", "tool_call_id": "1", "content": content}) is expected
    assert is_tool_error({"role": "user", "content": content}) is False


def test_tool_call_signature_canonicalises_json_arguments() -> None:
    a = {"function": {"name": "f", "arguments": '{"b": 2, "a": 1}'}}
    b = {"function": {"name": "f", "arguments": '{"a":1,"b":2}'}}
    assert tool_call_signature(a) == tool_call_signature(b) == 'f({"a":1,"b":2})'
    assert tool_call_signature({"function": {"name": "f", "arguments": "{bad"}}) == "f({bad)"


def test_annotate_is_idempotent_and_keeps_caller_keys() -> None:
    turn = looping_turn().with_updates(metadata={"agent_role": "custom"})
    once = annotate(turn)
    assert once.id == turn.id
    assert once.step == 2
    assert once.metadata["agent_stall"] is True and once.metadata["agent_role"] == "custom"
    assert annotate(once) is once
    assert annotate(easy(step=7)).step == 7


# -- the task context -------------------------------------------------------------------------


def test_task_numbers_steps_and_adds_up_totals(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = router_for(server, sink=sink)
    server.script([Reply.bad_json()], model="fast-model")
    server.script([Reply.json({"a": 1})], model="frontier-model")
    with router.task("t-1") as task:
        assert CURRENT_TASK.get() is task
        router.complete(easy(response_format={"type": "json_object"}))
        router.complete(easy())
        router.complete(easy(final=True))
    assert CURRENT_TASK.get() is None
    steps = [t.metadata["agent_step"] for t in task.traces]
    assert steps == [0, 1, 2]
    assert [t.metadata["task_id"] for t in sink.traces] == ["t-1"] * 3
    assert task.traces == tuple(sink.traces)
    summary = task.summary()
    assert summary.steps == 3
    assert summary.escalations == 1 and summary.gate_failures == 1
    assert summary.fast_share == pytest.approx(1 / 3)
    assert summary.cost == pytest.approx(sum(t.cost for t in sink.traces)) and summary.cost > 0
    assert summary.latency_s == pytest.approx(sum(t.latency_s for t in sink.traces))
    assert summary.to_dict()["task_id"] == "t-1"
    json.dumps(summary.to_dict())


def test_decide_inside_a_task_changes_no_state(server: ScriptedServer) -> None:
    router = router_for(server)
    with router.task() as task:
        first = router.decide(looping_turn())
        second = router.decide(looping_turn())
        assert first == second
        assert task.steps == 0 and not task.locked
    assert router.decide(looping_turn()).rule is None  # outside the task: no task rules


def test_stall_goes_to_frontier_locks_and_decays(server: ScriptedServer) -> None:
    sink = MemorySink()
    router = router_for(server, sink=sink)
    with router.task() as task:
        assert router.decide(looping_turn()).rule == "task.stall"
        result = router.complete(looping_turn())
        assert result.tier == "frontier"
        assert result.decision.rule == "task.stall"
        assert result.decision.reasons[0].startswith("task.stall: tool call search")
        assert task.locked
        for _ in range(2):  # K = 2 clean turns on the frontier tier
            locked = router.complete(easy())
            assert locked.tier == "frontier" and locked.decision.rule == "task.locked"
        assert not task.locked
        free = router.complete(easy())
    assert free.tier == "fast" and free.decision.rule is None
    rules = [t.decision.rule for t in sink.traces]
    assert rules == ["task.stall", "task.locked", "task.locked", None]
    assert task.summary().task_rules == {"task.stall": 1, "task.locked": 2}
    assert task.summary().stalls == 1


def test_gate_failures_lock_the_task(server: ScriptedServer) -> None:
    router = router_for(server, unlock_after_clean_turns=1)
    server.script([Reply.bad_json(), Reply.bad_json()], model="fast-model")
    json_turn = {"response_format": {"type": "json_object"}}
    server.script([Reply.json({"a": 1}), Reply.json({"a": 2})], model="frontier-model")
    with router.task() as task:
        router.complete(easy(**json_turn))
        assert not task.locked
        router.complete(easy(**json_turn))
        assert task.locked
        locked = router.complete(easy())
        assert locked.decision.rule == "task.locked"
        assert "after 2 gate failures" in locked.decision.reasons[0]
        assert router.complete(easy()).tier == "fast"


def test_lock_can_be_turned_off(server: ScriptedServer) -> None:
    router = router_for(server, lock_on_stall=False, lock_after_gate_failures=None)
    with router.task() as task:
        result = router.complete(looping_turn())
        assert result.decision.rule is None
        assert not task.locked and task.summary().stalls == 1


def test_escalation_budget_skips_the_fast_tier(server: ScriptedServer) -> None:
    router = router_for(server, lock_after_gate_failures=None)
    server.script([Reply.bad_json()], model="fast-model")
    with router.task(max_escalations=1) as task:
        first = router.complete(easy(response_format={"type": "json_object"}))
        assert first.escalated and task.escalations == 1
        second = router.complete(easy())
    assert second.tier == "frontier" and second.decision.rule == "task.budget.escalations"
    assert second.decision.reasons[0] == "task.budget.escalations: 1 of 1 escalations spent"
    assert len(server.requests_for("fast-model")) == 1


def test_latency_budget_picks_the_tier_that_fits(server: ScriptedServer) -> None:
    clock = Clock()
    router = router_for(server, clock=clock)
    with router.task(max_latency_s=3.0) as task:
        # frontier: 1.0 + 256 / 50 = 6.12 s; fast: 0.1 + 256 / 1000 = 0.356 s
        assert task.expected_latency("frontier") == pytest.approx(6.12)
        result = router.complete(easy(final=True))
        assert result.tier == "fast" and result.decision.rule == "task.budget.latency"
        assert "frontier needs ~6.12 s, 3.00 s left of 3 s" in result.decision.reasons[0]
        assert result.decision.reasons[1].startswith("rule final-answer")
        clock.now = 10.0
        late = router.complete(easy())
        assert late.decision.rule is None  # nothing fits; fast is already the quicker tier
    assert task.summary().over_budget == ("latency",)
    assert task.summary().elapsed_s == pytest.approx(10.0)


def test_measured_latencies_replace_the_latency_model(server: ScriptedServer) -> None:
    clock = Clock()

    def slow_fast(body: dict[str, Any]) -> Reply:
        clock.now += 5.0
        return Reply.text("ok")

    server.script([slow_fast], model="fast-model")
    router = router_for(server, clock=clock)
    with router.task(max_latency_s=100.0) as task:
        assert task.expected_latency("fast") == pytest.approx(0.356)
        router.complete(easy())
        assert task.expected_latency("fast") == pytest.approx(5.0)
        assert task.latency_s == pytest.approx(5.0)


def test_cost_budget_sends_turns_to_the_cheaper_tier(server: ScriptedServer) -> None:
    router = router_for(server)
    with router.task(max_cost=0.001) as task:
        result = router.complete(easy(final=True))
        assert result.tier == "fast" and result.decision.rule == "task.budget.cost"
        assert task.expected_cost("frontier", easy()) > 0.001 > task.expected_cost("fast", easy())


def test_budgets_come_from_the_policy(server: ScriptedServer) -> None:
    router = router_for(server, max_cost=0.001, max_escalations=4)
    task = router.task()
    assert (task.max_cost, task.max_escalations, task.max_latency_s) == (0.001, 4, None)
    assert router.task(max_cost=1.0).max_cost == 1.0


def test_failed_turn_is_observed(server: ScriptedServer) -> None:
    server.default = Reply.status(500)
    router = router_for(server)
    with router.task() as task:
        with pytest.raises(AllTiersFailed):
            router.complete(easy())
        assert task.steps == 1 and task.traces[0].tier is None
        assert task.summary().fast_share == 0.0


@pytest.mark.anyio
async def test_async_task_follows_concurrent_turns(server: ScriptedServer) -> None:
    router = router_for(server)
    async with router.task("async") as task:
        results = await asyncio.gather(*(router.acomplete(easy()) for _ in range(3)))
        stream = router.astream(easy())
        await stream.start()
        text = "".join([chunk.text async for chunk in stream])
    assert CURRENT_TASK.get() is None
    await router.aclose()
    assert text == "ok"
    assert task.steps == 4
    assert {r.trace.metadata["task_id"] for r in results} == {"async"}
    assert isinstance(task, Task) and "async" in repr(task)


def test_tasks_nest_and_restore(server: ScriptedServer) -> None:
    router = router_for(server)
    with router.task("outer") as outer:
        with router.task("inner") as inner:
            router.complete(easy())
        assert CURRENT_TASK.get() is outer
        router.complete(easy())
    assert (outer.steps, inner.steps) == (1, 1)


def test_policy_task_section_is_validated() -> None:
    text = (
        "version: 1\n"
        "backends: {a: {model: m}}\n"
        "tiers: {fast: a, frontier: a}\n"
        "task:\n"
        "  lock_after_gate_failures: 0\n"
    )
    with pytest.raises(PolicyError) as info:
        load_policy(text)
    assert info.value.line == 5
    assert "task.lock_after_gate_failures" in str(info.value)


DOCS = ("task.md", "langchain.md", "openai_agents.md", "pydantic_ai.md")
BASE_POLICY = {
    "version": 1,
    "backends": {"a": {"model": "m"}, "b": {"model": "n"}},
    "tiers": {"fast": "a", "frontier": "b"},
}


@pytest.mark.parametrize("page", DOCS)
def test_every_policy_in_the_docs_loads(page: str) -> None:
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / page).read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert blocks
    env = {"INCEPTION_API_KEY": "sk-inception", "OPENAI_API_KEY": "sk-openai"}
    for block in blocks:
        data = yaml.safe_load(block)
        if "backends" not in data:  # a snippet: one section of a policy
            data = {**BASE_POLICY, **data}
            policy = load_policy(data, env=env)
        else:
            policy = load_policy(block, env=env)
        assert policy.tiers.fast in policy.backends


# -- what the adapters share (no framework needed) ---------------------------------------------


def test_integrations_package_is_lazy_and_names_the_extra() -> None:
    import tiered_router.integrations as integrations
    from tiered_router.integrations._common import decision_metadata, missing, signals_of

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        integrations.Nope  # noqa: B018 - the attribute access is the test
    assert "TieredChatModel" in dir(integrations)
    error = missing("langchain", "langchain-core", ImportError("x"))
    assert 'pip install ".[langchain]"' in str(error)
    assert isinstance(error.__cause__, ImportError)
    with pytest.raises(ValueError, match="must be a mapping"):
        signals_of(["final"])
    with pytest.raises(ValueError, match="needs a result or a decision"):
        decision_metadata()


def test_decision_metadata_of_a_decision_alone(server: ScriptedServer) -> None:
    from tiered_router.integrations._common import decision_metadata

    decision = router_for(server).decide(easy(final=True))
    meta = decision_metadata(decision=decision)
    assert meta["tier"] == meta["decided_tier"] == "frontier"
    assert meta["rule"] == "final-answer" and "escalated" not in meta


def test_task_benchmark_runs_on_a_few_tasks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = root.parent / "shared" / "data"
    if not (data / "bfcl_v1_results").is_dir():
        pytest.skip("../shared/data/bfcl_v1_results is not here")
    spec = importlib.util.spec_from_file_location("bench_task", root / "benchmarks/bench_task.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_task", bench)  # dataclasses look their module up
    monkeypatch.syspath_prepend(str(root / "benchmarks"))  # its sibling, virtual_time.py
    spec.loader.exec_module(bench)
    out = tmp_path / "figures.json"
    args = ["--data", str(data), "--limit", "6", "--steps", "3", "--json", str(out)]
    assert bench.main(args) == 0
    figures = json.loads(out.read_text())
    configs = [r["config"] for r in figures["results"]]
    assert configs[0] == "frontier only" and "task-aware + budget" in configs
    frontier = figures["results"][0]
    assert frontier["fast_share"] == 0.0 and frontier["tasks"] == 6 and frontier["steps"] == 18
    assert all(0.0 <= r["step_quality"] <= 1.0 for r in figures["results"])


class _CountingStore:
    """The in-process store, counting reads of task totals (a shared store's round trips)."""

    def __init__(self) -> None:
        from tiered_router.state import MemoryStateStore

        self.inner = MemoryStateStore()
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def task_snapshot(self, task_id: str) -> Any:
        self.reads += 1
        return self.inner.task_snapshot(task_id)

    async def atask_snapshot(self, task_id: str) -> Any:
        self.reads += 1
        return await self.inner.atask_snapshot(task_id)


@pytest.mark.anyio
async def test_a_task_turn_reuses_the_totals_read_on_entering() -> None:
    from tiered_router.testing import ScriptedBackend

    store = _CountingStore()
    policy = {
        "version": 1,
        "backends": {"fast": {"model": "f"}, "frontier": {"model": "F"}},
        "tiers": {"fast": "fast", "frontier": "frontier"},
    }
    fast = ScriptedBackend("fast", ["one", "two"])
    router = Router(
        policy,
        backends={"fast": fast, "frontier": ScriptedBackend("frontier")},
        state=store,  # type: ignore[arg-type]
    )
    turn = Turn([{"role": "user", "content": "hi"}])
    async with router.task("t1") as task:
        await router.acomplete(turn)
        assert store.reads == 1  # entering read the totals; the first turn reused them
        await router.acomplete(turn)
        assert store.reads == 2  # a later turn reads again (other workers may have added)
    assert task.summary().steps == 2
