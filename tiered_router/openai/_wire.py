"""OpenAI's wire shapes for the drop-in client and the proxy: requests in, completions out.

Both surfaces take ``chat.completions.create`` arguments, route them, and answer with
``chat.completion`` / ``chat.completion.chunk`` objects. This module holds what they share,
as plain dicts (the proxy serialises them; the client validates them into the SDK's types):

- :func:`parse_request`: arguments -> a :class:`~tiered_router.Turn` and the call options;
- :func:`resolve_model`: ``model`` -> routed (``auto``) or pinned to a tier;
- :func:`completion_body` and :class:`ChunkRenderer`: our completion -> OpenAI's objects;
- :func:`route_summary`: the routing decision as a small JSON object.

Nothing here imports ``openai``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_router import _limits
from tiered_router._types import UNSET, Tier, Unset
from tiered_router.exceptions import InvalidRequest, UnknownModel
from tiered_router.turn import Completion, CompletionChunk, Turn, Usage

if TYPE_CHECKING:
    from tiered_router.engine._machine import RoutedResult
    from tiered_router.engine._streaming import AsyncRoutedStream, RoutedStream
    from tiered_router.policy._schema import Policy
    from tiered_router.routing import Decision
    from tiered_router.trace import Attempt

__all__ = [
    "result_route",
    "stream_route",
    "AUTO",
    "ChunkRenderer",
    "RequestOptions",
    "UnknownModel",
    "completion_body",
    "model_ids",
    "parse_request",
    "resolve_model",
    "route_summary",
    "usage_dict",
]

AUTO = "auto"
"""The model name that lets the router decide."""

_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_SDK_SENTINELS = frozenset({"NotGiven", "Omit"})


def _served_model(policy: Policy, backend: str) -> str | None:
    """The model a tier's backend sends, with its preset applied (``preset: mercury-2``)."""
    config = policy.backends.get(backend)
    if config is None:
        return None
    if config.model is None and config.type == "openai":
        from tiered_router.backends.presets import resolve_config

        return resolve_config(config, backend=backend).model
    return config.model


def model_ids(policy: Policy) -> list[str]:
    """Return the names a client may ask for: ``auto``, the tiers, their backends, models."""
    names = [AUTO, "fast", "frontier"]
    for tier in ("fast", "frontier"):
        backend = policy.backend_for(tier)
        for name in (backend, _served_model(policy, backend)):
            if name is not None and name not in names:
                names.append(name)
    return names


def resolve_model(policy: Policy, model: str | None) -> Tier | None:
    """Return the tier a ``model`` pins, or ``None`` for ``auto`` (the router decides).

    A tier name (``fast``, ``frontier``), the name of the backend serving a tier, or the
    ``model`` configured for that backend pins the tier.

    Raises:
        UnknownModel: For any other name.

    """
    if model is None or model == AUTO:
        return None
    tiers: tuple[Tier, Tier] = ("fast", "frontier")
    for tier in tiers:
        if model == tier:
            return tier
    for tier in tiers:
        name = policy.backend_for(tier)
        if model == name or model == _served_model(policy, name):
            return tier
    raise UnknownModel(model, model_ids(policy))


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOptions:
    """The call options that are not part of the turn.

    Attributes:
        model: The ``model`` asked for (``auto`` when none was given).
        stream: Whether to answer with a stream of chunks.
        include_usage: ``stream_options.include_usage``: end the stream with a usage chunk.
        deadline_s: ``timeout`` as the turn's deadline, or ``UNSET`` for the policy's.

    """

    model: str = AUTO
    stream: bool = False
    include_usage: bool = False
    deadline_s: float | None | Unset = UNSET


def _given(value: Any) -> bool:
    return value is not None and type(value).__name__ not in _SDK_SENTINELS


