"""A plausible answer for any request: the upstream of ``serve --stand-in`` and ``demo --serve``.

With no script, a stand-in model still has to answer whatever a client sends: a request with
tools gets a call of its first tool (arguments drawn from the tool's JSON schema), a request
with a JSON response format gets JSON of that schema, anything else a short text naming the
model. Deterministic; no model, no network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tiered_router.testing._reply import Reply

__all__ = ["plausible_reply", "sample_of"]


def sample_of(schema: Any, depth: int = 0) -> Any:
    """A small value that satisfies common JSON schemas (required keys, types, enums)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return sample_of(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)
        return {k: sample_of(props.get(k, {}), depth + 1) for k in required}
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [sample_of(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"


def plausible_reply(body: dict[str, Any]) -> Reply:
    """The stand-in model's answer to one chat request (see the module docstring)."""
    model = str(body.get("model") or "model")
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], Mapping) else {}
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping) and "function" in t]
    if tools and last.get("role") != "tool" and body.get("tool_choice") != "none":
        function = tools[0]["function"]
        arguments = sample_of(function.get("parameters") or {"type": "object"}) or {}
        return Reply.tool_calls([(str(function.get("name")), arguments)])
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Reply.json(sample_of((fmt.get("json_schema") or {}).get("schema") or {}) or {})
    if fmt.get("type") == "json_object":
        return Reply.json({"answer": f"a stand-in answer from {model}"})
    return Reply.text(f"A stand-in answer from {model} (scripted upstream, no model was called).")
