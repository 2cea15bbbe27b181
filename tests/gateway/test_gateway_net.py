"""The pool's sockets on the loop's transports (``_net``): TLS verified and kept alive,
the next address tried when the first refuses, a read timeout reported as httpx's."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from contextfold.gateway._net import LoopBackend, _interleaved
from contextfold.gateway._pool import StackTransport


def _certificate(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key."""
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    alt = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(alt, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@asynccontextmanager
async def _echo_server(tls: ssl.SSLContext | None, delay: float = 0.0) -> AsyncIterator[int]:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 answering each request with the size of
    its body, after ``delay`` seconds; yields its port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line[15:])
                body = await reader.readexactly(length)
                await asyncio.sleep(delay)
                answer = b"%d" % len(body)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer))
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_tls_is_verified_and_kept_alive(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    async with _echo_server(served) as port:
        trusting = StackTransport(verify=ssl.create_default_context(cafile=str(cert)))
        async with httpx.AsyncClient(transport=trusting) as client:
            sizes = [
                (await client.post(f"https://127.0.0.1:{port}/", content=b"x" * n)).text
                for n in (0, 5, 300_000)
            ]
        assert sizes == ["0", "5", "300000"]
        assert trusting.pool.opened == 1
        async with httpx.AsyncClient(transport=StackTransport()) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"https://127.0.0.1:{port}/")


async def test_a_name_whose_first_address_refuses_connects_to_the_next() -> None:
    """``localhost`` resolves to ::1 and 127.0.0.1 here when IPv6 is on; the server
    listens on 127.0.0.1 only."""
    infos = socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    if len({info[0] for info in infos}) < 2:
        pytest.skip("localhost has one address family here")
    async with (
        _echo_server(None) as port,
        httpx.AsyncClient(transport=StackTransport()) as client,
    ):
        got = await client.post(f"http://localhost:{port}/", content=b"abc")
    assert got.text == "3"


async def test_a_slow_answer_is_a_read_timeout_and_a_closed_port_a_connect_error() -> None:
    async with (
        _echo_server(None, delay=1.0) as port,
        httpx.AsyncClient(transport=StackTransport(), timeout=0.2) as client,
    ):
        with pytest.raises(httpx.ReadTimeout):
            await client.post(f"http://127.0.0.1:{port}/", content=b"abc")
    async with httpx.AsyncClient(transport=StackTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_an_unread_answer_is_not_buffered_without_bound() -> None:
    """While the gateway does not read (its client is slow), the socket stops reading
    too, as anyio's streams did: an upstream streaming 32 MB is held back by TCP, not
    buffered in the gateway's memory, and every byte still arrives in order."""
    payload = bytes(range(256)) * (1 << 17)  # 32 MB

    async def send_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(send_all, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        stream = await LoopBackend().connect_tcp("127.0.0.1", port, timeout=5)
        await asyncio.sleep(0.5)  # the upstream writes as fast as it can; nobody reads
        buffered = len(stream._socket.buffer)  # type: ignore[attr-defined]
        assert buffered <= 4 << 20, f"{buffered:,} bytes buffered unread"
        received = bytearray()
        while chunk := await stream.read(1 << 16, timeout=5):
            received += chunk
        await stream.aclose()
    assert received == payload


def test_addresses_alternate_between_families_the_first_family_first() -> None:
    v6 = [(socket.AF_INET6, 1, 6, "", (f"::{n}", 80)) for n in (1, 2)]
    v4 = [(socket.AF_INET, 1, 6, "", (f"10.0.0.{n}", 80)) for n in (1, 2, 3)]
    order = [info[4][0] for info in _interleaved([*v6, *v4])]
    assert order == ["::1", "10.0.0.1", "::2", "10.0.0.2", "10.0.0.3"]
