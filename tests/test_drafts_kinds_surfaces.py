"""``drafts.kinds`` (what ``calibrate`` writes per kind of turn) on every surface, over real HTTP.

``calibrate --write`` sets a panel per kind of turn; the engine plans it (test_verification.py)
and each surface must carry it: ``Router.acomplete``, ``Router.astream``, the drop-in client
and the proxy, JSON and streamed. One policy: tool steps get 3 drafts that must all agree,
final answers one draft and the gate, other turns the section's 2 drafts.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from routerkit import ADD, router_for  # noqa: E402
from test_server import make_policy, running  # noqa: E402

from tiered_router import Turn  # noqa: E402
from tiered_router.server import create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

DRAFTS = {
    "k": 2,
    "when": ["all"],
    "early": False,
    "n": False,  # one request per draft, so the server counts them
    "kinds": {"tools": {"k": 3, "min_agreement": 1.0}, "answer": {"k": 1}},
}
RULES = [{"name": "all-fast", "when": {}, "tier": "fast"}]
TOOLS_TURN: list[dict[str, Any]] = [{"role": "user", "content": "add 1 and 2"}]
ANSWER_TURN: list[dict[str, Any]] = [{"role": "user", "content": "How many cats are there?"}]
PROSE_TURN: list[dict[str, Any]] = [{"role": "user", "content": "Say hello to the team."}]


def _add(b: int) -> Reply:
    return Reply.tool_calls([("add", json.dumps({"a": 1, "b": b}))])


def _fast_calls(server: ScriptedServer) -> int:
    return len(server.requests_for("fast-model"))


def _frontier_calls(server: ScriptedServer) -> int:
    return len(server.requests_for("frontier-model"))


def _script(server: ScriptedServer, case: str) -> None:
    if case == "tools":  # one of three drafts differs: a 3-of-3 panel escalates
        server.script([_add(2), _add(2), _add(3)], model="fast-model")
        server.script([_add(2)], model="frontier-model")
    else:
        server.script([Reply.text("There are 4 cats.")] * 3, model="fast-model")


EXPECTED = {  # case -> (drafts sent, tier that answered)
    "tools": (3, "frontier"),
    "answer": (1, "fast"),
    "prose": (2, "fast"),
}
MESSAGES = {"tools": TOOLS_TURN, "answer": ANSWER_TURN, "prose": PROSE_TURN}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(EXPECTED))
async def test_router_acomplete_and_astream_use_each_kinds_panel(
    server: ScriptedServer, case: str
) -> None:
    drafts, tier = EXPECTED[case]
    tools = [ADD] if case == "tools" else None
    router = router_for(server, drafts=DRAFTS, rules=RULES)
    _script(server, case)
    result = await router.acomplete(Turn(MESSAGES[case], tools=tools))
    assert result.tier == tier
    assert _fast_calls(server) == drafts
    server.reset()
    _script(server, case)
    stream = router.astream(Turn(MESSAGES[case], tools=tools))
    async for _ in stream:
        pass
    assert stream.result is not None and stream.result.tier == tier
    assert _fast_calls(server) == drafts
    assert _frontier_calls(server) == (tier == "frontier")


@pytest.mark.parametrize("case", list(EXPECTED))
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
def test_the_proxy_uses_each_kinds_panel(server: ScriptedServer, case: str, streamed: bool) -> None:
    drafts, tier = EXPECTED[case]
    app = create_app(make_policy(server, drafts=DRAFTS, rules=RULES), env={})
    _script(server, case)
    extra: dict[str, Any] = {"tools": [ADD]} if case == "tools" else {}
    with running(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        try:
            if streamed:
                with client.chat.completions.with_streaming_response.create(
                    model="auto", messages=MESSAGES[case], stream=True, **extra
                ) as raw:
                    chunks = list(raw.iter_lines())
                    headers = raw.headers
                assert any("[DONE]" in line for line in chunks)
            else:
                raw_json = client.chat.completions.with_raw_response.create(
                    model="auto", messages=MESSAGES[case], **extra
                )
                headers = raw_json.headers
        finally:
            client.close()
    assert _fast_calls(server) == drafts
    assert _frontier_calls(server) == (tier == "frontier")
    if not streamed:  # a stream's headers leave before the panel has decided
        assert headers["x-tiered-router-tier"] == tier
        if drafts > 1:
            assert headers["x-tiered-router-drafts"] == str(drafts)