def parse_request(
    kwargs: Mapping[str, Any], *, signals: Mapping[str, Any] | None = None
) -> tuple[Turn, RequestOptions]:
    """Split ``chat.completions.create`` arguments into a turn and the call options.

    The SDK's "not given" sentinels and ``None`` values are dropped; ``stream``,
    ``stream_options``, ``model`` and ``timeout`` become options; everything else goes to
    :meth:`Turn.from_openai` (agent signals in ``extra_body.tiered_router``).

    Args:
        kwargs: The arguments.
        signals: Agent signals given outside ``extra_body`` (the proxy's body field and
            headers); merged over the ones in ``extra_body``.

    Raises:
        InvalidRequest: Missing messages, ``n`` other than 1, malformed signals, tools,
            messages or schemas (a ``ValueError``).

    """
    args = {k: v for k, v in kwargs.items() if _given(v)}
    model = args.pop("model", AUTO)
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "model: must be a non-empty string ('auto' lets the router decide)", param="model"
        )
    stream = args.pop("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("stream: must be true or false", param="stream")
    stream_options = args.pop("stream_options", None) or {}
    if not isinstance(stream_options, Mapping):
        raise InvalidRequest("stream_options: must be an object", param="stream_options")
    if "n" in args:
        _limits.check_n(args.pop("n"), one=True)
    timeout = args.pop("timeout", None)
    deadline: float | None | Unset = UNSET
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        if not 0 < timeout < math.inf:  # NaN too
            raise InvalidRequest("timeout: must be a positive number of seconds", param="timeout")
        deadline = float(timeout)
    if signals:
        _limits.check_object(args.get("extra_body"), "extra_body")
        extra = dict(args.get("extra_body") or {})
        merged = dict(extra.get("tiered_router") or {})
        merged.update(signals)
        extra["tiered_router"] = merged
        args["extra_body"] = extra
    if "messages" not in args:
        raise InvalidRequest("messages: required", param="messages")
    turn = Turn.from_openai(**args)
    return turn, RequestOptions(
        model=model,
        stream=stream,
        include_usage=stream_options.get("include_usage") is True,
        deadline_s=deadline,
    )


def route_summary(
    decision: Decision,
    *,
    tier: Tier | None,
    backend: str | None,
    escalated: bool,
    escalations: tuple[str, ...] = (),
    turn_id: str = "",
    attempts: Sequence[Attempt] = (),
) -> dict[str, Any]:
    """Return the routing decision as a JSON object (``tiered_router`` on responses).

    Keys: ``tier`` and ``backend`` (who answered), ``escalated``, ``escalations``,
    ``decided_tier`` (where the router sent the turn first), ``score``, ``threshold``,
    ``rule`` and ``turn_id``; with a draft panel or a hedge, also ``drafts`` (draft calls
    made, cancelled ones included), ``cancelled`` (calls cancelled) and ``hedged`` (a
    hedged frontier call was started).
    """
    route = {
        "tier": tier,
        "backend": backend,
        "escalated": escalated,
        "escalations": list(escalations),
        "decided_tier": decision.tier,
        "score": round(decision.score, 4),
        "threshold": decision.threshold,
        "rule": decision.rule,
        "turn_id": turn_id,
    }
    drafts = sum(1 for a in attempts if a.role == "draft")
    hedged = any(a.role == "hedge" for a in attempts)
    if drafts or hedged:
        route["drafts"] = drafts
        route["cancelled"] = sum(1 for a in attempts if a.cancelled)
        route["hedged"] = hedged
    return route


def result_route(result: RoutedResult, *, with_trace: bool = False) -> dict[str, Any]:
    """Return :func:`route_summary` of a finished turn (with its whole trace if asked)."""
    trace = result.trace
    route = route_summary(
        trace.decision,
        tier=result.tier,
        backend=trace.backend,
        escalated=result.escalated,
        escalations=trace.escalations,
        turn_id=trace.turn_id,
        attempts=trace.attempts,
    )
    if result.shadowed:
        route["shadowed"] = True
    if with_trace:
        route["trace"] = trace.to_dict()
    return route


def stream_route(stream: RoutedStream | AsyncRoutedStream, policy: Policy) -> dict[str, Any]:
    """Return :func:`route_summary` of a started stream (the serving tier is known)."""
    tier = stream.tier
    return route_summary(
        stream.decision,
        tier=tier,
        backend=policy.backend_for(tier) if tier is not None else None,
        escalated=stream.escalated,
        turn_id=stream.turn_id,
        attempts=stream.attempts,
    )


def usage_dict(usage: Usage) -> dict[str, Any]:
    """Return usage in OpenAI's shape."""
    out: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_input_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_input_tokens}
    return out


