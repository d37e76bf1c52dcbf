"""JSON parsing and cached, compiled JSON Schema validators for the gate.

Compiling a schema costs far more than using it, and an agent sends the same tools and
the same ``response_format`` turn after turn, so validators are compiled once and kept in
a :class:`SchemaCache`: looked up first by the identity of the schema mapping (no
hashing at all on the hot path), then by its canonical JSON text. Each schema is checked
against its meta-schema once, when it is compiled; a broken schema becomes a cached
validator that reports the problem as a failure reason instead of raising.

Two engines: ``jsonschema-rs`` (Rust, about 100x faster on large drafts; used when it is
installed) and ``jsonschema`` (pure Python, always available). Both speak Draft 4 to
2020-12, pick the draft from ``$schema`` (2020-12 when absent), never fetch remote
``$ref`` targets, and give reasons in the same ``$.path: message`` shape.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tiered_router import _limits

__all__ = [
    "Engine",
    "SchemaCache",
    "SchemaCacheInfo",
    "SchemaValidator",
    "cache_info",
    "default_schema_cache",
    "json_path",
    "parse_json",
    "parse_strict_json",
]

Engine = Literal["auto", "jsonschema", "jsonschema-rs"]
"""Which validator library compiles schemas; ``auto`` prefers ``jsonschema-rs``."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_MESSAGE = 240


