"""The upstream client's connection pool (``StackPool``): keep-alive connections reused,
one per request in flight, none reused once the upstream closed it or its answer was
left unread, and the gateway's client built on it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from contextfold.gateway import GatewayConfig, create_app
from contextfold.gateway._pool import StackPool, StackTransport

from .servers import ScriptedUpstream, free_port, message, serving


class Peers:
    """An upstream that answers with the client's port: one port, one connection."""

    def __init__(self) -> None:
        self.ports: list[int] = []

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            await asyncio.sleep(float(request.query_params.get("wait", "0")))
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


def pool_of(client: httpx.AsyncClient) -> StackPool:
    transport = client._transport
    assert isinstance(transport, StackTransport)
    pool = transport._pool
    assert isinstance(pool, StackPool)
    return pool


def test_sequential_requests_share_one_connection() -> None:
    async def run(url: str) -> StackPool:
        async with httpx.AsyncClient(base_url=url, transport=StackTransport()) as client:
            for _ in range(10):
                assert (await client.get("/")).text == "xx"
            return pool_of(client)

    with peer_upstream() as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 1
    assert len(set(peers.ports)) == 1
    assert len(peers.ports) == 10


def test_requests_in_flight_each_get_a_connection_and_give_it_back() -> None:
    async def run(url: str) -> tuple[StackPool, int, int]:
        async with httpx.AsyncClient(base_url=url, transport=StackTransport()) as client:
            pool = pool_of(client)
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
        async with httpx.AsyncClient(base_url=url, transport=StackTransport()) as client:
            assert (await client.get("/", params={"close": "1"})).status_code == 200
            assert (await client.get("/")).status_code == 200
            await asyncio.sleep(0.6)  # past the upstream's keep-alive timeout
            assert (await client.get("/")).status_code == 200
            return pool_of(client)

    with peer_upstream(keep_alive=0.2) as (url, peers):
        pool = asyncio.run(run(url))
    assert pool.opened == 3
    assert len(set(peers.ports)) == 3


def test_an_answer_left_unread_closes_its_connection() -> None:
    async def run(url: str) -> StackPool:
        async with httpx.AsyncClient(base_url=url, transport=StackTransport()) as client:
            async with client.stream("GET", "/", params={"size": "500000"}) as response:
                async for _ in response.aiter_raw():
                    break  # the client leaves after the first chunk
            assert pool_of(client).idle() == 0
            assert (await client.get("/")).text == "xx"
            return pool_of(client)

    with peer_upstream() as (url, _):
        pool = asyncio.run(run(url))
    assert pool.opened == 2


def test_the_gateway_relays_on_one_kept_alive_connection(upstream: ScriptedUpstream) -> None:
    """The gateway's own upstream client pools this way: ten requests, one connection."""
    for _ in range(10):
        upstream.then_json(message("hi"))
    app = create_app(GatewayConfig(upstream=upstream.url))
    with serving(app) as url, httpx.Client(base_url=url) as client:
        for _ in range(10):
            reply = client.post(
                "/v1/messages",
                json={
                    "model": "m",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "x"}],
                },
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            )
            assert reply.status_code == 200
    pool = app.state.gateway.upstream._client._transport._pool
    assert isinstance(pool, StackPool)
    assert pool.opened == 1


def test_a_proxy_in_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx routes through ``HTTPS_PROXY`` only with its own transports: with one set,
    the gateway's client keeps them (and httpcore's pool) rather than drop the proxy."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    app = create_app(GatewayConfig(upstream="https://api.anthropic.com"))
    client = app.state.gateway.upstream._client
    assert not isinstance(client._transport, StackTransport)
    proxied = [t for t in client._mounts.values() if t is not None]
    assert proxied, "the environment's proxy was dropped"
    monkeypatch.delenv("HTTPS_PROXY")
    direct = create_app(GatewayConfig(upstream="https://api.anthropic.com"))
    assert isinstance(direct.state.gateway.upstream._client._transport, StackTransport)
