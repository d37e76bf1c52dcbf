"""The response parser under our HTTP/1.1 client: framing, limits, every split of the bytes."""

from __future__ import annotations

import gzip
import zlib

import pytest

from tiered_router import _http
from tiered_router._http._parser import (
    MAX_HEAD,
    MAX_HEADERS,
    MAX_LINE,
    BodyDecoder,
    ResponseParser,
)

LENGTH = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\nhello world"
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    b"5;name=value;other\r\nhello\r\n1 ; ext\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n"
)
UNTIL_CLOSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhello world"


def _parse(*parts: bytes, eof: bool = False) -> ResponseParser:
    parser = ResponseParser()
    for part in parts:
        parser.feed(part)
    if eof:
        parser.feed_eof()
    return parser


def _body(parser: ResponseParser) -> bytes:
    return b"".join(parser.body)


@pytest.mark.parametrize(
    ("raw", "eof", "reusable"),
    [(LENGTH, False, True), (CHUNKED, False, True), (UNTIL_CLOSE, True, False)],
    ids=["content-length", "chunked", "until-close"],
)
def test_every_split_of_the_bytes_reads_the_same(raw: bytes, eof: bool, reusable: bool) -> None:
    for cut in range(len(raw) + 1):
        parser = _parse(raw[:cut], raw[cut:], eof=eof)
        assert parser.complete, cut
        assert (parser.status_code, _body(parser), parser.reusable) == (
            200,
            b"hello world",
            reusable,
        ), cut
    one_by_one = _parse(*(raw[i : i + 1] for i in range(len(raw))), eof=eof)
    assert one_by_one.complete and _body(one_by_one) == b"hello world"


def test_three_way_splits_of_a_chunked_body() -> None:
    for first in range(0, len(CHUNKED), 3):
        for second in range(first, len(CHUNKED) + 1, 2):
            parser = _parse(CHUNKED[:first], CHUNKED[first:second], CHUNKED[second:])
            assert parser.complete and _body(parser) == b"hello world", (first, second)


def test_headers_are_case_insensitive_and_keep_duplicates() -> None:
    parser = _parse(
        b"HTTP/1.1 201 Created\r\nX-A: 1\r\nx-a: 2\r\nRetry-After:  3 \r\ncontent-length: 0\r\n\r\n"
    )
    assert parser.complete and parser.status_code == 201
    headers = parser.headers
    assert headers is not None
    assert headers["X-A"] == headers["x-a"] == "1, 2"
    assert headers.get("RETRY-AFTER") == "3" and "retry-after" in headers
    assert dict(headers.items())["content-length"] == "0" and len(headers) == 3
    assert headers.get("missing") is None
    assert "1, 2" not in repr(headers)  # values may be secrets: names only


def test_framing_without_a_body_and_interim_answers() -> None:
    for status in (204, 304):
        parser = _parse(b"HTTP/1.1 %d X\r\ncontent-length: 5\r\n\r\n" % status)
        assert parser.complete and _body(parser) == b"" and parser.reusable
    interim = _parse(b"HTTP/1.1 100 Continue\r\n\r\n", LENGTH)
    assert interim.status_code == 200 and _body(interim) == b"hello world"
    empty = _parse(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    assert empty.complete and empty.reusable
    same_twice = _parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok")
    assert _body(same_twice) == b"ok" and same_twice.complete
    listed = _parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\nok")
    assert _body(listed) == b"ok"


@pytest.mark.parametrize(
    ("head", "reusable"),
    [
        (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", False),
    ],
)
def test_which_answers_leave_the_connection_reusable(head: bytes, reusable: bool) -> None:
    parser = _parse(head)
    assert parser.reusable is reusable


def test_extra_bytes_after_an_answer_spoil_the_connection() -> None:
    parser = _parse(LENGTH + b"HTTP/1.1 200 OK\r\n")
    assert parser.complete and _body(parser) == b"hello world"
    assert not parser.reusable


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"HTTP/1.1 OK\r\n\r\n", "invalid status line"),
        (b"ICY 200 OK\r\n\r\n", "invalid status line"),
        (b"HTTP/2 200 OK\r\n\r\n", "invalid status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "invalid status line"),
        (b"HTTP/1.1 \xb2\xb2\xb2 OK\r\n\r\n", "invalid status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "unexpected 101"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "invalid header line"),
        (b"HTTP/1.1 200 OK\r\nname : spaced\r\n\r\n", "invalid header line"),
        (b"HTTP/1.1 200 OK\r\na: 1\r\n folded\r\n\r\n", "invalid header line"),
        (b"HTTP/1.1 200 OK\r\n: empty\r\n\r\n", "invalid header line"),
        (b"HTTP/1.1 200 OK\r\nbare: lf\nx: y\r\n\r\n", "bare LF"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n", "conflicting"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "invalid content-length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n", "invalid content-length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0x10\r\n\r\n", "invalid content-length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\n", "invalid content-length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length:\r\n\r\n", "invalid content-length"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
            "both transfer-encoding and content-length",
        ),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x5\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-1\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n;x\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "invalid chunk size"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n",
            "not followed by CRLF",
        ),
        (b"HTTP/1.1 200 " + b"x" * MAX_LINE + b"\r\n\r\n", "status line or a header line longer"),
        (b"HTTP/1.1 200 " + b"x" * MAX_LINE, "longer than"),
        (b"HTTP/1.1 200 OK\r\nbig: " + b"x" * MAX_LINE + b"\r\n\r\n", "header line longer"),
        (b"HTTP/1.1 200 OK\r\nbig: " + b"x" * MAX_LINE + b"\r\n", "longer than"),
        (
            b"HTTP/1.1 200 OK\r\n"
            + b"".join(b"h%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
            + b"\r\n",
            "more than",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n"
            + b"".join(b"t%d: " % i + b"v" * 8000 + b"\r\n" for i in range(9)),
            "trailers longer",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"h: " + b"v" * 8000 + b"\r\n" * 1 + b"g: v\r\n" * 11000,
            "head longer",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;" + b"e" * MAX_LINE,
            "chunk-size line longer",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nt: "
            + b"v" * (MAX_HEAD + 1),
            "a trailer line longer",
        ),
    ],
)
def test_malformed_answers_say_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(_http.RemoteProtocolError, match=message) as raised:
        _parse(raw)
    assert str(raised.value).startswith("bad HTTP response: ")
    assert b"xxxxx" not in str(raised.value).encode()  # no bytes of the answer quoted


def test_a_head_split_anywhere_over_the_limit_is_refused() -> None:
    parser = ResponseParser()
    with pytest.raises(_http.RemoteProtocolError, match="head longer"):
        for _ in range(MAX_HEAD // 8000 + 2):
            parser.feed(b"x-h: " + b"v" * 7993 + b"\r\n")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "without sending a response"),
        (b"HTTP/1.1 200 OK\r\n", "middle of its head"),
        (LENGTH[:-3], "middle of the body"),
        (CHUNKED[:-10], "middle of the body"),
    ],
)
def test_an_answer_cut_short_is_an_error(raw: bytes, message: str) -> None:
    parser = _parse(raw)
    with pytest.raises(_http.RemoteProtocolError, match=message):
        parser.feed_eof()


