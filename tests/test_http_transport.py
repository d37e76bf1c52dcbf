"""The HTTP layer under the backends: TLS, proxies from the environment, SSE, limits."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import re
import socket
import ssl
from pathlib import Path

import pytest
from forwardproxy import ForwardProxy

from tiered_router import _http, _limits
from tiered_router.backends._base import CompletionRequest
from tiered_router.backends._sse import SSEDecoder
from tiered_router.backends.openai_compat import OpenAICompatBackend
from tiered_router.exceptions import (
    BackendConnectionError,
)
from tiered_router.testing import ScriptedServer

PACKAGE = Path(__file__).resolve().parents[1] / "tiered_router"
UPSTREAM = "upstream.invalid"  # a name only the test's forward proxy resolves
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
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
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName(UPSTREAM)]
            ),
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


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


async def _tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> asyncio.Server:
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the clients trust this CA
    return await asyncio.start_server(_answer_once, "127.0.0.1", 0, ssl=context)


@pytest.mark.anyio
async def test_tls_trusts_ssl_cert_file(tmp_path: Path, no_proxy_env: pytest.MonkeyPatch) -> None:
    server = await _tls_server(tmp_path, no_proxy_env)
    port = server.sockets[0].getsockname()[1]
    be = OpenAICompatBackend("tls", model="m", base_url=f"https://127.0.0.1:{port}/v1", api_key="k")
    try:
        assert (await be.acomplete(req())).text == "over tls"
    finally:
        await be.aclose()
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
async def test_http_proxy_from_the_environment_carries_calls_and_streams(
    server: ScriptedServer, no_proxy_env: pytest.MonkeyPatch
) -> None:
    with ForwardProxy(hosts={UPSTREAM: "127.0.0.1"}) as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        no_proxy_env.setenv("NO_PROXY", "localhost,.internal.example")
        base = f"http://{UPSTREAM}:{server.port}/v1"
        be = OpenAICompatBackend("p", model="m", base_url=base, api_key="k", timeout_s=5)
        try:
            assert (await be.acomplete(req())).text == "ok"  # only the proxy knows the name
            chunks = [chunk async for chunk in be.astream(req())]
            assert "".join(c.text for c in chunks) == "ok"
        finally:
            await be.aclose()
        # the sync path (httpx2's client) honours the same variable
        sync = OpenAICompatBackend("s", model="m", base_url=base, api_key="k", timeout_s=5)
        try:
            assert sync.complete(req()).text == "ok"
        finally:
            sync.close()
    assert [(s.method, s.target) for s in proxy.seen] == 3 * [("POST", f"{base}/chat/completions")]
    assert "authorization" in proxy.seen[0].headers  # relayed to the upstream as it came
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_https_proxy_tunnels_tls_with_connect(
    tmp_path: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    tls = await _tls_server(tmp_path, no_proxy_env)
    port = tls.sockets[0].getsockname()[1]
    with ForwardProxy(hosts={UPSTREAM: "127.0.0.1"}) as proxy:
        host_port = proxy.url.removeprefix("http://")
        no_proxy_env.setenv("https_proxy", f"agent:pw@{host_port}")  # lower case, no scheme
        be = OpenAICompatBackend("t", model="m", base_url=f"https://{UPSTREAM}:{port}/v1")
        try:
            assert (await be.acomplete(req())).text == "over tls"
        finally:
            await be.aclose()
            tls.close()
            await tls.wait_closed()
    assert [(s.method, s.target) for s in proxy.seen] == [("CONNECT", f"{UPSTREAM}:{port}")]
    assert proxy.seen[0].headers["proxy-authorization"] == "Basic YWdlbnQ6cHc="  # agent:pw


@pytest.mark.anyio
async def test_no_proxy_and_proxy_credentials(
    server: ScriptedServer, no_proxy_env: pytest.MonkeyPatch
) -> None:
    with ForwardProxy(hosts={UPSTREAM: "127.0.0.1"}) as proxy:
        host_port = proxy.url.removeprefix("http://")
        no_proxy_env.setenv("ALL_PROXY", f"http://agent:s3cret-pw@{host_port}")
        no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
        direct = OpenAICompatBackend("d", model="m", base_url=server.base_url, api_key="k")
        via = OpenAICompatBackend(
            "v", model="m", base_url=f"http://{UPSTREAM}:{server.port}/v1", api_key="k"
        )
        try:
            assert (await direct.acomplete(req())).text == "ok"
            assert proxy.seen == []  # NO_PROXY: straight to the upstream
            assert (await via.acomplete(req())).text == "ok"  # ALL_PROXY, with credentials
        finally:
            await direct.aclose()
            await via.aclose()
    assert len(proxy.seen) == 1
    sent = proxy.seen[0].headers["proxy-authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")) == b"agent:s3cret-pw"


@pytest.mark.anyio
async def test_unusable_proxies_are_connection_errors_without_credentials(
    server: ScriptedServer, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("ALL_PROXY", "socks5://agent:s3cret-pw@127.0.0.1:1080")
    be = OpenAICompatBackend("x", model="m", base_url=server.base_url, api_key="sk-abc123")
    try:
        with pytest.raises(BackendConnectionError, match="socks5:// proxy is not supported"):
            await be.acomplete(req())
    finally:
        await be.aclose()
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    no_proxy_env.setenv("HTTP_PROXY", f"http://agent:s3cret-pw@127.0.0.1:{dead}")
    be = OpenAICompatBackend("y", model="m", base_url=server.base_url, api_key="sk-abc123")
    try:
        with pytest.raises(BackendConnectionError, match="cannot connect to the proxy") as info:
            await be.acomplete(req())
        assert "s3cret-pw" not in str(info.value) + repr(info.value.__cause__)
    finally:
        await be.aclose()
    assert server.requests == []


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
