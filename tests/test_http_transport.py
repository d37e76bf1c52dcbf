"""The HTTP layer under the backends: the asyncio socket layer, TLS, proxies, SSE, limits."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import re
import ssl
from pathlib import Path

import pytest

from tiered_router import _http, _limits
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends._sse import SSEDecoder
from tiered_router.backends.openai_compat import OpenAICompatBackend
from tiered_router.exceptions import (
    BackendConnectionError,
    BackendResponseError,
    BackendStatusError,
)
from tiered_router.testing import ScriptedServer

PACKAGE = Path(__file__).resolve().parents[1] / "tiered_router"
ANSWER = json.dumps(
    {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "over tls"}}]}
).encode()


def req() -> CompletionRequest:
    return CompletionRequest(messages=[{"role": "user", "content": "hi"}], timeout_s=10)


async def _answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        found = re.search(rb"content-length: (\d+)", head.lower())
        await reader.readexactly(int(found.group(1)) if found else 0)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
        )
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client went away
    finally:
        writer.close()
        await writer.wait_closed()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.anyio
async def test_tls_through_the_asyncio_socket_layer_trusts_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(_answer_once, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust_env: the client trusts this CA
    be = OpenAICompatBackend("tls", model="m", base_url=f"https://127.0.0.1:{port}/v1", api_key="k")
    try:
        assert (await be.acomplete(req())).text == "over tls"
    finally:
        await be.aclose()
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
async def test_unix_socket_and_read_timeout(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    server = await asyncio.start_unix_server(_answer_once, path)
    backend = _http.AsyncioNetworkBackend()
    try:
        stream = await backend.connect_unix_socket(path, timeout=5)
        await stream.write(b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
        data = b""
        while b"over tls" not in data:
            part = await stream.read(65536, timeout=5)
            assert part
            data += part
        assert stream.get_extra_info("is_readable") in (True, False)
        await stream.aclose()
        silent = await backend.connect_unix_socket(path, timeout=5)
        with pytest.raises(Exception, match="timed out") as info:
            await silent.read(10, timeout=0.05)  # the server waits for a request
        assert type(info.value).__name__ == "ReadTimeout"
        await silent.aclose()
        await asyncio.sleep(0.05)  # the server's handler sees EOF and closes
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
async def test_connect_failures_are_httpcore_errors() -> None:
    backend = _http.AsyncioNetworkBackend()
    with pytest.raises(Exception, match="cannot connect") as info:
        await backend.connect_unix_socket("/nonexistent/socket", timeout=1)
    assert type(info.value).__name__ == "ConnectError"


@pytest.mark.anyio
async def test_proxy_from_the_environment_is_used(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.base_url.rsplit("/v1", 1)[0])
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert _http.env_proxies()
    be = OpenAICompatBackend(
        "p", model="m", base_url="http://upstream.invalid/v1", api_key="k", timeout_s=5
    )
    try:
        with pytest.raises((BackendStatusError, BackendConnectionError, BackendResponseError)):
            await be.acomplete(req())  # the scripted server is no real proxy
    finally:
        await be.aclose()
    # the request went to the proxy, addressed to the upstream
    assert server.requests and "upstream.invalid" in (
        server.requests[0].path + server.requests[0].headers.get("host", "")
    )


def test_sse_decoder_shapes() -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    assert decoder.feed(b": comment\r\n\r\ndata: a\r\ndata: b\r\n\r\nevent: x\n\n") == [b"a\nb"]
    assert decoder.feed(b"data:{") == []
    assert decoder.feed(b"}\n\ndata: [DONE]") == [b"{}"]
    assert decoder.flush() == [b"[DONE]"]
    assert decoder.flush() == []
    with pytest.raises(ValueError, match="larger than 64"):
        decoder.feed(b"data: " + b"x" * 100)


def test_json_limits() -> None:
    assert _limits.loads(b'{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(_limits.JSONTooDeep):
        _limits.loads("[" * 200 + "]" * 200)
    with pytest.raises(_limits.JSONTooDeep):
        _limits.loads(b"[" * 100_000 + b"]" * 100_000)  # past the parser's own recursion
    _limits.check_depth({"a": [[1]]}, 3)
    with pytest.raises(_limits.JSONTooDeep):
        _limits.check_depth({"a": [[1]]}, 2)


def test_call_timeout_bounds_every_phase() -> None:
    assert _http.call_timeout(2.0) == {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}
    assert _http.call_timeout(30.0)["connect"] == _http.DEFAULT_CONNECT_TIMEOUT_S
    assert _http.call_timeout(None)["read"] is None


@pytest.mark.anyio
async def test_backends_have_one_pool_each(server: ScriptedServer) -> None:
    a = OpenAICompatBackend("a", model="m", base_url=server.base_url, api_key="k")
    b = OpenAICompatBackend("b", model="m", base_url=server.base_url, api_key="k")
    try:
        pool_a, pool_b = await a._get_async_client(), await b._get_async_client()
        assert pool_a is not pool_b
        assert (await a.acomplete(req())).text == "ok"
    finally:
        await a.aclose()
        await b.aclose()


def _modules_importing(name: str) -> list[str]:
    pattern = re.compile(rf"^\s*(import|from)\s+{name}\b", re.MULTILINE)
    return sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    )


def test_http_libraries_are_imported_in_one_module_only() -> None:
    for name in ("httpx2", "httpcore2", "httpx", "aiohttp", "yarl", "requests"):
        found = _modules_importing(name)
        assert all(path.startswith("_http/") for path in found), (name, found)