def _finish(reason: str | None) -> str:
    return reason if reason is not None and reason in _FINISH else "stop"


def completion_body(
    completion: Completion,
    *,
    completion_id: str,
    model: str,
    route: Mapping[str, Any] | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """Return ``completion`` as a ``chat.completion`` object.

    Args:
        completion: What the router returned.
        completion_id: The ``id``.
        model: Model name to report when the backend reported none.
        route: The ``tiered_router`` object to add, if any.
        created: Unix time; now when ``None``.

    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": completion.text if completion.text or not completion.tool_calls else None,
        "refusal": completion.refusal,
    }
    if completion.tool_calls:
        message["tool_calls"] = [call.to_openai() for call in completion.tool_calls]
    if completion.reasoning:
        message["reasoning_content"] = completion.reasoning
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": completion.model or model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish(completion.finish_reason),
            }
        ],
        "usage": usage_dict(completion.usage),
    }
    if route is not None:
        body["tiered_router"] = dict(route)
    return body


class ChunkRenderer:
    """Turns our stream chunks into ``chat.completion.chunk`` objects, in OpenAI's order.

    The first object with content carries ``delta.role``; each chunk's text and tool-call
    fragments become one delta; :meth:`finish` then sends the ``finish_reason`` object
    (carrying the ``tiered_router`` route, once the turn is over) and usage (when asked for)
    last, with empty ``choices``.

    Args:
        completion_id: The ``id`` shared by every chunk.
        model: Model name to report until the backend reports one.
        include_usage: End with a usage chunk.
        created: Unix time; now when ``None``.

    """

    def __init__(
        self,
        *,
        completion_id: str,
        model: str,
        include_usage: bool = False,
        created: int | None = None,
    ) -> None:
        self.completion_id = completion_id
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time()) if created is None else created
        self.usage: Usage | None = None
        self._started = False
        self._finish_reason: str | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def render(self, chunk: CompletionChunk) -> list[dict[str, Any]]:
        """Return the objects for one of our chunks (possibly none)."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.finish_reason is not None and self._finish_reason is None:
            self._finish_reason = chunk.finish_reason  # sent by finish(), with the route
        if not (chunk.text or chunk.reasoning or chunk.tool_calls):
            return []  # the role goes out with the first content: one write fewer
        delta: dict[str, Any] = {}
        if not self._started:
            self._started = True
            delta["role"] = "assistant"
            delta["content"] = ""
        if chunk.text:
            delta["content"] = chunk.text
        if chunk.reasoning:
            delta["reasoning_content"] = chunk.reasoning
        if chunk.tool_calls:
            calls = []
            for d in chunk.tool_calls:
                call: dict[str, Any] = {"index": d.index}
                if d.id:
                    call["id"] = d.id
                    call["type"] = "function"
                function: dict[str, Any] = {"arguments": d.arguments}
                if d.name:
                    function["name"] = d.name
                call["function"] = function
                calls.append(call)
            delta["tool_calls"] = calls
        return [self._chunk(delta)]

    def finish(self, route: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Return the closing objects: the finish chunk, then usage if asked for.

        Args:
            route: The ``tiered_router`` object, added to the finish chunk.

        """
        out: list[dict[str, Any]] = []
        if not self._started:
            self._started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        out.append(self._chunk({}, _finish(self._finish_reason)))
        if route is not None:
            out[-1]["tiered_router"] = dict(route)
        if self.include_usage:
            last = self._chunk({})
            last["choices"] = []
            last["usage"] = usage_dict(self.usage or Usage())
            out.append(last)
        return out
