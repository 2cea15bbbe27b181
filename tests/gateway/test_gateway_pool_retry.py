"""The connection pool sends a request again, once, on a new connection when a kept-alive
connection turns out to have been closed by the upstream before any byte of an answer
(an upstream that closes idle connections: its close crossed the request), and never
otherwise: not on a new connection, not after a byte of the answer arrived (a streamed
answer cut short is not sent twice), not on a timeout, not with a body it cannot send
again. POSTs to a provider cost money: a request that may have been answered is not sent
twice."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from contextfold.gateway import GatewayConfig, create_app
from contextfold.gateway._pool import StackPool, StackTransport

from .servers import message, message_stream, serving, sse

Plan = Callable[[int, int], str]
"""The action for a connection's n-th request (connection index, request index, from 0):
``answer``; ``drop`` (read it, close: the client reads the end of the stream); ``reset``
(close unread: a TCP reset); ``head`` (a few bytes of a status line, then close);
``stream`` (an SSE answer's head and first event, then close); ``hang`` (never answer)."""


@dataclass
class Seen:
    """A request the upstream received: on which connection, which on it, its body and
    what the upstream did with it."""

    connection: int
    index: int
    body: bytes
    action: str


@dataclass
class RawUpstream:
    """An HTTP/1.1 upstream on loopback written on raw sockets, following ``plan``, in a
    thread with its own event loop (so that a gateway in another thread can use it too)."""

    plan: Plan
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    url: str = ""

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return await reader.readexactly(length) if length else b""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        index = 0
        try:
            while True:
                action = self.plan(number, index)
                if action == "reset":
                    try:
                        first = await reader.read(1)  # the request has arrived: close unread
                    except ConnectionError:
                        return
                    if not first:
                        return
                    self.seen.append(Seen(number, index, b"", action))
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                body = await self._read_request(reader)
                if body is None:
                    return
                self.seen.append(Seen(number, index, body, action))
                if action == "drop":
                    return
                if action == "head":
                    writer.write(b"HTTP/1.1 20")
                    await writer.drain()
                    return
                if action == "hang":
                    await reader.read()  # until the client gives up and closes
                    return
                if action == "stream":
                    event = sse(message_stream()[:1])
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n"
                        + f"{len(event):x}\r\n".encode()
                        + event
                        + b"\r\n"
                    )
                    await writer.drain()
                    await asyncio.sleep(0.1)
                    return
                answer = json.dumps(message(f"answer {number}.{index}")).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )
                await writer.drain()
                index += 1
        finally:
            writer.close()

    @contextmanager
    def running(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        server: list[asyncio.Server] = []

        async def start() -> None:
            server.append(await asyncio.start_server(self._serve, "127.0.0.1", 0))
            started.set()

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(start(), loop)
        assert started.wait(5)
        port = server[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self.url
        finally:

            async def stop() -> None:
                server[0].close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

            asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


def first_answered_then(action: str) -> Plan:
    """The first connection answers one request and does ``action`` with the second; every
    connection after it answers all."""
    return lambda connection, index: action if (connection, index) == (0, 1) else "answer"


def client_on(url: str, **options: object) -> tuple[httpx.AsyncClient, StackPool]:
    transport = StackTransport(**options)  # type: ignore[arg-type]
    return httpx.AsyncClient(base_url=url, transport=transport), transport.pool


BODY = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})


@pytest.mark.parametrize("action", ["drop", "reset"])
def test_a_kept_alive_connection_the_upstream_closed_is_retried_once_on_a_new_one(
    action: str,
) -> None:
    """The upstream closed the kept-alive connection as the second request arrived (an
    end of stream, or a reset) before any byte of an answer: sent again on a new
    connection, the same body, and answered."""
    upstream = RawUpstream(first_answered_then(action))

    async def run(url: str) -> tuple[list[str], StackPool, int]:
        client, pool = client_on(url)
        async with client:
            texts = []
            for _ in range(2):
                reply = await client.post("/v1/messages", content=BODY)
                texts.append(reply.json()["content"][0]["text"])
            return texts, pool, pool.idle()

    with upstream.running() as url:
        texts, pool, idle = asyncio.run(run(url))
    assert texts == ["answer 0.0", "answer 1.0"]
    assert [(s.connection, s.index, s.action) for s in upstream.seen] == [
        (0, 0, "answer"),
        (0, 1, action),
        (1, 0, "answer"),
    ]
    assert upstream.seen[2].body == BODY.encode()
    assert (pool.opened, pool.retried, idle) == (2, 1, 1)  # the new one kept


