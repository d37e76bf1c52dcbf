"""Operating the proxy: one access line per request, traces to a file, pinning by model name."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import openai
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_server import make_policy, running  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from tiered_router import JSONLSink  # noqa: E402
from tiered_router.cli import build_app  # noqa: E402
from tiered_router.server import _app_from_environment, create_app  # noqa: E402
from tiered_router.testing import Reply, ScriptedServer  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say hi."}]


def test_one_access_line_per_request_and_recorded_traces(
    server: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.script([Reply.text("hello"), Reply.text("streamed")], model="fast-model")
    path = tmp_path / "traces.jsonl"
    sink = JSONLSink(path)
    app = create_app(make_policy(server), env={}, sinks=[sink], record=True)
    caplog.set_level(logging.INFO, logger="tiered_router.server")
    with running(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        client.chat.completions.create(model="auto", messages=MESSAGES)  # type: ignore[arg-type]
        stream = client.chat.completions.create(
            model="auto",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=MESSAGES)  # type: ignore[arg-type]
        client.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "tiered_router.server"]
    access = [line for line in lines if line.startswith("POST /v1/chat/completions")]
    assert len(access) == 3, lines
    json_line, stream_line, missing = access
    for line in (json_line, stream_line):
        for field in ("tier=fast", "score=", "rule=-", "escalated=false", "latency_ms=", "cost="):
            assert field in line, line
    assert " 200 stream " in stream_line
    assert missing.startswith("POST /v1/chat/completions 404 latency_ms=")
    sink.close()
    traces = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(traces) == 2
    assert traces[0]["record"]["request"]["messages"] == MESSAGES
    assert traces[0]["record"]["outputs"][0]["text"] == "hello"


def test_a_preset_model_name_pins_its_tier_in_the_proxy(server: ScriptedServer) -> None:
    server.script([Reply.text("from mercury")], model="mercury-2")
    policy = make_policy(server)
    policy["backends"]["fast"] = {
        "preset": "mercury-2",
        "base_url": server.base_url,
        "api_key": "k",
        "max_retries": 0,
    }
    with running(create_app(policy, env={})) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        ids = [m.id for m in client.models.list()]
        response = client.chat.completions.create(
            model="mercury-2",
            messages=[{"role": "user", "content": "Prove the Riemann hypothesis in detail."}],
        )
        client.close()
    assert "mercury-2" in ids
    assert response.choices[0].message.content == "from mercury"
    assert response.tiered_router["rule"] == "pinned"  # type: ignore[attr-defined]


def test_workers_get_the_trace_file_and_recording(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(make_policy(server)))
    spec = {
        "policy": str(policy_file),
        "max_body_bytes": None,
        "trace_file": str(tmp_path / "t.jsonl"),
        "record": True,
        "log_level": "info",
    }
    # what `serve --workers 2 --trace-file ... --record` hands each worker process
    monkeypatch.setenv("TIERED_ROUTER_SERVE_POLICY", json.dumps(spec))
    app = _app_from_environment()
    router = app.state.router
    assert router.record is True
    assert any(isinstance(s, JSONLSink) and s.path.endswith("t.jsonl") for s in router.sinks)


def test_serve_help_lists_the_ops_options() -> None:
    result = CliRunner().invoke(build_app(), ["serve", "--help"])
    assert result.exit_code == 0
    assert "--trace-file" in result.output and "--record" in result.output
