"""The relay as the latency work left it: ``POST /v1/messages`` passed through goes
straight to the relay (no Starlette routing), the upstream request is written from its
own bytes and the answer read without httpx's objects (``_answer``), a sized answer is
relayed with its length, and one listener per request cancels on a disconnect
(``_disconnect.guarded``). Each behaviour the relay had is checked on that path: framing,
credentials, errors with their status, timeouts, disconnects, metrics, SSE event by
event, encoded answers; and the request's bytes are those httpx wrote before."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from starlette.responses import Response

from contextfold.gateway import GatewayConfig
from contextfold.gateway._disconnect import ClientGone, guarded, stop_watching
from contextfold.gateway._metrics import Metrics
from contextfold.gateway._pool import StackTransport
from contextfold.gateway._upstream import Upstream

from .conftest import SECRET, GatewayFactory
from .servers import ScriptedUpstream, message, message_stream

MODEL = "claude-test"
BODY = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
CONFIGS = {"passed through": {"pass_through_context_management": True}, "default": {}}


@pytest.fixture(params=list(CONFIGS))
def relaying(request: pytest.FixtureRequest, start_gateway: GatewayFactory) -> str:
    """A gateway passing ``context_management`` through (the direct relay), and one by
    default (the route, which relays a request that asks for nothing the same way)."""
    return start_gateway(timeout=1.0, **CONFIGS[request.param])


def test_a_sized_answer_is_relayed_with_its_length_not_in_chunks(
    relaying: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json(message("sized"), headers={"request-id": "req_1"})
    got = httpx.post(f"{relaying}/v1/messages", json=BODY, headers=HEADERS)
    assert got.status_code == 200
    assert got.json()["content"][0]["text"] == "sized"
    assert got.headers["content-length"] == str(len(got.content))
    assert "transfer-encoding" not in got.headers
    assert got.headers["request-id"] == "req_1"


@contextmanager
def raw_upstream(answer: bytes) -> Iterator[str]:
    """An upstream that reads one request and writes ``answer`` (then closes)."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            length = 0
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.rfile.read(length)
            self.wfile.write(answer)
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_sized_answer_cut_short_closes_the_clients_connection(config: str) -> None:
    """The client was told the length: an answer that ends before it cannot be completed
    (nor take an SSE error event); the client's HTTP library reports the body incomplete
    rather than taking a cut answer for a whole one."""
    from contextfold.gateway import create_app

    from .servers import serving

    cut = b'{"type":"message","content":[{"type":"text","text":"cut'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n"
    with raw_upstream(answer + cut) as url:
        app = create_app(GatewayConfig(upstream=url, timeout=2.0, **CONFIGS[config]))  # type: ignore[arg-type]
        with serving(app) as gateway, pytest.raises(httpx.RemoteProtocolError):
            httpx.post(f"{gateway}/v1/messages", json=BODY, headers=HEADERS)


