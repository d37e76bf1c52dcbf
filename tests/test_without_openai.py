"""The core routes without the openai SDK (it is the ``openai`` extra), and says so when asked.

Each test runs a fresh interpreter with ``sys.modules["openai"] = None``, which makes any
``import openai`` fail as it does where the SDK is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = "import sys\nsys.modules['openai'] = None\n" + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])},
    )


def test_a_turn_is_routed_gated_and_escalated_over_http_without_the_sdk() -> None:
    done = _run(
        """
        from routerkit import JSON_TURN, easy_turn, make_policy
        from tiered_router import Router
        from tiered_router.testing import Reply, ScriptedServer

        with ScriptedServer() as server:
            server.script([Reply.text("{not json")], model="fast-model")
            server.script([Reply.json({"ok": True})], model="frontier-model")
            with Router(make_policy(server)) as router:
                result = router.complete(easy_turn(**JSON_TURN))
        print(result.tier, result.escalated, result.completion.text)
        print([a.backend for a in result.trace.attempts])
        print("openai" in sys.modules and sys.modules["openai"] is not None)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'frontier True {"ok": true}',
        "['fast', 'frontier']",
        "False",
    ]


def test_the_proxy_answers_without_the_sdk() -> None:
    done = _run(
        """
        import asyncio, httpx2
        from routerkit import make_policy
        from tiered_router.server import ServerSettings, create_app
        from tiered_router.testing import Reply, ScriptedServer

        async def main(server):
            app = create_app(make_policy(server), settings=ServerSettings(api_keys=("k",)))
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as c:
                async with app.router.lifespan_context(app):
                    r = await c.post(
                        "/v1/chat/completions",
                        headers={"Authorization": "Bearer k"},
                        json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
                    )
            return r

        with ScriptedServer() as server:
            server.script([Reply.text("hello")])
            r = asyncio.run(main(server))
        print(r.status_code, r.json()["choices"][0]["message"]["content"])
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200 hello"


def test_the_drop_in_client_names_the_openai_extra() -> None:
    done = _run(
        """
        try:
            from tiered_router.openai import TieredOpenAI  # noqa: F401
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "tiered_router.openai returns the openai SDK's own types, "
        'from the openai extra: pip install ".[openai]"'
    )


def test_a_pydantic_response_format_names_the_openai_extra_and_a_dict_still_works() -> None:
    done = _run(
        """
        import pydantic
        from tiered_router import Turn

        class Answer(pydantic.BaseModel):
            value: int

        messages = [{"role": "user", "content": "2+2?"}]
        try:
            Turn(messages, response_format=Answer)
        except ImportError as exc:
            print(exc)
        schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}
        print(Turn(messages, response_format=schema).response_format == schema)
        """
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first.startswith("response_format: a class (Answer) is turned into OpenAI's strict")
    assert 'pip install ".[openai]"' in first
    assert second == "True"
