"""The upstream connection's HTTP/1.1 (``_h1``): every framing a provider or a proxy in
front of it may answer with is read to its end, and the connection is reused exactly when
HTTP/1.1 allows it. Each test passes on httpcore's connection too (the one ``_h1``
replaced, for CPU): they pin that the replacement behaves as it did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.gateway._pool import StackPool, StackTransport

Answer = Callable[[bytes], list[bytes]]
"""The bytes the scripted upstream writes (in these pieces) for a request's raw bytes."""


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's raw bytes (head and body, content-length or chunked), None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.strip(), 16)
            body += size_line + await reader.readexactly(size + 2)
            if size == 0:
                return head + body
    length = 0
    for line in lower.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def scripted(
    answer: Answer, run: Callable[[str, list[bytes]], Awaitable[None]], *, close: bool = False
) -> list[int]:
    """Serve ``answer`` on loopback while ``run(url, requests)`` runs; each connection's
    number for each request, in order (``close``: the connection closed after each)."""
    requests: list[bytes] = []
    connections: list[int] = []
    opened = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal opened
        opened += 1
        mine = opened
        try:
            while (raw := await _read_request(reader)) is not None:
                requests.append(raw)
                connections.append(mine)
                for piece in answer(raw):
                    writer.write(piece)
                    await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await run(f"http://127.0.0.1:{port}", requests)
    return connections


def client(url: str) -> tuple[httpx.AsyncClient, StackPool]:
    transport = StackTransport()
    return httpx.AsyncClient(base_url=url, transport=transport), transport.pool


def always(*pieces: bytes) -> Answer:
    return lambda _: list(pieces)


async def two_gets(url: str, expected: bytes, *, method: str = "GET") -> StackPool:
    http, pool = client(url)
    async with http:
        for _ in range(2):
            response = await http.request(method, "/")
            assert response.content == expected
    return pool


def test_a_chunked_answer_with_extensions_and_trailers_is_read_and_the_connection_reused() -> None:
    answer = always(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        b"5;name=value\r\nhello\r\n",
        b"1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\n",
    )

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"hello world!")
        assert pool.opened == 1

    assert asyncio.run(scripted(answer, run)) == [1, 1]


def test_informational_answers_before_the_real_one_are_skipped() -> None:
    answer = always(
        b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
    )

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"ok")
        assert pool.opened == 1

    asyncio.run(scripted(answer, run))


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n",
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n",
    ],
    ids=["connection close", "HTTP/1.0"],
)
def test_an_answer_that_ends_its_connection_is_not_reused(head: bytes) -> None:
    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"ok")
        assert pool.opened == 2

    assert asyncio.run(scripted(always(head, b"ok"), run, close=True)) == [1, 2]


def test_a_switch_of_protocols_is_not_reused_for_http() -> None:
    answer = always(
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n"
    )

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"")
        assert pool.opened == 2

    asyncio.run(scripted(answer, run))


def test_a_body_without_length_is_read_to_the_connections_end() -> None:
    answer = always(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n", b"all ", b"of it")

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"all of it")
        assert pool.opened == 2

    assert asyncio.run(scripted(answer, run, close=True)) == [1, 2]


def test_no_body_is_read_after_204_or_for_head() -> None:
    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"")
        assert pool.opened == 1

    asyncio.run(scripted(always(b"HTTP/1.1 204 No Content\r\n\r\n"), run))
    head = always(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n")

    async def run_head(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"", method="HEAD")
        assert pool.opened == 1

    asyncio.run(scripted(head, run_head))


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    ],
    ids=["two lengths", "bad chunk size", "hex prefix", "not HTTP", "bad header"],
)
def test_a_malformed_answer_is_a_protocol_error_and_its_connection_closed(answer: bytes) -> None:
    async def run(url: str, _: list[bytes]) -> None:
        http, pool = client(url)
        async with http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/")
            assert pool.open == 0

    asyncio.run(scripted(always(answer), run))


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async def run(url: str, requests: list[bytes]) -> None:
        http, _ = client(url)
        async with http:
            with pytest.raises(httpx.LocalProtocolError):
                await http.get("/", headers={"x-evil": "a\r\nx-injected: 1"})
        assert requests == []

    asyncio.run(scripted(always(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), run))


def test_bodies_are_sent_with_their_length_or_in_chunks() -> None:
    async def stream() -> AsyncIterator[bytes]:
        yield b"streamed "
        yield b"body"

    async def run(url: str, requests: list[bytes]) -> None:
        http, _ = client(url)
        async with http:
            await http.post("/", content=b"whole body")
            await http.post("/", content=stream())
        whole, chunked = requests
        assert whole.lower().startswith(b"post / http/1.1\r\n")
        assert b"content-length: 10\r\n" in whole.lower()
        assert whole.endswith(b"\r\n\r\nwhole body")
        assert b"transfer-encoding: chunked\r\n" in chunked.lower()
        assert chunked.endswith(b"\r\n\r\n9\r\nstreamed \r\n4\r\nbody\r\n0\r\n\r\n")

    asyncio.run(scripted(always(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), run))


def test_bytes_after_the_announced_body_keep_the_connection_from_reuse() -> None:
    answer = always(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokSURPLUS")

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, b"ok")
        assert pool.opened == 2

    asyncio.run(scripted(answer, run))


@settings(max_examples=25, deadline=None)
@given(
    body=st.binary(min_size=0, max_size=3000),
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 400), min_size=1, max_size=12),
)
def test_any_chunking_in_any_segments_gives_the_body_back(
    body: bytes, sizes: list[int], cuts: list[int]
) -> None:
    """The body cut into chunks of ``sizes`` (repeated), the bytes on the wire cut into
    writes of ``cuts``: what is read is the body, and the connection is reused."""
    chunks: list[bytes] = []
    at, i = 0, 0
    while at < len(body):
        part = body[at : at + sizes[i % len(sizes)]]
        chunks.append(b"%x\r\n%s\r\n" % (len(part), part))
        at, i = at + len(part), i + 1
    wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(chunks)
    wire += b"0\r\n\r\n"
    pieces: list[bytes] = []
    at, i = 0, 0
    while at < len(wire):
        pieces.append(wire[at : at + cuts[i % len(cuts)]])
        at, i = at + cuts[i % len(cuts)], i + 1

    async def run(url: str, _: list[bytes]) -> None:
        pool = await two_gets(url, body)
        assert pool.opened == 1

    asyncio.run(scripted(always(*pieces), run))
