"""How :class:`~tiered_router.backends.openai_compat.OpenAICompatBackend` builds a request.

From a :class:`~tiered_router.backends._base.CompletionRequest` to the keyword arguments of
``chat.completions.create`` in the server's dialect: the backend's own parameters, the
request's, diffusion fields and ``extra_body`` merged; then the dialect's shape
(:mod:`tiered_router.backends._dialect_shape`), the one place a server's rules (roles,
fields, value ranges, ``stop``, ``tool_choice``) are applied. Every change is recorded as a
conversion, so a trace says what was altered on the way.
"""

from __future__ import annotations

import logging
from typing import Any

from tiered_router.backends import _dialect, _dialect_shape
from tiered_router.backends import _openai_convert as _convert
from tiered_router.backends._base import CompletionRequest
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
    dialect: _dialect.DialectProfile
    _params: dict[str, Any]
    _diffusion: dict[str, Any]
    _extra_body: dict[str, Any]

    def _prepare(
        self, request: CompletionRequest, *, stream: bool
    ) -> tuple[dict[str, Any], _dialect_shape.Plan]:
        """Return the SDK keyword arguments in the server's dialect, and the reply's plan.

        Raises:
            CapabilityError: The request needs what the dialect cannot express; no call
                is made.

        """
        kwargs = self._build_kwargs(request, stream=stream)
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
        if plan.conversions and logger.isEnabledFor(logging.DEBUG):  # joined only when shown
            logger.debug("backend %s: %s", self.name, "; ".join(plan.conversions))
        return out, plan

    def _build_kwargs(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        """Map a request to ``chat.completions.create`` keyword arguments (before shaping)."""
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
        messages = list(request.messages)  # copied by the shape, never changed here
        tools = [dict(t) for t in request.tools or ()]
        if not tools:
            # OpenAI-style servers reject tool_choice without tools
            params.pop("tool_choice", None)
            params.pop("parallel_tool_calls", None)

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
            if self.dialect.stream_options and "stream_options" not in kwargs:
                kwargs["stream_options"] = {"include_usage": True}
        if extra_body:
            kwargs["extra_body"] = extra_body
        if extra_headers:
            kwargs["extra_headers"] = extra_headers
        kwargs["timeout"] = request.timeout_s if request.timeout_s is not None else self.timeout_s
        return kwargs