def test_reset_reads_the_next_answer_on_the_connection() -> None:
    parser = _parse(LENGTH)
    parser.reset()
    assert parser.headers is None and not parser.complete and not parser.body
    parser.feed(CHUNKED)
    assert _body(parser) == b"hello world" and parser.pending == 11


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 says
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw, as some servers send
    ],
)
def test_compressed_bodies_are_decoded_piece_by_piece(coding: str, encode: object) -> None:
    data = b"the answer " * 1000
    encoded = encode(data)  # type: ignore[operator]
    decoder = BodyDecoder(coding)
    out = [decoder.decode(encoded[i : i + 7]) for i in range(0, len(encoded), 7)]
    assert b"".join(out) + decoder.finish() == data


def test_a_decompression_bomb_is_handed_over_in_bounded_pieces() -> None:
    bomb = gzip.compress(b"\0" * (20 * 1024 * 1024))
    decoder = BodyDecoder("gzip")
    sizes = [len(decoder.decode(bomb))]
    while decoder.has_more:
        sizes.append(len(decoder.decode()))
    assert max(sizes) <= 1024 * 1024 and sum(sizes) + len(decoder.finish()) == 20 * 1024 * 1024


def test_bad_or_unsupported_codings_are_errors() -> None:
    with pytest.raises(_http.RemoteProtocolError, match="a content-encoding other than gzip"):
        BodyDecoder("br")
    with pytest.raises(_http.RemoteProtocolError, match="invalid gzip body"):
        BodyDecoder("gzip").decode(b"not gzip at all")
    cut = BodyDecoder("gzip")
    cut.decode(gzip.compress(b"hello" * 100)[:-8])
    with pytest.raises(_http.RemoteProtocolError, match="cut short"):
        cut.finish()
    assert BodyDecoder("deflate").finish() == b""  # an empty body


def _decode_all(decoder: BodyDecoder, pieces: list[bytes]) -> bytes:
    out = []
    for piece in pieces:
        out.append(decoder.decode(piece))
        while decoder.has_more:
            out.append(decoder.decode())
    return b"".join(out) + decoder.finish()


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_body_encoded_and_sent_a_byte_at_a_time_is_decoded(coding: str) -> None:
    data = b"the answer " * 50
    encoded = gzip.compress(data) if coding == "gzip" else zlib.compress(data)
    pieces = [encoded[i : i + 1] for i in range(len(encoded))]
    assert _decode_all(BodyDecoder(coding), pieces) == data


def test_every_member_of_a_gzip_body_is_decoded() -> None:
    encoded = gzip.compress(b'{"ok":') + gzip.compress(b" true}")
    assert _decode_all(BodyDecoder("gzip"), [encoded]) == b'{"ok": true}'
    assert _decode_all(BodyDecoder("gzip"), [encoded[:20], encoded[20:]]) == b'{"ok": true}'


def test_a_deflate_body_of_one_byte_is_cut_short() -> None:
    with pytest.raises(_http.RemoteProtocolError, match="cut short"):
        _decode_all(BodyDecoder("deflate"), [b"x"])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"HTTP/1.1 200 OK\n", "bare LF"),  # refused at once, not after the read timeout
        (b"HTTP/1.1 200 OK\r\nx: 1\n", "bare LF"),
        (
            b"HTTP/1.1 200 OK\r\n" + b"".join(b"h%d: v\r\n" % i for i in range(MAX_HEADERS + 1)),
            "more than",
        ),
        (b"HTTP/1.1 200 OK\r\nbig: " + b"x" * (MAX_LINE + 1), "longer than"),
    ],
)
def test_a_head_is_refused_as_soon_as_its_bytes_show_it(raw: bytes, message: str) -> None:
    parser = ResponseParser()
    with pytest.raises(_http.RemoteProtocolError, match=message):
        for i in range(len(raw)):  # a byte at a time: refused before any end of the head
            parser.feed(raw[i : i + 1])


@pytest.mark.parametrize("status", [b"000", b"099", b"600", b"999"])
def test_a_status_outside_100_to_599_is_refused(status: bytes) -> None:
    with pytest.raises(_http.RemoteProtocolError, match="outside 100-599"):
        _parse(b"HTTP/1.1 " + status + b" X\r\ncontent-length: 0\r\n\r\n")
