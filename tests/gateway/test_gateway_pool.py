"""The upstream client's connection pool (``StackPool``): keep-alive connections reused,
one per request in flight up to ``max_connections`` (the rest wait), none reused once the
upstream closed it or its answer was left unread, httpcore's failures raised as httpx's,
and the gateway's client built on it."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from contextfold.gateway import GatewayConfig, _pool, create_app
from contextfold.gateway._pool import StackPool, StackTransport

from .servers import ScriptedUpstream, free_port, message, serving


class Peers:
    """An upstream that records each request's client port (one port, one connection)
    and the most requests it had in hand at once."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.busy = 0
        self.most_busy = 0

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            self.busy += 1
            self.most_busy = max(self.most_busy, self.busy)
            try:
                await asyncio.sleep(float(request.query_params.get("wait", "0")))
            finally:
                self.busy -= 1
            assert request.client is not None
            self.ports.append(request.client.port)
            size = int(request.query_params.get("size", "2"))
            headers = {"connection": "close"} if "close" in request.query_params else None
            return PlainTextResponse("x" * size, headers=headers)

        return Starlette(routes=[Route("/", answer)])


@contextmanager
def peer_upstream(keep_alive: float = 5.0) -> Iterator[tuple[str, Peers]]:
    peers = Peers()
    port = free_port()
    config = uvicorn.Config(
        peers.app(), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=keep_alive
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", peers
    finally:
        server.should_exit = True
        thread.join(10)


def stack_client(url: str, **options: Any) -> tuple[httpx.AsyncClient, StackPool]:
    """An httpx client on a :class:`StackTransport` built with ``options``, and its pool."""
    transport = StackTransport(**options)
    return httpx.AsyncClient(base_url=url, transport=transport), transport.pool


def test_sequential_requests_share_one_connection() -> None:
    async def run(url: str) -> StackPool:
        client, pool = stack_client(url)
        async with client:
            for _ in range(10):
                assert (await client.get("/")).text == "xx"
        return pool

    with peer_upstream() as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 1
    assert len(set(peers.ports)) == 1
    assert len(peers.ports) == 10


def test_requests_in_flight_each_get_a_connection_and_give_it_back() -> None:
    async def run(url: str) -> tuple[StackPool, int, int]:
        client, pool = stack_client(url)
        async with client:
            wave = [client.get("/", params={"wait": "0.2"}) for _ in range(6)]
            assert all(r.status_code == 200 for r in await asyncio.gather(*wave))
            first, idle = pool.opened, pool.idle()
            again = [client.get("/", params={"wait": "0.2"}) for _ in range(6)]
            assert all(r.status_code == 200 for r in await asyncio.gather(*again))
            return pool, first, idle

    with peer_upstream() as (url, peers):
        pool, first, idle = asyncio.run(run(url))
    assert first == idle == 6
    assert pool.opened == 6  # the second wave opened none
    assert len(set(peers.ports)) == 6


def test_a_connection_the_upstream_closed_is_not_reused() -> None:
    """Closed by the server after its answer (``connection: close``) or while idle (its
    keep-alive timeout): the next request opens a new connection, without an error."""

    async def run(url: str) -> StackPool:
        client, pool = stack_client(url)
        async with client:
            assert (await client.get("/", params={"close": "1"})).status_code == 200
            assert (await client.get("/")).status_code == 200
            await asyncio.sleep(0.6)  # past the upstream's keep-alive timeout
            assert (await client.get("/")).status_code == 200
        return pool

    with peer_upstream(keep_alive=0.2) as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 3
    assert len(set(peers.ports)) == 3


def test_an_answer_left_unread_closes_its_connection() -> None:
    async def run(url: str) -> StackPool:
        client, pool = stack_client(url)
        async with client:
            async with client.stream("GET", "/", params={"size": "500000"}) as response:
                async for _ in response.aiter_raw():
                    break  # the client leaves after the first chunk
            assert pool.idle() == 0
            assert pool.open == 0
            assert (await client.get("/")).text == "xx"
        return pool

    with peer_upstream() as (url, _):
        pool = asyncio.run(run(url))
    assert pool.opened == 2


def test_requests_beyond_max_connections_wait_for_one() -> None:
    """Three requests at once, at most two connections: the third waits for one of the
    first two to be given back, then all three complete."""

    async def run(url: str) -> StackPool:
        client, pool = stack_client(url, max_connections=2)
        async with client:
            wave = [client.get("/", params={"wait": "0.3"}) for _ in range(3)]
            assert [r.text for r in await asyncio.gather(*wave)] == ["xx"] * 3
            assert pool.open == pool.idle() == 2
        return pool

    with peer_upstream() as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 2
    assert len(set(peers.ports)) == 2
    assert peers.most_busy == 2
    assert len(peers.ports) == 3


def test_a_cancelled_waiter_frees_no_slot_it_did_not_take() -> None:
    """At one connection, held by an open response: a request cancelled while it waits
    leaves the count as it was, so two requests after it still go one at a time."""

    async def run(url: str) -> StackPool:
        client, pool = stack_client(url, max_connections=1)
        async with client:
            async with client.stream("GET", "/") as held:
                waiter = asyncio.ensure_future(client.get("/"))
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(waiter, 0.3)
                assert pool.open == 1
                await held.aread()
            assert pool.open == 1  # given back idle
            wave = [client.get("/", params={"wait": "0.2"}) for _ in range(2)]
            assert [r.text for r in await asyncio.gather(*wave)] == ["xx"] * 2
            assert pool.open == 1
        return pool

    with peer_upstream() as (url, peers):
        pool = asyncio.run(run(url))
    assert peers.most_busy == 1
    assert pool.opened == 1


def test_a_waiter_gives_up_after_the_pool_timeout() -> None:
    """httpx's ``pool`` timeout bounds the wait: ``httpx.PoolTimeout`` (the gateway's 504),
    and the slot count unchanged."""

    async def run(url: str) -> StackPool:
        client, pool = stack_client(url, max_connections=1)
        async with client:
            async with client.stream("GET", "/") as held:
                with pytest.raises(httpx.PoolTimeout):
                    await client.get("/", timeout=httpx.Timeout(5.0, pool=0.2))
                await held.aread()
            assert (await client.get("/")).text == "xx"
            assert pool.open == 1
        return pool

    with peer_upstream() as (url, _):
        pool = asyncio.run(run(url))
    assert pool.opened == 1


def test_a_response_closed_unread_frees_its_slot_for_a_waiter() -> None:
    """At one connection, a request waits while another's answer is open; the answer
    closed half read (its connection closed, not reusable), the waiter opens a new one."""

    async def run(url: str) -> StackPool:
        client, pool = stack_client(url, max_connections=1)
        async with client:
            async with client.stream("GET", "/", params={"size": "500000"}) as held:
                waiter = asyncio.ensure_future(client.get("/"))
                chunks = held.aiter_raw()
                assert await chunks.__anext__()  # one chunk read, the rest left unread
                await asyncio.sleep(0.3)
                assert not waiter.done(), "the second request did not wait for a slot"
            assert (await asyncio.wait_for(waiter, 5)).text == "xx"
            assert pool.open == 1
        return pool

    with peer_upstream() as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 2
    assert len(set(peers.ports)) == 2


def test_at_the_cap_an_idle_connection_to_another_origin_makes_room() -> None:
    async def run(first: str, second: str) -> StackPool:
        client, pool = stack_client(first, max_connections=1)
        async with client:
            assert (await client.get(f"{first}/")).text == "xx"
            assert (await client.get(f"{second}/")).text == "xx"  # not a wait: a swap
            assert pool.open == pool.idle() == 1
        return pool

    with peer_upstream() as (first, _), peer_upstream() as (second, _):
        pool = asyncio.run(asyncio.wait_for(run(first, second), 5))
    assert pool.opened == 2


def test_a_refused_connection_is_httpx_connect_error() -> None:
    async def run(url: str) -> StackPool:
        client, pool = stack_client(url)
        async with client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/")
        return pool

    pool = asyncio.run(run(f"http://127.0.0.1:{free_port()}"))
    assert pool.open == 0


def test_a_slow_answer_is_httpx_read_timeout() -> None:
    async def run(url: str) -> StackPool:
        client, pool = stack_client(url)
        async with client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/", params={"wait": "2"}, timeout=httpx.Timeout(5.0, read=0.2))
            assert pool.open == 0
            assert (await client.get("/")).text == "xx"
        return pool

    with peer_upstream() as (url, _):
        pool = asyncio.run(run(url))
    assert pool.opened == 2


def test_a_body_cut_short_is_httpx_remote_protocol_error() -> None:
    """The upstream closes before the length it announced: httpx's error, as httpx's own
    transport raises it, and the connection closed."""

    async def run() -> StackPool:
        async def cut(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(cut, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client, pool = stack_client(f"http://127.0.0.1:{port}")
        async with server, client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("/")
            assert pool.open == 0
        return pool

    asyncio.run(run())


def test_the_gateway_relays_on_one_kept_alive_connection(upstream: ScriptedUpstream) -> None:
    """The gateway's own upstream client pools this way: ten requests, one connection."""
    for _ in range(10):
        upstream.then_json(message("hi"))
    app = create_app(GatewayConfig(upstream=upstream.url))
    with serving(app) as url, httpx.Client(base_url=url) as client:
        for _ in range(10):
            assert post_message(client).status_code == 200
    pool = app.state.gateway.upstream.pool
    assert isinstance(pool, StackPool)
    assert pool.opened == 1


def post_message(client: httpx.Client) -> httpx.Response:
    return client.post(
        "/v1/messages",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
    )


class RecordingProxy:
    """An HTTP proxy that answers every request itself and records the ``host`` asked."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.hosts += [v.decode() for k, v in scope["headers"] if k == b"host"]
        body = json.dumps(message("via the proxy")).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def test_a_proxy_in_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx routes through ``HTTP_PROXY`` only with its own transports: with one set,
    the gateway's client keeps them (and httpcore's pool) rather than drop the proxy."""
    proxy = RecordingProxy()
    with serving(proxy) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        app = create_app(GatewayConfig(upstream="http://upstream.invalid"))
        assert app.state.gateway.upstream.pool is None
        with serving(app) as url, httpx.Client(base_url=url, trust_env=False) as client:
            reply = post_message(client)  # the test's own client straight to the gateway
    assert reply.status_code == 200, reply.text
    assert "via the proxy" in reply.text
    assert proxy.hosts == ["upstream.invalid"]
    monkeypatch.delenv("HTTP_PROXY")
    direct = create_app(GatewayConfig(upstream="http://upstream.invalid"))
    assert isinstance(direct.state.gateway.upstream.pool, StackPool)


class CookieSettingProxy(RecordingProxy):
    """A :class:`RecordingProxy` whose answers set a cookie, and which records the
    ``cookie`` header of every request (``None`` when there is none)."""

    def __init__(self) -> None:
        super().__init__()
        self.cookies: list[str | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        self.cookies.append(headers[b"cookie"].decode() if b"cookie" in headers else None)
        body = json.dumps(message("via the proxy")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"set-cookie", b"session=alice-7f3a; Path=/"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def test_through_a_proxy_no_cookie_of_one_client_goes_with_anothers_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a proxy in the environment the gateway sends through httpx's client, whose
    cookie jar would replay an upstream's ``Set-Cookie`` to one client on every later
    request, whoever sent it."""
    proxy = CookieSettingProxy()
    with serving(proxy) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        app = create_app(GatewayConfig(upstream="http://upstream.invalid"))
        assert app.state.gateway.upstream.pool is None  # httpx's client and transports
        with serving(app) as url:
            with httpx.Client(base_url=url, trust_env=False) as alice:
                first = post_message(alice)
            with httpx.Client(base_url=url, trust_env=False) as bob:  # another client
                second = post_message(bob)
    assert first.status_code == second.status_code == 200
    assert first.headers["set-cookie"].startswith("session=alice-7f3a")
    assert proxy.cookies == [None, None]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id == "self"


def _named_attribute(call: ast.Call) -> str:
    """The attribute name ``getattr``/``setattr``/``hasattr`` is given as a literal."""
    by_name = isinstance(call.func, ast.Name) and call.func.id in {"getattr", "setattr", "hasattr"}
    if by_name and len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        return str(call.args[1].value)
    return ""


def private_uses(source: str, bases: dict[str, type]) -> list[str]:
    """What ``source`` touches of other packages' private names: a private attribute of
    anything but ``self``, a private name given to ``getattr``/``setattr``/``hasattr``,
    and, in a class deriving from another package's class, a private attribute that an
    instance of that base already has (set by the base's own code)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _on_self(node):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
        if isinstance(node, ast.Call) and _private(_named_attribute(node)):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
        if isinstance(node, ast.ClassDef):
            theirs: set[str] = set()
            for base in node.bases:
                kind = bases.get(ast.unparse(base))
                if kind is not None and not kind.__module__.startswith("contextfold"):
                    theirs |= {n for n in vars(kind()) if n.startswith("_")}
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and inner.attr in theirs:
                    found.append(f"self.{inner.attr} of {node.name}'s base")
    return found


def test_the_pool_uses_no_private_name_of_httpx_or_httpcore() -> None:
    """An httpx upgrade must not silently unplug the pool: only httpx's and httpcore's
    public interfaces (the transport once subclassed httpx's and replaced its ``_pool``,
    copying ``_ssl_context`` and ``_socket_options`` out of httpcore's)."""
    bases = {
        "httpx.AsyncHTTPTransport": httpx.AsyncHTTPTransport,
        "httpx.AsyncBaseTransport": httpx.AsyncBaseTransport,
        "httpx.AsyncByteStream": httpx.AsyncByteStream,
        "httpcore.AsyncNetworkStream": httpcore.AsyncNetworkStream,
        "httpcore.AsyncNetworkBackend": httpcore.AsyncNetworkBackend,
    }
    assert private_uses(inspect.getsource(_pool), bases) == []
