"""Shared helpers for the router tests: a two-tier policy on the scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tiered_router import Router, Turn
from tiered_router.evaluation import Outcome
from tiered_router.testing import ScriptedServer
from tiered_router.turn import ToolCall

SECRET = "sk-test-SECRET-0123456789"


ADD: dict[str, Any] = {  # a tool schema the tests offer: add(a, b)
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def add_outcome(b: int, *, quality: float, cost: float, latency_s: float | None = None) -> Outcome:
    """A recorded ``add(a=1, b=b)`` call (a row's outcome in an evaluation dataset)."""
    args = json.dumps({"a": 1, "b": b})
    return Outcome(
        quality=quality,
        tool_calls=(ToolCall(id="c", name="add", arguments=args),),
        finish_reason="tool_calls",
        cost=cost,
        latency_s=latency_s,
    )


PAIR_POLICY = """\
version: 1
backends:
  fast: {model: fast, kind: diffusion}
  other: {model: other, kind: diffusion}
  big: {model: big}
tiers: {fast: fast, frontier: big}
scoring: {type: heuristic, threshold: 1.0}
drafts: {k: 2, backends: [fast, other], min_agreement: 1.0}
"""
"""Two recorded drafters (``fast``, ``other``) that must agree, and the frontier ``big``."""


def make_policy(
    upstream: ScriptedServer,
    /,
    *,
    api_key: str = SECRET,
    retries: tuple[int, int] = (2, 1),
    **overrides: Any,
) -> dict[str, Any]:
    """A fast (diffusion) and a frontier backend on ``upstream``; ``overrides`` replace sections.

    ``retries`` are the fast and frontier backends' ``max_retries``.
    """
    backend = {"type": "openai", "base_url": upstream.base_url, "api_key": api_key}
    policy: dict[str, Any] = {
        "version": 1,
        "backends": {
            "fast": {
                **backend,
                "model": "fast-model",
                "kind": "diffusion",
                "max_retries": retries[0],
                "price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
            },
            "frontier": {
                **backend,
                "model": "frontier-model",
                "max_retries": retries[1],
                "price": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
            },
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        "scoring": {"threshold": 0.6},
        "rules": [{"name": "final-answer", "when": {"final": True}, "tier": "frontier"}],
    }
    for key, value in overrides.items():
        policy[key] = value
    return policy


def doubles_policy(**sections: Any) -> dict[str, Any]:
    """A two-tier policy for routers whose backends are in-process doubles.

    Pass the doubles as ``Router(..., backends={"fast": ..., "frontier": ...})``; the
    backends declared here (an address nothing listens on) are replaced and never called.
    ``sections`` add or replace top-level sections (``gate``, ``scoring``, ...).
    """
    nowhere = "http://127.0.0.1:9/v1"
    return {
        "version": 1,
        "backends": {
            "fast": {"type": "openai", "model": "f", "base_url": nowhere},
            "frontier": {"type": "openai", "model": "F", "base_url": nowhere},
        },
        "tiers": {"fast": "fast", "frontier": "frontier"},
        **sections,
    }


def easy_turn(**kw: Any) -> Turn:
    return Turn([{"role": "user", "content": "Say hi."}], **kw)


JSON_TURN = {"response_format": {"type": "json_object"}}


class Slept(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.append(seconds)


def policy_file(upstream: ScriptedServer, path: Path, **overrides: Any) -> Path:
    """Write :func:`make_policy` as YAML at ``path`` (for scripts that take a policy file)."""
    path.write_text(yaml.safe_dump(make_policy(upstream, **overrides)))
    return path


OPEN_ROUTERS: list[Router] = []
"""Routers built by these helpers; conftest closes them after each test."""


def tracked(router: Router) -> Router:
    """Remember ``router`` so its HTTP clients are closed after the test."""
    OPEN_ROUTERS.append(router)
    return router


def router_for(server: ScriptedServer, slept: Slept | None = None, **kw: Any) -> Router:
    slept = slept if slept is not None else Slept()
    sinks = kw.pop("sinks", ())
    return tracked(Router(make_policy(server, **kw), sleep=slept, asleep=slept.asleep, sinks=sinks))
