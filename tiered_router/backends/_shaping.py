"""How :class:`~tiered_router.backends.openai_compat.OpenAICompatBackend` builds a request.

From a :class:`~tiered_router.backends._base.CompletionRequest` to the keyword arguments of
``chat.completions.create`` in the server's dialect: the backend's own parameters, the
request's, diffusion fields and ``extra_body`` merged; the provider's quirks applied (roles,
dropped fields, clamped ranges, ``tool_choice`` rewrites); then the dialect's shape. Every
change is recorded as a note, so a trace says what was altered on the way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tiered_router._types import Message
from tiered_router.backends import _dialect, _dialect_shape
from tiered_router.backends import _openai_convert as _convert
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends.presets import Quirks
from tiered_router.exceptions import CapabilityError

__all__ = ["RequestShaping"]

logger = logging.getLogger("tiered_router.backends.openai_compat")

_OWNED = frozenset({"model", "messages", "stream", "tools", "response_format", "timeout"})
"""Request fields the backend sets itself; a parameter of the same name is ignored."""


class RequestShaping:
    """The request-building half of the OpenAI-compatible backend (a mixin).

    The backend sets the attributes declared here in its ``__init__``.
    """

    name: str
    model: str
    supports_tools: bool
    timeout_s: float | None
    quirks: Quirks
    dialect: _dialect.DialectProfile
    _params: dict[str, Any]
    _diffusion: dict[str, Any]
    _extra_body: dict[str, Any]
    _warned: set[str]

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("backend %s: " + message, self.name, *args)

    def _prepare(
        self, request: CompletionRequest, *, stream: bool
    ) -> tuple[dict[str, Any], _dialect_shape.Plan]:
        """Return the SDK keyword arguments in the server's dialect, and the reply's plan.

        Raises:
            CapabilityError: The request needs what the dialect cannot express; no call
                is made.

        """
        notes: list[str] = []  # what the quirks changed, recorded with the dialect's
        client_stop: list[str] = []  # stop sequences past the server's limit
        kwargs = self._build_kwargs(request, stream=stream, notes=notes, client_stop=client_stop)
        extra_body = kwargs.pop("extra_body", None) or {}
        frame: dict[str, Any] = {
            k: kwargs.pop(k) for k in ("extra_headers", "timeout") if k in kwargs
        }
        body, plan = _dialect_shape.shape(
            self.dialect,
            {**kwargs, **extra_body},
            backend=self.name,
            output_tokens=request.output_tokens,
        )
        sdk_params = _convert.sdk_param_names()
        out: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in body.items():
            (out if key in sdk_params else extra)[key] = value
        if extra:
            out["extra_body"] = extra
        out.update(frame)
        if notes:
            plan = replace(plan, conversions=(*notes, *plan.conversions))
        if client_stop:  # cut here, so text after them never reaches the caller
            plan = replace(plan, stop=(*plan.stop, *client_stop))
        if plan.conversions:
            logger.debug("backend %s: %s", self.name, "; ".join(plan.conversions))
        return out, plan

    def _build_kwargs(
        self,
        request: CompletionRequest,
        *,
        stream: bool,
        notes: list[str] | None = None,
        client_stop: list[str] | None = None,
    ) -> dict[str, Any]:
        """Map a request to ``chat.completions.create`` keyword arguments.

        What the quirks change is appended to ``notes`` when given; stop sequences the
        server cannot take (past its limit) to ``client_stop``, to be applied to the reply.
        """
        notes = [] if notes is None else notes
        client_stop = [] if client_stop is None else client_stop
        if request.tools and not self.supports_tools:
            raise CapabilityError(
                "the request has tools but this backend has tools: false", backend=self.name
            )
        params = {**self._params, **request.params}
        extra_body = {**self._diffusion, **self._extra_body}
        extra_body.update(self._params.get("extra_body") or {})
        extra_body.update(request.params.get("extra_body") or {})
        extra_headers = dict(params.pop("extra_headers", None) or {})
        params.pop("extra_body", None)
        for key in _OWNED & params.keys():
            params.pop(key)
        messages = self._apply_quirks(request.messages, params, extra_body, notes, client_stop)
        tools = self._shape_tools([dict(t) for t in request.tools or ()], params, notes)

        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if request.response_format is not None:
            kwargs["response_format"] = dict(request.response_format)
        sdk_params = _convert.sdk_param_names()
        for key, value in params.items():
            if key in sdk_params:
                kwargs[key] = value
            else:
                extra_body[key] = value
        if stream:
            kwargs["stream"] = True
            if (
                self.quirks.stream_usage
                and self.dialect.stream_options
                and "stream_options" not in kwargs
            ):
                kwargs["stream_options"] = {"include_usage": True}
        if extra_body:
            kwargs["extra_body"] = extra_body
        if extra_headers:
            kwargs["extra_headers"] = extra_headers
        kwargs["timeout"] = request.timeout_s if request.timeout_s is not None else self.timeout_s
        return kwargs

    def _shape_tools(
        self, tools: list[dict[str, Any]], params: dict[str, Any], notes: list[str]
    ) -> list[dict[str, Any]]:
        """Return the tools to send; adjust ``tool_choice`` in ``params`` to match."""
        choice = params.get("tool_choice")
        if tools and self.quirks.simple_tool_choice and choice not in (None, "auto", "required"):
            # same meaning in the two values the provider accepts
            if choice == "none":
                tools = []
            elif isinstance(choice, Mapping):
                fn = choice.get("function")
                name = fn.get("name") if isinstance(fn, Mapping) else None
                only = [t for t in tools if _tool_name(t) == name] if name else []
                if only:
                    tools, params["tool_choice"] = only, "required"
            notes.append(
                f"tool_choice {json.dumps(choice)} -> {len(tools)} tool(s)"
                + (", tool_choice required" if params.get("tool_choice") == "required" else "")
                + f" ({self.quirks.name} quirks)"
            )
        if not tools:
            # OpenAI-style servers reject tool_choice without tools
            params.pop("tool_choice", None)
            params.pop("parallel_tool_calls", None)
        return tools

    def _apply_quirks(
        self,
        messages: Sequence[Message],
        params: dict[str, Any],
        extra_body: dict[str, Any],
        notes: list[str],
        client_stop: list[str],
    ) -> list[Message]:
        """Apply :attr:`quirks` to the request in place; return the messages to send.

        Stop sequences past the server's limit go to ``client_stop`` (applied to the reply).
        """
        q = self.quirks
        out = [dict(m) for m in messages]
        if q.developer_to_system:
            moved = [i for i, m in enumerate(out) if m.get("role") == "developer"]
            for i in moved:
                out[i]["role"] = "system"
            if moved:
                notes.append(f"messages{moved}: developer -> system ({q.name} quirks)")
        for key in q.drop_fields:
            for where in (params, extra_body):
                if key in where:
                    where.pop(key)
                    logger.debug("backend %s: not sending %r (%s quirks)", self.name, key, q.name)
                    notes.append(f"dropped: {key} ({q.name} quirks)")
        for key in q.extra_body_fields & params.keys():
            extra_body[key] = params.pop(key)
        if q.temperature_range is not None and params.get("temperature") is not None:
            params["temperature"] = self._clamp(
                "temperature", params["temperature"], *q.temperature_range, notes=notes
            )
        if q.max_stop is not None and isinstance(params.get("stop"), (list, tuple)):
            stop = list(params["stop"])
            if len(stop) > q.max_stop:
                if q.strict:
                    raise CapabilityError(
                        f"stop: {len(stop)} sequences given, {q.name} accepts at most {q.max_stop}",
                        backend=self.name,
                    )
                notes.append(
                    f"stop: sent the first {q.max_stop} of {len(stop)}, the rest applied to "
                    f"the reply ({q.name} quirks)"
                )
                params["stop"] = stop[: q.max_stop]
                client_stop.extend(s for s in stop[q.max_stop :] if isinstance(s, str) and s)
        if q.max_tokens_range is not None:
            if "max_completion_tokens" in params:
                value = params.pop("max_completion_tokens")
                params.setdefault("max_tokens", value)
                notes.append(f"max_completion_tokens -> max_tokens ({q.name} quirks)")
            if params.get("max_tokens") is not None:
                params["max_tokens"] = int(
                    self._clamp(
                        "max_tokens", params["max_tokens"], *q.max_tokens_range, notes=notes
                    )
                )
        return out

    def _clamp(self, field: str, value: Any, low: float, high: float, *, notes: list[str]) -> Any:
        q = self.quirks
        if isinstance(value, bool) or not isinstance(value, (int, float)) or low <= value <= high:
            return value
        if q.strict:
            raise CapabilityError(
                f"{field}={value!r} is outside the range {q.name} accepts ({low}..{high})",
                backend=self.name,
            )
        clamped = min(max(value, low), high)
        self._warn_once(
            field, "%s=%r is outside %s..%s; sending %r instead", field, value, low, high, clamped
        )
        notes.append(f"{field}: {value!r} -> {clamped!r} ({q.name} quirks)")
        return clamped


def _tool_name(tool: Mapping[str, Any]) -> Any:
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, Mapping) else None
