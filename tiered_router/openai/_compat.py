"""What makes the drop-in client a drop-in: openai's errors, raw responses, parse, models.

:mod:`tiered_router.openai` keeps the routing; this module holds the pieces of openai-python's
surface around it, so that code written for ``openai.OpenAI`` keeps working unchanged:

- :func:`translate_error`: our errors as openai's exception classes (``except
  openai.APIError`` keeps catching), still instances of our own classes and carrying the trace;
- :class:`RawResponse`: what ``with_raw_response.create`` returns (``.headers``, ``.parse()``);
- :func:`parse_arguments` and :func:`parsed_completion`: ``chat.completions.parse``;
- :func:`model_page`: ``models.list()``;
- :func:`passthrough_client`: the frontier backend's own openai client, for every other
  resource (embeddings, responses, files, ...).

It imports ``openai`` at the top; :mod:`tiered_router.openai` imports it on first use.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import openai
from openai.lib._parsing._completions import (
    parse_chat_completion,
    type_to_response_format_param,
)
from openai.pagination import AsyncPage, SyncPage
from openai.types import Model
from openai.types.chat import ChatCompletion

from tiered_router import _http
from tiered_router.exceptions import (
    AllTiersFailed,
    BackendConnectionError,
    BackendRateLimited,
    BackendStatusError,
    BackendTimeout,
    GateFailed,
    PolicyError,
    TieredRouterError,
)
from tiered_router.openai._wire import UnknownModel

if TYPE_CHECKING:
    from tiered_router.router import RoutedResult, Router

__all__ = [
    "ROUTE_HEADERS",
    "AsyncModelList",
    "AsyncRawCompletions",
    "RawCompletions",
    "RawResponse",
    "model_page",
    "parse_arguments",
    "parsed_completion",
    "passthrough_client",
    "translate_error",
]

_URL = "http://tiered-router.invalid/v1/chat/completions"
_STATUS_CLASSES: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}
_mixed: dict[tuple[type[BaseException], type[BaseException]], type[BaseException]] = {}
_mixed_lock = threading.Lock()

ROUTE_HEADERS = ("tier", "escalated", "score", "rule", "backend")
"""Route keys sent as ``x-tiered-router-<key>`` headers on raw responses."""


def _mix(sdk: type[BaseException], ours: type[BaseException]) -> type[BaseException]:
    """Return a class that is both ``sdk`` (openai's) and ``ours`` (cached)."""
    if issubclass(ours, sdk):
        return ours
    key = (sdk, ours)
    with _mixed_lock:
        found = _mixed.get(key)
        if found is None:
            doc = (
                f"{ours.__name__} as openai's {sdk.__name__}: ``except openai.{sdk.__name__}`` "
                f"and ``except {ours.__name__}`` both catch it."
            )
            found = _mixed[key] = type(ours.__name__, (sdk, ours), {"__doc__": doc})
            found.__module__ = "tiered_router.openai"
    return found


def _sdk_class(exc: BaseException) -> tuple[type[BaseException], int | None]:
    """The openai class for ``exc`` and the HTTP status it stands for (if any)."""
    cause: BaseException = exc
    if isinstance(exc, AllTiersFailed) and exc.errors:
        cause = exc.errors[-1]  # the last tier's failure is what the caller would have seen
    if isinstance(exc, UnknownModel):
        return openai.NotFoundError, 404
    if isinstance(exc, PolicyError):
        return openai.OpenAIError, None  # like the SDK's own "api_key must be set"
    if isinstance(exc, ValueError):
        return openai.BadRequestError, 400
    if isinstance(cause, BackendTimeout):
        return openai.APITimeoutError, None
    if isinstance(cause, BackendConnectionError):
        return openai.APIConnectionError, None
    if isinstance(cause, (BackendRateLimited, BackendStatusError)):
        status = int(getattr(cause, "status_code", 500))
        if status >= 500:
            return openai.InternalServerError, status
        return _STATUS_CLASSES.get(status, openai.APIStatusError), status
    return openai.APIError, None


def translate_error(exc: BaseException) -> BaseException:
    """Return ``exc`` as an instance of openai's matching exception class.

    The result is also an instance of ``exc``'s own class, has its attributes (``trace``,
    ``attempts``, ``errors``, ``verdict``...) and ``exc`` as its cause; HTTP-status classes
    (``RateLimitError``, ``NotFoundError``...) get a synthetic ``response`` whose body is the
    error in OpenAI's shape. Errors that are neither ours nor ``ValueError`` come back as is.
    """
    if not isinstance(exc, (TieredRouterError, ValueError)):
        return exc
    sdk, status = _sdk_class(exc)
    cls = _mix(sdk, type(exc))
    err: Any = cls.__new__(cls)
    err.__dict__.update(vars(exc))
    err.args = exc.args
    message = str(exc)
    code = "model_not_found" if isinstance(exc, UnknownModel) else type(exc).__name__
    body = {"message": message, "type": "tiered_router_error", "param": None, "code": code}
    request = _http.Request("POST", _URL)
    err.message, err.request, err.body = message, request, body
    err.code, err.param, err.type = code, None, body["type"]
    if status is not None:
        err.response = _http.Response(status, json={"error": body}, request=request)
        err.status_code = status
        err.request_id = None
    err.__cause__ = exc
    return err  # type: ignore[no-any-return]


class RawResponse:
    """What ``chat.completions.with_raw_response.create`` returns (openai's raw response).

    Attributes:
        http_response: A synthetic HTTP response: status 200, the JSON body, and the route
            as ``x-tiered-router-*`` headers.
        headers: Its headers.
        status_code: 200.

    """

    def __init__(self, parsed: Any, route: Mapping[str, Any] | None) -> None:
        self._parsed = parsed
        headers = {"content-type": "application/json"}
        for key in ROUTE_HEADERS:
            value = (route or {}).get(key)
            if value is not None:
                headers[f"x-tiered-router-{key}"] = (
                    str(value).lower() if isinstance(value, bool) else str(value)
                )
        body = (
            parsed.model_dump_json(warnings=False) if hasattr(parsed, "model_dump_json") else "{}"
        )
        request = _http.Request("POST", _URL)
        self.http_response = _http.Response(
            200, content=body.encode(), headers=headers, request=request
        )
        self.http_request = request
        self.headers = self.http_response.headers
        self.status_code = 200
        self.request_id: str | None = None

    @property
    def content(self) -> bytes:
        """The body bytes."""
        return self.http_response.content

    @property
    def text(self) -> str:
        """The body as text."""
        return self.http_response.text

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.http_response.content)

    def parse(self) -> Any:
        """Return the object ``create`` would have returned."""
        return self._parsed

    def __repr__(self) -> str:
        return f"<RawResponse [200] {type(self._parsed).__name__}>"