def json_path(parts: Iterable[str | int]) -> str:
    """Render a location inside a JSON document as a JSON path: ``$.items[3].name``."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


@functools.cache
def _fast_loads() -> Callable[[str], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def parse_json(text: str) -> Any:
    """Parse strict JSON (RFC 8259: no ``NaN`` or ``Infinity``).

    Uses ``orjson`` when it is installed; whatever it rejects is parsed again by the
    standard library, which gives the verdict and a message that says where the problem
    is. (``orjson`` reads integers beyond 64 bits as floats: fine for validation.)

    Raises:
        ValueError: When the text is not valid JSON (``json.JSONDecodeError`` or a
            ``NaN``/``Infinity`` constant), or is nested deeper than 128 levels
            (``JSONTooDeep``: deeper documents overflow the stack of the parser or of the
            schema validator).
    """
    fast = _fast_loads()
    value: Any = _UNREAD
    if fast is not None:
        try:
            value = fast(text)
        except ValueError:
            pass  # the standard library below gives the verdict and a located message
    if value is _UNREAD:
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except RecursionError as exc:
            raise _limits.JSONTooDeep(
                f"JSON nested deeper than {_limits.MAX_JSON_DEPTH} levels"
            ) from exc
    if _limits.brackets(text) > _limits.MAX_JSON_DEPTH:
        _limits.check_depth(value)  # deeper documents break the recursive walks that follow
    return value


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is beyond a float's range")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise ValueError(f"the number {text[:40]}... is beyond a float's range") from None
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def parse_strict_json(text: str) -> Any:
    r""":func:`parse_json`, and a value every client reads alike: what a tool call may carry.

    Also refuses a number beyond a float's range (``1e400`` reads as infinity, and so does
    an integer of 400 digits in JavaScript), an object that gives a key twice (clients keep
    the first or the last), and a lone surrogate (``"\ud800"``: not text in UTF-8).

    Raises:
        ValueError: When the text is any of these, or not JSON (as :func:`parse_json`).
    """
    value = parse_json(text)  # depth bounded, NaN refused, a located message
    value = json.loads(
        text,
        parse_constant=_reject_constant,
        parse_float=_finite,
        parse_int=_finite_int,
        object_pairs_hook=_unique,
    )
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("a string holds a lone surrogate (not UTF-8 text)") from exc
    return value


_UNREAD: Any = object()


class SchemaValidator(Protocol):
    """A compiled schema."""

    @property
    def problem(self) -> str | None:
        """Why the schema itself is unusable (invalid, unresolvable ``$ref``), or ``None``."""
        ...

    def errors(self, instance: Any, *, limit: int = 5) -> tuple[str, ...]:
        """Return up to ``limit`` reasons ``instance`` is invalid; ``()`` when it is valid.

        When there are more, a last reason says how many were left out.
        """
        ...


def _shorten(message: str) -> str:
    message = message.splitlines()[0] if message else message
    if len(message) > _MAX_MESSAGE:
        return message[: _MAX_MESSAGE - 3] + "..."
    return message


def _render(
    found: Iterable[tuple[Sequence[str | int], str, str | None]], limit: int
) -> tuple[str, ...]:
    reasons: list[str] = []
    more = 0
    for path, message, missing in found:
        if len(reasons) >= limit:
            more += 1
            continue
        # a missing property is reported at its own path, where the user will look for it
        parts = [*path, missing] if missing is not None else path
        reasons.append(f"{json_path(parts)}: {_shorten(message)}")
    if more:
        reasons.append(f"... and {more} more error{'s' if more > 1 else ''}")
    return tuple(reasons)


@dataclass(frozen=True, slots=True)
class _BrokenSchema:
    reason: str

    @property
    def problem(self) -> str | None:
        return self.reason

    def errors(self, instance: Any, *, limit: int = 5) -> tuple[str, ...]:
        return (self.reason,)


@dataclass(frozen=True, slots=True)
class _RustValidator:
    validator: Any
    required_kind: Any

    @property
    def problem(self) -> str | None:
        return None

    def errors(self, instance: Any, *, limit: int = 5) -> tuple[str, ...]:
        if self.validator.is_valid(instance):
            return ()
        return _render(
            (
                (
                    e.instance_path,
                    e.message,
                    e.kind.property if isinstance(e.kind, self.required_kind) else None,
                )
                for e in self.validator.iter_errors(instance)
            ),
            limit,
        )


def _missing_property(error: Any) -> str | None:
    if error.validator != "required" or not isinstance(error.validator_value, list):
        return None
    for prop in error.validator_value:
        if isinstance(prop, str) and error.message.startswith(repr(prop)):
            return prop
    return None


@dataclass(frozen=True, slots=True)
class _PythonValidator:
    validator: Any

    @property
    def problem(self) -> str | None:
        return None

    def errors(self, instance: Any, *, limit: int = 5) -> tuple[str, ...]:
        from referencing.exceptions import Unresolvable

        try:
            if self.validator.is_valid(instance):
                return ()
            found = [
                (list(e.absolute_path), e.message, _missing_property(e))
                for e in self.validator.iter_errors(instance)
            ]
        except Unresolvable as exc:
            return (f"invalid schema: unresolvable $ref: {_shorten(str(exc))}",)
        except RecursionError:
            return (_TOO_DEEP,)
        return _render(found, limit)


_TOO_DEEP = (
    "invalid schema: nested too deeply for the jsonschema engine to check (the fast-schema "
    "extra's jsonschema-rs engine reports where)"
)


def _no_remote(uri: str) -> Any:
    raise ValueError(f"remote $ref {uri!r} is not fetched by the gate")


def _compile_rust(canonical: str, *, check_formats: bool) -> SchemaValidator:
    import jsonschema_rs

    try:
        validator = jsonschema_rs.validator_for(
            canonical, validate_formats=check_formats, retriever=_no_remote
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        path = getattr(exc, "instance_path", None)
        where = f" at {json_path(path)}" if path else ""
        return _BrokenSchema(f"invalid schema{where}: {_shorten(message)}")
    return _RustValidator(validator, jsonschema_rs.ValidationErrorKind.Required)


def _compile_python(schema: Any, *, check_formats: bool) -> SchemaValidator:
    from jsonschema import Draft202012Validator, SchemaError, validators

    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = json_path(exc.absolute_path)
        return _BrokenSchema(f"invalid schema at {where}: {_shorten(exc.message)}")
    except RecursionError:
        return _BrokenSchema(_TOO_DEEP)
    checker = cls.FORMAT_CHECKER if check_formats else None
    return _PythonValidator(cls(schema, format_checker=checker))


def _resolve_engine(engine: Engine) -> Literal["jsonschema", "jsonschema-rs"]:
    if engine == "jsonschema":
        return "jsonschema"
    if importlib.util.find_spec("jsonschema_rs") is not None:
        return "jsonschema-rs"
    if engine == "jsonschema-rs":
        from tiered_router.exceptions import missing_extra

        raise ImportError(
            missing_extra("fast-schema", 'the "jsonschema-rs" engine needs jsonschema-rs')
        )
    return "jsonschema"


def _plain(value: Any) -> Any:
    # json.dumps only knows dict and list; schemas may arrive as other Mappings/Sequences
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaCacheInfo:
    """Counters of a :class:`SchemaCache`.

    Attributes:
        hits: Lookups answered from the cache (by identity or by canonical JSON).
        misses: Lookups that had to compile.
        compiled: Schemas compiled so far (a broken schema counts: it is compiled once
            into a validator that reports the problem).
        size: Validators held now.
        maxsize: Most validators held; the least recently used one is dropped first.
        engine: The engine in use (``jsonschema-rs`` or ``jsonschema``), or ``auto`` before
            the first compile.
    """

    hits: int
    misses: int
    compiled: int
    size: int
    maxsize: int
    engine: str


class SchemaCache:
    """A thread-safe LRU cache of compiled JSON Schema validators.

    Schemas are looked up by the identity of the mapping first, then by canonical JSON
    (sorted keys), so an equal schema built anew each turn still hits. Treat a schema as
    immutable once it has been validated against: a mapping mutated in place keeps its
    old validator until it is evicted.

    Example:
        ```python
        cache = SchemaCache(maxsize=64)
        errors = cache.validator({"type": "object", "required": ["a"]}).errors({})
        assert errors == ("$.a: 'a' is a required property",)  # jsonschema engine wording
        ```

    Args:
        maxsize: Most validators held.
        engine: ``auto`` (``jsonschema-rs`` when installed, else ``jsonschema``),
            ``jsonschema`` or ``jsonschema-rs``.
        check_formats: Assert ``format`` (``email``, ``date-time``, ``uuid``, ...) instead
            of treating it as an annotation.
    """

    def __init__(
        self, *, maxsize: int = 256, engine: Engine = "auto", check_formats: bool = True
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"SchemaCache.maxsize: must be >= 1, got {maxsize}")
        if engine not in ("auto", "jsonschema", "jsonschema-rs"):
            raise ValueError(
                f"SchemaCache.engine: unknown engine {engine!r}; "
                "known: auto, jsonschema, jsonschema-rs"
            )
        self.maxsize = maxsize
        self.check_formats = check_formats
        self._engine: Engine = engine
        self._by_id: OrderedDict[int, tuple[object, SchemaValidator]] = OrderedDict()
        self._by_text: OrderedDict[str, SchemaValidator] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._compiled = 0

    @property
    def engine(self) -> str:
        """The engine in use, or ``auto`` before the first schema was compiled."""
        return self._engine

    def validator(self, schema: Any) -> SchemaValidator:
        """Return the compiled validator of ``schema`` (a mapping, or ``True``/``False``)."""
        key = id(schema)
        entry = self._by_id.get(key)
        if entry is not None and entry[0] is schema:
            # no lock: a stale LRU order or hit count is harmless; the entry itself is right
            self._hits += 1
            return entry[1]
        with self._lock:
            return self._lookup(schema, key)

    def _lookup(self, schema: Any, key: int) -> SchemaValidator:
        try:
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=_plain)
        except (TypeError, ValueError) as exc:
            self._misses += 1
            return _BrokenSchema(f"invalid schema: not JSON ({exc})")
        found = self._by_text.get(text)
        if found is None:
            self._misses += 1
            found = self._compile(text)
            self._compiled += 1
            self._by_text[text] = found
            if len(self._by_text) > self.maxsize:
                self._by_text.popitem(last=False)
        else:
            self._hits += 1
            self._by_text.move_to_end(text)
        # hold the schema itself: its id cannot be reused while the entry lives
        self._by_id[key] = (schema, found)
        if len(self._by_id) > self.maxsize:
            self._by_id.popitem(last=False)
        return found

    def _compile(self, text: str) -> SchemaValidator:
        if self._engine == "auto":
            self._engine = _resolve_engine("auto")
        elif self._engine == "jsonschema-rs":
            _resolve_engine("jsonschema-rs")
        plain = json.loads(text)
        if not isinstance(plain, (dict, bool)):
            return _BrokenSchema(f"invalid schema: must be an object, got {type(plain).__name__}")
        if self._engine == "jsonschema-rs":
            return _compile_rust(text, check_formats=self.check_formats)
        return _compile_python(plain, check_formats=self.check_formats)

    def cache_info(self) -> SchemaCacheInfo:
        """Return the cache's counters."""
        with self._lock:
            return SchemaCacheInfo(
                hits=self._hits,
                misses=self._misses,
                compiled=self._compiled,
                size=len(self._by_text),
                maxsize=self.maxsize,
                engine=self._engine,
            )

    def clear(self) -> None:
        """Drop every validator and reset the counters."""
        with self._lock:
            self._by_id.clear()
            self._by_text.clear()
            self._hits = self._misses = self._compiled = 0

    def __repr__(self) -> str:
        return f"SchemaCache(maxsize={self.maxsize}, engine={self._engine!r})"


_DEFAULT_CACHE = SchemaCache()


def default_schema_cache() -> SchemaCache:
    """Return the process-wide cache the built-in checks use unless given their own."""
    return _DEFAULT_CACHE


def cache_info() -> SchemaCacheInfo:
    """Return the counters of the process-wide schema cache."""
    return _DEFAULT_CACHE.cache_info()
