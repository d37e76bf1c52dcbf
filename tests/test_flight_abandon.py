"""Calls a turn no longer wants: nothing leaks, nothing counts against a breaker, nothing is lost.

Over the scripted server, on the sync (threads) and async paths:

- a sync hedge or fast call the other side beat keeps running on its thread; if it then fails
  and its retry policy would try again, no retry starts, no in-flight count is taken (it used
  to stay at 1 for the life of the Router) and its failure is not a breaker failure;
- a caller that cancels its turn while a panel runs gets one trace holding every draft: the
  one that answered with its cost, the others as cancelled (the trace used to be empty).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_shapes import WEATHER
from routerkit import make_policy

from tiered_router import Router, Turn
from tiered_router.testing import Reply, ScriptedServer
from tiered_router.trace import MemorySink

TOOLS = [WEATHER]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def call(city: str) -> Reply:
    return Reply.tool_calls([("get_weather", {"city": city})])


def router_for(server: ScriptedServer, sink: MemorySink, **sections: Any) -> Router:
    sections.setdefault("rules", [{"name": "all-fast", "when": {}, "tier": "fast"}])
    sections.setdefault("resilience", {"breaker": {"enabled": True, "consecutive_failures": 2}})
    retries = sections.pop("retries", (0, 0))
    return Router(make_policy(server, retries=retries, **sections), sinks=[sink])


def in_flight(router: Router) -> dict[str, int]:
    return {b: router.latency.in_flight.count(b) for b in ("fast", "frontier")}


def test_a_sync_hedge_that_lost_starts_no_retry_and_leaks_nothing(server: ScriptedServer) -> None:
    # the fast draft answers at 0.5 s; the hedge (at 0.1 s) gets a 500 at 1.0 s and would retry
    server.script([Reply.slow(0.5, then=call("Paris"))], model="fast-model")
    server.script([Reply.slow(1.0, then=Reply.status(500)), call("Paris")], model="frontier-model")
    sink = MemorySink()
    with router_for(server, sink, retries=(0, 1), hedge={"after_s": 0.1}) as router:
        result = router.complete(Turn(ASK, tools=TOOLS))
        assert result.tier == "fast"
        hedge = [a for a in sink.traces[-1].attempts if a.role == "hedge"]
        assert len(hedge) == 1 and hedge[0].cancelled
        time.sleep(1.5)  # the hedge's thread gets its 500
        assert in_flight(router) == {"fast": 0, "frontier": 0}
        snapshot = router.breaker("frontier").snapshot()
        assert snapshot.state == "closed" and snapshot.consecutive_failures == 0
    assert len(server.requests_for("frontier-model")) == 1  # no retry after the turn ended


def test_a_sync_fast_call_the_hedge_beat_starts_no_retry(server: ScriptedServer) -> None:
    server.script([Reply.slow(1.0, then=Reply.status(500)), call("Paris")], model="fast-model")
    server.script([call("Paris")], model="frontier-model")
    sink = MemorySink()
    with router_for(server, sink, retries=(1, 0), hedge={"after_s": 0.1}) as router:
        result = router.complete(Turn(ASK, tools=TOOLS))
        assert result.tier == "frontier" and sink.traces[-1].escalations == ("hedged",)
        time.sleep(1.5)
        assert in_flight(router) == {"fast": 0, "frontier": 0}
        assert router.breaker("fast").snapshot().consecutive_failures == 0
    assert len(server.requests_for("fast-model")) == 1


def test_a_caller_cancelling_a_panel_gets_every_draft_traced(server: ScriptedServer) -> None:
    server.script(
        [call("Paris"), Reply.slow(3.0, then=call("Paris")), Reply.slow(3.0, then=call("Rome"))],
        model="fast-model",
    )
    sink = MemorySink()

    async def main() -> dict[str, int]:
        async with router_for(server, sink, drafts={"k": 3, "n": False}) as router:
            turn = asyncio.ensure_future(router.acomplete(Turn(ASK, tools=TOOLS)))
            await asyncio.sleep(0.5)
            turn.cancel()
            try:
                await turn
            except asyncio.CancelledError:
                pass
            return in_flight(router)

    assert asyncio.run(main()) == {"fast": 0, "frontier": 0}
    assert len(sink.traces) == 1
    trace = sink.traces[0]
    drafts = [a for a in trace.attempts if a.role == "draft"]
    assert len(drafts) == 3
    assert [d.cancelled for d in drafts].count(True) == 2
    answered = [d for d in drafts if not d.cancelled]
    assert answered[0].ok and answered[0].cost > 0 and trace.cost == answered[0].cost
    assert trace.panel is not None and trace.panel["reason"] == "the turn was cut short"
