"""The one-draft zone of a panel (``drafts.panel_above``): engine, replay, calibrate, write.

A fast turn scored at or below ``panel_above`` gets one draft and the gate; the panel is for
the turns above it. The engine is driven over real HTTP (a scripted OpenAI-compatible server
on 127.0.0.1); calibrate's choice on recorded rows where the zone pays, and where it does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from routerkit import ADD, PAIR_POLICY, add_outcome, make_policy
from typer.testing import CliRunner

from tiered_router import PolicyError, Router, Turn, load_policy
from tiered_router.cli import build_app
from tiered_router.evaluation import Dataset, EvalRow, write_dataset
from tiered_router.evaluation._panel_zone import zone_values, zoned
from tiered_router.evaluation.calibration import Target
from tiered_router.evaluation.panel import apply_panel, panel_specs, single_draft
from tiered_router.evaluation.runner import Replay, run_rows
from tiered_router.evaluation.verification import choose_verification
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

# -- the engine, over real HTTP --------------------------------------------------------------

SHORT = "add 1 and 2"
LONG = "add 1 and 2 " + "please think about it carefully, with every detail checked " * 30


def add_turn(text: str) -> Turn:
    return Turn([{"role": "user", "content": text}], tools=[ADD])


def add_call(b: int) -> Reply:
    return Reply.tool_calls([("add", {"a": 1, "b": b})])


def zone_policy(server: ScriptedServer, **drafts: Any) -> dict[str, Any]:
    return make_policy(
        server,
        retries=(0, 0),
        rules=[{"name": "all-fast", "when": {}, "tier": "fast"}],
        drafts={"k": 2, "min_agreement": 1.0, "n": False, **drafts},
    )


def scores(server: ScriptedServer) -> tuple[float, float]:
    router = Router(make_policy(server))
    return router.decide(add_turn(SHORT)).score, router.decide(add_turn(LONG)).score


@pytest.mark.anyio
async def test_a_turn_at_or_below_the_zone_gets_one_draft_and_above_it_the_panel(
    server: ScriptedServer,
) -> None:
    low, high = scores(server)
    assert low < high
    server.default = add_call(2)
    sink = MemorySink()
    policy = zone_policy(server, panel_above=round((low + high) / 2, 6))
    async with Router(policy, sinks=[sink]) as router:
        easy = await router.acomplete(add_turn(SHORT))
        hard = await router.acomplete(add_turn(LONG))
    assert easy.tier == hard.tier == "fast"
    easy_trace, hard_trace = sink.traces
    assert easy_trace.panel is None and len(easy_trace.attempts) == 1
    assert hard_trace.panel is not None and hard_trace.panel["agreed"]
    assert sum(a.role == "draft" for a in hard_trace.attempts) == 2
    assert len(server.requests_for("fast-model")) == 3


@pytest.mark.anyio
async def test_a_kind_entry_sets_its_own_zone_and_the_zone_is_at_or_below(
    server: ScriptedServer,
) -> None:
    low, _ = scores(server)
    server.default = add_call(2)
    sink = MemorySink()
    # the section has no zone; the tools entry's zone ends exactly at the easy turn's score
    policy = zone_policy(server, kinds={"tools": {"k": 2, "panel_above": low}})
    async with Router(policy, sinks=[sink]) as router:
        await router.acomplete(add_turn(SHORT))
    assert sink.traces[-1].panel is None and len(server.requests_for("fast-model")) == 1
    # an entry without its own zone takes the section's
    server.reset()
    server.default = add_call(2)
    policy = zone_policy(server, panel_above=0.0, kinds={"tools": {"k": 2}})
    async with Router(policy, sinks=[sink]) as router:
        await router.acomplete(add_turn(SHORT))
    assert sink.traces[-1].panel is not None and len(server.requests_for("fast-model")) == 2


@pytest.mark.anyio
async def test_a_stream_takes_the_zone_too(server: ScriptedServer) -> None:
    low, high = scores(server)
    server.default = add_call(2)
    sink = MemorySink()
    async with Router(zone_policy(server, panel_above=(low + high) / 2), sinks=[sink]) as router:
        for text in (SHORT, LONG):
            stream = router.astream(add_turn(text))
            chunks = [chunk async for chunk in stream]
            assert chunks and stream.result is not None
            assert stream.result.completion.tool_calls[0].name == "add"
    assert [t.panel is None for t in sink.traces] == [True, False]
    assert len(server.requests_for("fast-model")) == 3


def test_the_sync_path_takes_the_zone_too(server: ScriptedServer) -> None:
    low, high = scores(server)
    server.default = add_call(2)
    sink = MemorySink()
    with Router(zone_policy(server, panel_above=(low + high) / 2), sinks=[sink]) as router:
        router.complete(add_turn(SHORT))
        router.complete(add_turn(LONG))
    assert [t.panel is None for t in sink.traces] == [True, False]


@pytest.mark.parametrize("value", [-0.1, 1.5, "high"])
def test_a_bad_zone_is_a_policy_error_naming_the_key(server: ScriptedServer, value: Any) -> None:
    with pytest.raises(PolicyError, match=r"drafts\.panel_above"):
        load_policy(zone_policy(server, panel_above=value))
    with pytest.raises(PolicyError, match=r"drafts\.kinds\.tools\.panel_above"):
        load_policy(zone_policy(server, kinds={"tools": {"panel_above": value}}))


# -- replay and calibrate --------------------------------------------------------------------


def graded(n: int = 800) -> Dataset:
    """Short requests the fast model always gets right; long ones where it is wrong on one in
    five and the second drafter is right (the panel catches it). The scorer (prompt length)
    tells them apart."""
    rows = []
    for i in range(n):
        long = i % 2 == 1
        wrong = long and i % 10 == 1
        text = f"add 1 and {i}" + (" and mind every detail of the request" * 12 if long else "")
        rows.append(
            EvalRow.build(
                f"r{i}",
                [{"role": "user", "content": text}],
                {
                    "fast": add_outcome(i + wrong, quality=0.0 if wrong else 1.0, cost=0.001),
                    "other": add_outcome(i, quality=1.0, cost=0.004),
                    "big": add_outcome(i, quality=1.0, cost=0.1),
                },
                tools=[ADD],
            )
        )
    return Dataset(name="graded", rows=tuple(rows), fast_model="fast", frontier_model="big")


POLICY = PAIR_POLICY


def test_the_replay_leaves_rows_at_or_below_the_zone_to_one_draft() -> None:
    dataset = graded()
    policy = load_policy(POLICY)
    replay = Replay.bind(single_draft(policy), dataset)
    single = run_rows(replay)
    cut = sorted(r.score for r in single)[len(single) // 2 - 1]
    (spec,) = panel_specs(
        policy.model_copy(update={"drafts": policy.drafts.model_copy(update={"panel_above": cut})}),
        dataset,
        replay.fast_model,
    )
    assert spec.panel_above == cut
    runs, stats = apply_panel(replay, single, spec)
    assert stats.single_draft_rows == sum(r.score <= cut for r in single) > 0
    # the rows in the zone are the single draft's, the others the panel's
    by_id = {r.row_id: r for r in single}
    for run in runs:
        if run.score <= cut:
            assert run.fast == by_id[run.row_id].fast
    # the chooser's own replay of the zone gives the same rows
    plain, _ = apply_panel(replay, single, spec.__class__(**{**_fields(spec), "panel_above": None}))
    assert [r.fast for r in zoned(single, plain, cut)] == [r.fast for r in runs]


def _fields(spec: Any) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__slots__}


def test_zone_values_are_inner_quantiles() -> None:
    replay = Replay.bind(single_draft(load_policy(POLICY)), graded())
    runs = run_rows(replay)
    values = zone_values(runs)
    top = max(r.score for r in runs)
    assert values == sorted(values) and 0 < len(values) <= 15
    assert all(v < top for v in values)
    assert zone_values(runs[:1]) == []


def test_calibrate_chooses_the_zone_where_it_pays_and_the_bound_holds_on_held_out_rows() -> None:
    dataset = graded()
    policy, target = load_policy(POLICY), Target(quality_retained=0.99)
    choice = choose_verification(policy, dataset, target, holdout=0.5)
    (tools,) = choice.kinds
    v = tools.verification
    assert v.k == 2 and v.panel_above is not None
    assert "one draft + gate at or below score" in v.describe()
    assert choice.to_dict()["kinds"]["tools"]["panel_above"] == v.panel_above  # type: ignore[index]
    assert choice.calibration.retained_low >= 0.99
    assert choice.holdout is not None and choice.holdout.retained >= 0.99
    # cheaper than the same panel on every turn, whose cheapest form sends every row fast
    replay = Replay.bind(single_draft(policy), dataset)
    (spec,) = panel_specs(policy, dataset, replay.fast_model)
    runs, _ = apply_panel(replay, run_rows(replay), spec)
    everywhere = sum(r.fast.cost for r in runs) / sum(r.frontier.cost for r in runs)
    assert choice.calibration.cost_share < everywhere - 0.01
    # where every request is as hard as every other, no zone is chosen
    flat = Dataset(
        name="flat",
        rows=tuple(r for r in dataset.rows if r.id.endswith(("1", "3", "5", "7", "9"))),
        fast_model="fast",
        frontier_model="big",
    )
    (only,) = choose_verification(policy, flat, target).kinds
    assert only.verification.panel_above is None


def test_calibrate_write_sets_each_kinds_zone_and_keeps_the_sections(tmp_path: Path) -> None:
    def write(dataset: Dataset) -> Any:
        data, path = tmp_path / "rows.jsonl", tmp_path / "policy.yaml"
        write_dataset(dataset, data)
        path.write_text(
            POLICY.replace("min_agreement: 1.0}", "min_agreement: 1.0, panel_above: 0.9}")
            + "# kept\n"
        )
        run = CliRunner().invoke(
            build_app(),
            [
                *("calibrate", str(path), "--data", str(data)),
                *("--target-quality-retained", "0.99", "--write"),
            ],
        )
        assert run.exit_code == 0, run.output
        assert "# kept" in path.read_text()
        return run.output, load_policy(path).drafts

    output, drafts = write(graded())
    assert "one draft + gate at or below score" in output
    # the section's zone stays for the kinds absent from the data (JSON, answers)
    assert drafts.panel_above == 0.9 and drafts.panel_above_for("json") == 0.9
    chosen = drafts.kinds["tools"].panel_above
    assert chosen is not None and 0 < chosen < 0.9
    # where calibrate chose no zone, the kind says 0 so that it does not inherit the section's
    flat = Dataset(
        name="flat",
        rows=tuple(r for r in graded().rows if r.id.endswith(("1", "3", "5", "7", "9"))),
        fast_model="fast",
        frontier_model="big",
    )
    _, drafts = write(flat)
    assert drafts.kinds["tools"].panel_above == 0 and drafts.panel_above == 0.9


# -- the proxy -------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
def test_the_proxy_takes_the_zone(server: ScriptedServer, streamed: bool) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    import openai
    from test_server import running

    from tiered_router.server import create_app

    low, high = scores(server)
    server.default = add_call(2)
    app = create_app(zone_policy(server, panel_above=(low + high) / 2), env={})
    seen: list[int] = []
    with running(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        try:
            for text in (SHORT, LONG):
                before = len(server.requests_for("fast-model"))
                messages = [{"role": "user", "content": text}]
                if streamed:
                    with client.chat.completions.with_streaming_response.create(
                        model="auto", messages=messages, tools=[ADD], stream=True
                    ) as raw:
                        assert any("[DONE]" in line for line in raw.iter_lines())
                else:
                    client.chat.completions.create(model="auto", messages=messages, tools=[ADD])
                seen.append(len(server.requests_for("fast-model")) - before)
        finally:
            client.close()
    assert seen == [1, 2]  # the easy request one draft, the hard one the panel's two


def test_a_kind_entry_of_zero_opts_out_of_the_section_zone(server: ScriptedServer) -> None:
    _, high = scores(server)
    server.default = add_call(2)
    sink = MemorySink()
    policy = zone_policy(server, panel_above=1.0, kinds={"tools": {"k": 2, "panel_above": 0}})
    with Router(policy, sinks=[sink]) as router:
        router.complete(add_turn(SHORT))
    assert sink.traces[-1].panel is not None and len(server.requests_for("fast-model")) == 2
    assert load_policy(policy).drafts.panel_above_for("tools") == 0  # type: ignore[union-attr]


def test_a_cost_budget_counts_one_draft_for_a_turn_in_the_zone(server: ScriptedServer) -> None:
    """The task's cost rule must not price a turn the zone gives one draft at ``k`` drafts."""
    server.default = add_call(2)
    policy = zone_policy(server, k=3, panel_above=1.0)
    with Router(policy) as router, router.task() as task:
        turn = add_turn(SHORT)
        score = router.decide(turn).score
        one = task.expected_cost("fast", turn, score=score)
        assert task.expected_cost("fast", turn) == pytest.approx(3 * one)  # no score: k drafts
    # a budget between one draft and three: the turn stays fast, with one draft
    with Router(policy) as router, router.task(max_cost=2 * one) as task:
        result = router.complete(add_turn(SHORT))
    assert result.tier == "fast" and result.decision.rule != "task.budget.cost"
    assert len(server.requests_for("fast-model")) == 1


