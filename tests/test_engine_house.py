"""The engine wing's house rules, read from the source (``tests/engine_house.py`` measures).

- Only ``engine/_machine.py`` changes a turn: no other module assigns or mutates a
  ``TurnRun`` field (mypy sees the same: the state is private, the views read-only).
- No engine function above cyclomatic complexity 12 or 60 lines, no module above 500 lines.
- The sync flight imports nothing from the async one: what both share is in
  ``engine/_flight_plan.py``, and the race is one pure decision (:func:`race_action`).
"""

from __future__ import annotations

import ast

import pytest
from engine_house import (
    ENGINE,
    _branches,
    functions,
    module_lines,
    turn_fields,
    turn_writes,
    writes_in,
)

from tiered_router.engine._flight_plan import HedgeState, RaceAction, hedge_state, race_action

# -- the machine owns the turn -------------------------------------------------------------------


def test_only_the_machine_changes_a_turn() -> None:
    assert turn_writes() == []


def test_a_turn_changed_elsewhere_is_caught() -> None:
    fields = turn_fields()
    assert {"_attempts", "_kept", "_escalations", "_roles", "_decision"} <= fields
    source = (
        "def f(run, other):\n"
        "    run._escalations.append('hedged')\n"
        "    run._kept = None\n"
        "    run._roles['frontier'] = 'hedge'\n"
        "    run._tried.add('frontier')\n"
        "    other._kept = None\n"  # not a turn
        "    run.hedge_won()\n"  # an intent: fine
    )
    found = writes_in(source, "x.py", fields)
    assert [w.field for w in found] == ["_escalations", "_kept", "_roles", "_tried"]


# -- functions with one job, modules of one concept ----------------------------------------------

LIMIT_COMPLEXITY = 12
LIMIT_LINES = 60


def test_no_engine_function_does_several_jobs() -> None:
    over = {
        f"{f.path}:{f.name}"
        for f in functions()
        if f.complexity > LIMIT_COMPLEXITY or f.lines > LIMIT_LINES
    }
    assert over == set()


def test_the_complexity_count_is_radons() -> None:
    # one, plus one per if / loop / except / boolean operand / comprehension clause / assert
    source = (
        "def f(x):\n"
        "    if x and x > 1:\n"
        "        return [y for y in x if y]\n"
        "    for i in x:\n"
        "        try:\n"
        "            pass\n"
        "        except ValueError:\n"
        "            pass\n"
        "    assert x\n"
        "    return 1 if x else 2\n"
    )
    tree = ast.parse(source)
    assert 1 + _branches(tree.body[0]) == 9


def test_no_engine_module_is_above_500_lines() -> None:
    assert {p: n for p, n in module_lines().items() if n > 500} == {}


def test_the_sync_flight_imports_nothing_from_the_async_one() -> None:
    tree = ast.parse((ENGINE / "_flight_sync.py").read_text(encoding="utf-8"))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "tiered_router.engine._flight" not in imported
    assert "tiered_router.engine._flight_plan" in imported


# -- the race: one pure decision -------------------------------------------------------------------

H = HedgeState
A = RaceAction


@pytest.mark.parametrize(
    ("hedge", "action"),
    [
        (H.NOT_STARTED, A.WAIT_FAST),
        (H.RUNNING, A.WAIT_FAST),
        (H.ANSWERED, A.RECORD_HEDGE),
        (H.FAILED, A.WAIT_FAST),
        (H.ACCEPTED, A.HEDGE_WINS),
        (H.REJECTED, A.WAIT_FAST),
    ],
)
def test_while_the_fast_side_runs(hedge: HedgeState, action: RaceAction) -> None:
    assert race_action(hedge, fast_done=False) is action


@pytest.mark.parametrize(
    ("hedge", "answered", "escalated"),
    [
        (H.NOT_STARTED, A.CANCEL_HEDGE, A.CALL_FRONTIER),
        (H.RUNNING, A.CANCEL_HEDGE, A.AWAIT_HEDGE),
        (H.ANSWERED, A.RECORD_LATE_HEDGE, A.AWAIT_HEDGE),
        (H.FAILED, A.KEEP_FAST, A.AWAIT_HEDGE),
        (H.REJECTED, A.KEEP_FAST, A.TAKE_HEDGE),
    ],
)
def test_once_the_fast_side_ended(
    hedge: HedgeState, answered: RaceAction, escalated: RaceAction
) -> None:
    assert race_action(hedge, fast_done=True, fast_next=None) is answered
    assert race_action(hedge, fast_done=True, fast_next="frontier") is escalated


def test_a_hedge_is_seen_as_its_flight_sees_it() -> None:
    assert hedge_state(started=False, done=False) is H.NOT_STARTED
    assert hedge_state(started=True, done=False) is H.RUNNING
    assert hedge_state(started=True, done=True, outcome=None) is H.FAILED
    assert hedge_state(started=True, done=True, outcome=("draft",)) is H.ANSWERED


# -- the maps are true -------------------------------------------------------------------------


def test_the_engine_names_its_modules() -> None:
    import tiered_router.engine as engine

    doc = engine.__doc__ or ""
    modules = {p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__"}
    assert {m for m in modules if f"``{m}``" not in doc} == set()


def test_docs_architecture_draws_every_engine_module() -> None:
    page = (ENGINE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = {p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__"}
    assert {m for m in modules if m not in page} == set()