def test_the_gateway_answers_when_the_upstream_closed_its_kept_alive_connection() -> None:
    """Through the gateway: the second request's kept-alive connection was closed by the
    upstream as it arrived; the client gets the answer, not a 502."""
    upstream = RawUpstream(first_answered_then("drop"))
    with upstream.running() as upstream_url:
        app = create_app(GatewayConfig(upstream=upstream_url))
        with serving(app) as url, httpx.Client(base_url=url) as client:
            replies = [
                client.post(
                    "/v1/messages",
                    content=BODY,
                    headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
                )
                for _ in range(2)
            ]
            metrics = client.get("/metrics").text
    assert [r.status_code for r in replies] == [200, 200], replies[-1].text
    assert replies[1].json()["content"][0]["text"] == "answer 1.0"
    assert len(upstream.seen) == 3
    assert app.state.gateway.upstream.pool.retried == 1
    # An operator sees the resend: the retry and the two connections it took.
    assert "contextfold_gateway_upstream_retries_total 1\n" in metrics
    assert "contextfold_gateway_upstream_connections_opened_total 2\n" in metrics


def test_a_new_connection_closed_before_an_answer_is_not_retried() -> None:
    """On a connection opened for it, an upstream that closes without answering is not an
    idle connection it closed: the request may have been taken, so the error is reported
    and the request is not sent again."""
    upstream = RawUpstream(lambda connection, index: "drop" if connection == 0 else "answer")

    async def run(url: str) -> StackPool:
        client, pool = client_on(url)
        async with client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post("/v1/messages", content=BODY)
        return pool

    with upstream.running() as url:
        pool = asyncio.run(run(url))
    assert len(upstream.seen) == 1
    assert (upstream.connections, pool.opened, pool.retried, pool.open) == (1, 1, 0, 0)


@pytest.mark.parametrize(
    ("action", "error"),
    [("head", httpx.RemoteProtocolError), ("hang", httpx.ReadTimeout)],
)
def test_a_kept_alive_connection_that_answered_in_part_or_is_slow_is_not_retried(
    action: str, error: type[Exception]
) -> None:
    """A byte of an answer arrived before the connection closed (the request was taken),
    or the upstream is slow (it may be working on it): reported, not sent again."""
    upstream = RawUpstream(first_answered_then(action))

    async def run(url: str) -> StackPool:
        client, pool = client_on(url)
        async with client:
            await client.post("/v1/messages", content=BODY)
            with pytest.raises(error):
                await client.post(
                    "/v1/messages", content=BODY, timeout=httpx.Timeout(5.0, read=0.3)
                )
        return pool

    with upstream.running() as url:
        pool = asyncio.run(run(url))
    assert [s.action for s in upstream.seen] == ["answer", action]
    assert (upstream.connections, pool.opened, pool.retried) == (1, 1, 0)


def test_a_body_that_cannot_be_sent_again_is_not_retried() -> None:
    """A streamed request body was consumed by the first attempt: no second one."""
    upstream = RawUpstream(first_answered_then("drop"))

    async def chunks() -> AsyncIterator[bytes]:
        yield BODY.encode()

    async def run(url: str) -> StackPool:
        client, pool = client_on(url)
        async with client:
            await client.post("/v1/messages", content=BODY)
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(
                    "/v1/messages", content=chunks(), headers={"content-length": str(len(BODY))}
                )
        return pool

    with upstream.running() as url:
        pool = asyncio.run(run(url))
    assert len(upstream.seen) == 2
    assert (upstream.connections, pool.retried) == (1, 0)


def test_a_streamed_answer_cut_after_its_first_bytes_is_not_sent_again() -> None:
    """Through the gateway, a streamed answer on a kept-alive connection ends after its
    first event: the client gets what was relayed and the error event, and the upstream
    saw the request once."""
    upstream = RawUpstream(first_answered_then("stream"))
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    with upstream.running() as upstream_url:
        app = create_app(GatewayConfig(upstream=upstream_url))
        with serving(app) as url, httpx.Client(base_url=url) as client:
            assert client.post("/v1/messages", content=BODY, headers=headers).status_code == 200
            streamed = client.post(
                "/v1/messages", content=BODY.replace("{", '{"stream": true, ', 1), headers=headers
            )
    assert streamed.status_code == 200
    assert streamed.text.startswith("event: message_start")
    assert "event: error" in streamed.text
    assert [s.action for s in upstream.seen] == ["answer", "stream"]
    assert upstream.connections == 1
    assert app.state.gateway.upstream.pool.retried == 0
