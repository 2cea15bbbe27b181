"""The upstream client's connection pool: idle keep-alive connections on a stack per
origin, taken and given back in constant time.

httpcore's own pool re-examines every connection on every request and on every response
closed (for each one, whether it expired: a readability check, a system call, for the
idle ones; and, for each idle one, a count of all the idle ones). Behind a client with
16 connections open that scan was the largest part of the gateway's CPU per request (in
a profile under ``wrk -c16``: about a third). Here a request takes the most recently
used idle connection (one expiry check), or opens a new one; its response, once closed,
gives the connection back if it is idle again (the answer read to its end), or closes
it. HTTP/1.1, as the gateway's client speaks; the number of connections open is that of
the requests in flight (the clients' own concurrency), at most ``max_idle`` kept idle.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import anyio
import httpcore
import httpx

__all__ = ["StackPool", "StackTransport"]


_Key = tuple[bytes, bytes, int]


def _key(origin: httpcore.Origin) -> _Key:
    """``origin`` as a dictionary key (httpcore's ``Origin`` has no hash)."""
    return (origin.scheme, origin.host, origin.port)


class StackPool:
    """Keep-alive HTTP/1.1 connections, the idle ones on a stack per origin (see the
    module docstring). Speaks httpcore's interface: what ``httpx.AsyncHTTPTransport``
    sends its requests to."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float | None = 5.0,
        max_idle: int = 64,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._max_idle = max_idle
        self._socket_options = socket_options
        self._idle: dict[_Key, list[httpcore.AsyncHTTPConnection]] = {}
        self._closed = False
        self.opened = 0
        """Connections opened so far (each request that found no idle one opens one)."""

    def idle(self) -> int:
        """How many idle connections are kept, all origins."""
        return sum(len(stack) for stack in self._idle.values())

    async def _take(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        stack = self._idle.get(_key(origin))
        while stack:
            connection = stack.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection
            await connection.aclose()
        self.opened += 1
        return httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            socket_options=self._socket_options,
        )

    async def give_back(
        self, origin: httpcore.Origin, connection: httpcore.AsyncHTTPConnection
    ) -> None:
        """``connection``'s response is closed: kept for the next request to ``origin``
        if it is idle (the answer was read to its end) and there is room, else closed."""
        stack = self._idle.setdefault(_key(origin), [])
        if not self._closed and connection.is_idle() and len(stack) < self._max_idle:
            stack.append(connection)
        else:
            await connection.aclose()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection of its origin, or a new one."""
        if self._closed:
            raise httpcore.ConnectError("the connection pool is closed")
        origin = request.url.origin
        connection = await self._take(origin)
        try:
            response = await connection.handle_async_request(request)
        except BaseException:
            await connection.aclose()
            raise
        assert isinstance(response.stream, AsyncIterable)
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Returned(response.stream, self, origin, connection),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their responses do."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for connection in stack:
                await connection.aclose()

    async def __aenter__(self) -> StackPool:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


class _Returned:
    """A response body that gives its connection back to the pool when closed."""

    def __init__(
        self,
        stream: AsyncIterable[bytes],
        pool: StackPool,
        origin: httpcore.Origin,
        connection: httpcore.AsyncHTTPConnection,
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._origin = origin
        self._connection = connection
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            close = getattr(self._stream, "aclose", None)
            if close is not None:
                await close()
            await self._pool.give_back(self._origin, self._connection)


class StackTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (request and response conversion, its exceptions) in front of a
    :class:`StackPool` instead of httpcore's pool. The TLS context and socket options
    are those httpx made for its own pool; through a proxy (``HTTPS_PROXY`` given as
    ``proxy``), httpx's own pool is kept."""

    def __init__(self, *, keepalive_expiry: float | None = 5.0, **options: Any) -> None:
        super().__init__(**options)
        stock = self._pool
        if isinstance(stock, httpcore.AsyncConnectionPool):
            self._pool = StackPool(  # type: ignore[assignment]
                ssl_context=getattr(stock, "_ssl_context", None),
                keepalive_expiry=keepalive_expiry,
                socket_options=getattr(stock, "_socket_options", None),
            )
