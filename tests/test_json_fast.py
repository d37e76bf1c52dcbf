"""tiered_router._json: orjson's speed, the standard library's results."""

from __future__ import annotations

import json
import math

import pytest

from tiered_router import _json, _limits


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, "x", null, true]}',
        '{"big": 123456789012345678901234567890}',  # past 64 bits: orjson reads a float
        "[18446744073709551616, -9223372036854775809, 0.12345678901234567890123]",
        '{"x": NaN, "y": -Infinity}',  # not JSON, but json.loads reads it
        '"lone \\ud800 surrogate"',
        '{"dup": 1, "dup": 2}',
        '"caf\\u00e9 \\u2603"',
        "[1234567890123456789, 123456789012345678]",  # 19 digits: the standard library's
        '["digits \u00e9 12345678901234567890123", 98765432109876543210987654321]',
    ],
)
@pytest.mark.parametrize("as_bytes", [True, False])
def test_loads_reads_what_the_standard_library_reads(text: str, as_bytes: bool) -> None:
    ours, std = _json.loads(text.encode() if as_bytes else text), json.loads(text)
    if isinstance(std, dict) and any(isinstance(v, float) and math.isnan(v) for v in std.values()):
        assert math.isnan(ours["x"]) and ours["y"] == -math.inf
    else:
        assert ours == std
        assert [type(v) for v in _leaves(ours)] == [type(v) for v in _leaves(std)]


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_loads_fails_like_the_standard_library() -> None:
    for bad in (b"{not json", b'{"a": 1,}', b"\xff"):
        with pytest.raises(ValueError) as ours:
            _json.loads(bad)
        with pytest.raises(ValueError) as std:
            json.loads(bad)
        assert type(ours.value) is type(std.value)
        assert str(ours.value) == str(std.value)
    with pytest.raises(_limits.JSONTooDeep):
        _limits.loads("[" * 5000 + "]" * 5000)  # orjson refuses it; json recurses too deep


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, "x", None, True], "é": "☃"},
        {1: "int key"},  # orjson refuses non-string keys
        {"big": 2**70},
    ],
)
def test_dumps_writes_what_the_standard_library_writes(value: object) -> None:
    out = _json.dumps(value)
    assert isinstance(out, bytes)
    assert json.loads(out.decode("utf-8", "surrogatepass")) == json.loads(
        json.dumps(value, ensure_ascii=False)
        .encode("utf-8", "surrogatepass")
        .decode("utf-8", "surrogatepass")
    )
    assert b" " not in out.replace(b"int key", b"")  # compact


def test_dumps_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(UnicodeEncodeError):
        _json.dumps({"s": "lone \ud800"})  # never sent upstream as invalid UTF-8
    with pytest.raises(TypeError):
        _json.dumps({"x": object()})
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        _json.dumps(loop)