def test_what_calibrate_writes_replays_to_its_own_figures(tmp_path: Path) -> None:
    """The zone and the threshold are written exactly: ``eval`` of the written policy gives
    calibrate's figures on the same rows (rounded values could move a row at the edge)."""
    from tiered_router.evaluation.results import evaluate

    dataset, path = graded(), tmp_path / "policy.yaml"
    data = tmp_path / "rows.jsonl"
    write_dataset(dataset, data)
    path.write_text(POLICY)
    choice = choose_verification(load_policy(POLICY), dataset, Target(quality_retained=0.99))
    run = CliRunner().invoke(
        build_app(),
        [
            *("calibrate", str(path), "--data", str(data)),
            *("--target-quality-retained", "0.99", "--write"),
        ],
    )
    assert run.exit_code == 0, run.output
    written = load_policy(path)
    assert written.scoring.threshold == choice.threshold
    (tools,) = choice.kinds
    assert written.drafts is not None
    assert written.drafts.panel_above_for("tools") == tools.verification.panel_above
    summary = evaluate(written, dataset).summary
    assert summary.cost == pytest.approx(choice.calibration.cost)
    assert summary.fast_share == pytest.approx(choice.calibration.fast_share)


def test_the_choosers_zone_sums_equal_a_replay_of_the_zone_rules_included() -> None:
    """calibrate sums a zoned panel from the single draft's and the panel's prefix sums
    (nothing replayed); on rows some decided by a rule, that equals replaying the zone."""
    from tiered_router.evaluation._kind_sums import _Kind, _Zoned

    # long requests are sent fast by a rule: their score still decides the zone
    rule = "rules: [{name: long-fast, when: {min_prompt_tokens: 40}, tier: fast}]\n"
    policy = load_policy(PAIR_POLICY + rule)
    dataset = graded()
    replay = Replay.bind(single_draft(policy), dataset)
    single = run_rows(replay)
    assert any(r.rule is not None for r in single) and any(r.rule is None for r in single)
    (spec,) = panel_specs(policy, dataset, replay.fast_model)
    panel, _ = apply_panel(replay, single, spec)
    scores = sorted({r.score for r in single})
    for above in zone_values(single):
        summed = _Zoned(_Kind(single), _Kind(panel), above)
        replayed = _Kind(zoned(single, panel, above))
        for t in [-1.0, *scores, 1.0]:
            for a, b in zip(summed.at(t), replayed.at(t), strict=True):
                assert a.n == b.n, (above, t)
                assert [a.p, a.pp, a.f, a.ff, a.pf] == pytest.approx([b.p, b.pp, b.f, b.ff, b.pf])