def test_the_direct_relay_forwards_credentials_and_counts_what_it_relays(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(pass_through_context_management=True)
    usage = {
        "input_tokens": 10,
        "output_tokens": 2,
        "cache_read_input_tokens": 90,
        "cache_creation_input_tokens": 0,
    }
    upstream.then_json({**message("x"), "usage": usage})
    body = {**BODY, "context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}
    raw = json.dumps(body).encode()
    got = httpx.post(f"{url}/v1/messages", content=raw, headers=HEADERS)
    assert got.status_code == 200
    (received,) = upstream.received
    assert received.headers["x-api-key"] == SECRET
    assert received.body == raw  # passed through: the client's bytes
    text = metrics_of(url)
    assert SECRET not in text
    assert 'requests_total{route="/v1/messages",status="200"} 1' in text
    assert 'upstream_tokens_total{kind="cache_read"} 90' in text
    assert "contextfold_gateway_upstream_cache_read_share 0.9" in text


@pytest.fixture
def direct(start_gateway: GatewayFactory) -> str:
    """A gateway passing ``context_management`` through: ``/v1/messages`` relayed directly."""
    return start_gateway(pass_through_context_management=True, timeout=0.5)


def metrics_of(url: str) -> str:
    return httpx.get(f"{url}/metrics").text


RATE_LIMITED = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


@pytest.mark.parametrize("failure", ["relayed error", "upstream timeout"])
def test_the_direct_relay_relays_errors_with_their_status_and_reports_timeouts(
    direct: str, upstream: ScriptedUpstream, failure: str
) -> None:
    if failure == "relayed error":
        upstream.then_json(RATE_LIMITED, status=429, headers={"retry-after": "7"})
    else:
        upstream.then_hang(5)
    got = httpx.post(f"{direct}/v1/messages", json=BODY, headers=HEADERS, timeout=4)
    if failure == "relayed error":
        assert (got.status_code, got.json(), got.headers["retry-after"]) == (429, RATE_LIMITED, "7")
    else:
        assert (got.status_code, got.json()["error"]["type"]) == (504, "timeout_error")
    status = got.status_code
    assert f'requests_total{{route="/v1/messages",status="{status}"}} 1' in metrics_of(direct)


def test_a_client_that_leaves_the_direct_relay_cancels_the_upstream_request(
    direct: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_hang(10)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{direct}/v1/messages", json=BODY, headers=HEADERS, timeout=0.3)
    assert upstream.disconnected.wait(5), "the upstream request kept running"
    counted = metrics_of(direct)
    assert 'upstream_errors_total{kind="cancelled"} 1' in counted
    assert 'requests_total{route="/v1/messages",status="499"} 1' in counted


def test_the_direct_relay_streams_event_by_event_and_a_leaving_client_ends_it(
    direct: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_slow_stream(message_stream("x" * 40), gap=2)
    with httpx.stream(
        "POST", f"{direct}/v1/messages", json={**BODY, "stream": True}, headers=HEADERS
    ) as got:
        assert got.headers["content-type"].startswith("text/event-stream")
        first = next(got.iter_bytes())
    assert first.startswith(b"event: message_start")
    assert b"content_block_start" not in first  # the next event is 2 s away upstream
    assert upstream.disconnected.wait(3), "the upstream stream kept running"


def test_an_encoded_answer_is_decoded_and_relayed_without_its_length(
    relaying: str, upstream: ScriptedUpstream
) -> None:
    data = json.dumps(message("zipped " * 50)).encode()
    zipped = gzip.compress(data)
    upstream.then(
        lambda _r, _x: Response(
            zipped, media_type="application/json", headers={"content-encoding": "gzip"}
        )
    )
    got = httpx.post(f"{relaying}/v1/messages", json=BODY, headers=HEADERS)
    assert got.status_code == 200
    assert got.content == data
    assert "content-encoding" not in got.headers
    assert got.headers.get("content-length") in (None, str(len(data)))


REQUESTS: list[tuple[str, str, str, list[tuple[str, str]], bytes]] = [
    (
        "POST",
        "/v1/messages",
        "",
        [("x-api-key", "k"), ("content-type", "application/json"), ("user-agent", "mine")],
        b'{"a":1}',
    ),
    ("POST", "/v1/messages/count_tokens", "beta=true", [("Accept", "x/y")], b""),
    ("GET", "/v1/models", "limit=2&after=a b", [("cookie", "c=1")], b""),
    ("GET", "/v1/a b/../c", "", [("authorization", "Bearer t")], b""),
]


@pytest.mark.parametrize("prefix", ["", "/pre"])
def test_the_request_goes_upstream_as_httpx_wrote_it(prefix: str) -> None:
    """The head the upstream client writes itself is the one httpx built from the same
    base URL, target and headers (``Host`` first, httpx's defaults the client did not
    send, the client's, the length; targets quoted and normalized as httpx does)."""

    async def run() -> list[bytes]:
        got: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                got.append(head + await reader.readexactly(length))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}{prefix}"
        async with server:
            upstream = Upstream(GatewayConfig(upstream=base), Metrics())
            async with httpx.AsyncClient(transport=StackTransport()) as client:
                for method, path, query, headers, body in REQUESTS:
                    answer = await upstream.open(
                        method, path, query=query, headers=headers, body=body
                    )
                    assert await upstream.read(answer) == b"{}"
                    target = path + (f"?{query}" if query else "")
                    merged = httpx.Headers(client.headers)  # what the gateway built before
                    merged.update(headers)
                    request = httpx.Request(method, base + target, headers=merged, content=body)
                    await (await client.send(request)).aread()
            await upstream.aclose()
        return got

    got = asyncio.run(run())
    ours, httpx_s = got[0::2], got[1::2]
    assert len(ours) == len(REQUESTS)
    assert ours == httpx_s


def _receiver() -> tuple[asyncio.Event, Any]:
    """An ASGI ``receive`` whose body was read: it reports a disconnect once ``gone``."""
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    return gone, receive


def test_a_disconnect_cancels_the_guarded_work_in_the_requests_own_task() -> None:
    async def run() -> list[str]:
        gone, receive = _receiver()
        scope: dict[str, Any] = {}
        seen: list[str] = []

        async def work() -> str:
            try:
                await asyncio.sleep(10)
            finally:
                seen.append("work ended")
            return "late"

        asyncio.get_running_loop().call_later(0.05, gone.set)
        with pytest.raises(ClientGone):
            await guarded(scope, receive, work())
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0  # nothing left pending
        await asyncio.sleep(0.01)
        seen.append("task goes on")
        with pytest.raises(ClientGone):  # the client is gone: later steps do not run
            await guarded(scope, receive, work())
        assert stop_watching(scope)
        return seen

    assert asyncio.run(run()) == ["work ended", "task goes on"]


def test_guards_nest_and_a_disconnect_after_the_work_cancels_nothing() -> None:
    async def run() -> list[str]:
        gone, receive = _receiver()
        scope: dict[str, Any] = {}
        seen: list[str] = []

        async def inner() -> str:
            await asyncio.sleep(0)
            return "inner"

        async def outer() -> None:
            seen.append(await guarded(scope, receive, inner()))
            asyncio.get_running_loop().call_later(0.05, gone.set)
            try:
                await asyncio.sleep(10)  # still guarded by the outer guard
            finally:
                seen.append("outer cancelled")

        with pytest.raises(ClientGone):
            await guarded(scope, receive, outer())
        assert stop_watching(scope)

        gone2, receive2 = _receiver()
        scope2: dict[str, Any] = {}
        assert await guarded(scope2, receive2, inner()) == "inner"
        gone2.set()  # as the server reports once the response is complete
        await asyncio.sleep(0.05)
        seen.append("not cancelled")
        stop_watching(scope2)
        return seen

    assert asyncio.run(run()) == ["inner", "outer cancelled", "not cancelled"]


def test_a_cancellation_from_elsewhere_is_not_taken_for_a_disconnect() -> None:
    async def run() -> None:
        _gone, receive = _receiver()
        scope: dict[str, Any] = {}

        async def guarded_sleep() -> None:
            await guarded(scope, receive, asyncio.sleep(10))

        task = asyncio.ensure_future(guarded_sleep())
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not stop_watching(scope)

    asyncio.run(run())