def parse_arguments(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """Split ``parse`` arguments into ``create`` arguments, the response type and the tools.

    A pydantic class (or dataclass) in ``response_format`` becomes OpenAI's strict
    ``json_schema`` response format, as the SDK sends it; the gate's ``json_schema`` check
    validates fast drafts against that schema.

    Raises:
        TypeError: When ``stream`` is given (use ``create(stream=True)``), as in the SDK.

    """
    if kwargs.get("stream"):
        raise TypeError("parse() does not support stream=True; use create(stream=True)")
    out = dict(kwargs)
    response_format = out.get("response_format", openai.omit)
    if response_format is None:
        response_format = openai.omit
    tools = out.get("tools", openai.omit)
    converted = type_to_response_format_param(response_format)
    if converted is openai.omit:
        out.pop("response_format", None)
    else:
        out["response_format"] = converted
    return out, response_format, tools


def parsed_completion(
    completion: ChatCompletion,
    response_format: Any,
    tools: Any,
    *,
    result: RoutedResult | None = None,
) -> Any:
    """Return ``completion`` as a ``ParsedChatCompletion`` (``message.parsed`` filled).

    Args:
        completion: The routed completion.
        response_format: The class (or dict) given to ``parse``.
        tools: The tools given to ``parse``.
        result: The routed result, whose trace a parse failure carries.

    Raises:
        GateFailed: As openai's ``LengthFinishReasonError`` / ``ContentFilterFinishReasonError``
            where the SDK raises those, else as ``openai.APIError``: the answer does not parse
            (both tiers' drafts failed the gate, and the policy returned the last one).

    """
    try:
        parsed = parse_chat_completion(
            response_format=response_format,
            input_tools=tools if tools is not None else openai.omit,
            chat_completion=completion,
        )
    except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
        raise _parse_failure(exc, result, completion, sdk=type(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError, bad JSON in tool arguments
        raise _parse_failure(exc, result, completion, sdk=openai.APIError) from exc
    extra = getattr(completion, "tiered_router", None)
    if extra is not None:
        parsed.tiered_router = extra  # type: ignore[attr-defined]
    return parsed


def _parse_failure(
    exc: BaseException,
    result: RoutedResult | None,
    completion: ChatCompletion,
    *,
    sdk: type[BaseException],
) -> BaseException:
    """``GateFailed`` (with the turn's trace) as openai's ``sdk`` class, for ``parse``."""
    from tiered_router.gate import CheckFailure, Verdict

    trace = result.trace if result is not None else None
    attempts = trace.attempts if trace is not None else ()
    verdicts = [a.verdict for a in attempts if a.verdict is not None]
    reason = " ".join(str(exc).split())
    if isinstance(exc, ValueError) and hasattr(exc, "errors"):
        reason = "; ".join(
            f"{'.'.join(map(str, e.get('loc', ()))) or '$'}: {e.get('msg')}"
            for e in exc.errors()[:3]
        )
    tier = result.tier if result is not None else "?"
    message = f"parse: the {tier} tier's answer does not parse: {reason}"
    failed = [v for v in verdicts if not v.passed]
    if failed and len(failed) == len(verdicts):
        message += f" (every draft failed the gate: {'; '.join(failed[-1].reasons[:2])})"
    verdict = (
        verdicts[-1]
        if verdicts and not verdicts[-1].passed
        else Verdict(
            passed=False, failures=(CheckFailure(check="parse", reason=reason),), checks=("parse",)
        )
    )
    ours = GateFailed(message, verdict=verdict, attempts=attempts, trace=trace)
    if sdk is openai.APIError:
        return translate_error(ours)
    cls = _mix(sdk, GateFailed)
    err: Any = cls.__new__(cls)
    err.__dict__.update(vars(ours))
    err.args, err.completion = (message,), completion
    return err  # type: ignore[no-any-return]


def _models(ids: list[str]) -> list[Model]:
    return [Model(id=i, object="model", created=0, owned_by="tiered-router") for i in ids]


def model_page(ids: list[str]) -> SyncPage[Model]:
    """Return ``models.list()``'s page for the names the router serves."""
    return SyncPage[Model](data=_models(ids), object="list")


class AsyncModelList:
    """``await client.models.list()`` or ``async for model in client.models.list()``."""

    def __init__(self, ids: list[str]) -> None:
        self._page = AsyncPage[Model](data=_models(ids), object="list")

    def __await__(self) -> Generator[Any, None, AsyncPage[Model]]:
        async def page() -> AsyncPage[Model]:
            return self._page

        return page().__await__()

    async def __aiter__(self) -> AsyncIterator[Model]:
        for model in self._page.data:
            yield model

    def __iter__(self) -> Iterator[Model]:
        return iter(self._page.data)


def passthrough_client(router: Router, *, asynchronous: bool) -> Any:
    """Return an openai client for the frontier backend's endpoint, key and headers.

    Used for every resource the router does not route (``embeddings``, ``responses``,
    ``files``, ``chat.completions.retrieve``...). The key is read now, at first use.

    Raises:
        PolicyError: When the frontier backend is not an OpenAI-compatible endpoint, or its
            key is missing.

    """
    from tiered_router.backends.presets import backend_kwargs

    name = router.policy.backend_for("frontier")
    config = router.policy.backends[name]
    if config.type != "openai":
        raise PolicyError(
            f"only chat completions are routed; other resources go to the frontier backend, "
            f"and {name!r} is not an OpenAI-compatible endpoint (type {config.type!r})",
            field=f"backends.{name}.type",
        )
    kw = backend_kwargs(name, config)
    cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return cls(
        api_key=kw["api_key"] or "none",
        base_url=kw["base_url"],
        default_headers=dict(kw["headers"]) or None,
    )


class RawCompletions:
    """``chat.completions.with_raw_response`` of the sync client."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    def create(self, **kwargs: Any) -> Any:
        """Like ``create``, returning a raw response whose ``.parse()`` gives the result."""
        out = self._completions.create(**kwargs)
        return RawResponse(out, getattr(out, "tiered_router", None))

    def parse(self, **kwargs: Any) -> Any:
        """Like ``parse``, returning a raw response."""
        out = self._completions.parse(**kwargs)
        return RawResponse(out, getattr(out, "tiered_router", None))


class AsyncRawCompletions:
    """``chat.completions.with_raw_response`` of the async client."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    async def create(self, **kwargs: Any) -> Any:
        """Like ``create``, returning a raw response whose ``.parse()`` gives the result."""
        out = await self._completions.create(**kwargs)
        return RawResponse(out, getattr(out, "tiered_router", None))

    async def parse(self, **kwargs: Any) -> Any:
        """Like ``parse``, returning a raw response."""
        out = await self._completions.parse(**kwargs)
        return RawResponse(out, getattr(out, "tiered_router", None))
