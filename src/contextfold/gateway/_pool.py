"""The upstream client's connection pool: idle keep-alive connections on a stack per
origin, taken and given back in constant time, at most ``max_connections`` open.

httpcore's own pool re-examines every connection on every request and on every response
closed (for each one, whether it expired: a readability check, a system call, for the
idle ones; and, for each idle one, a count of all the idle ones). Behind a client with
16 connections open that scan was the largest part of the gateway's CPU per request (in
a profile under ``wrk -c16``: about a third). Here a request takes the most recently
used idle connection (one expiry check), or opens a new one while fewer than
``max_connections`` are open (in use or idle), or else waits for one to be given back or
closed; its response, once closed, gives the connection back if it is idle again (the
answer read to its end), or closes it. HTTP/1.1, as the gateway's client speaks.

A kept-alive connection the upstream has closed while idle is found by the expiry check
(the socket reads as closed), unless the close crosses the request on the wire: then
the request meets an end of stream or a reset before any byte of an answer, and
httpcore's pool reports it (the client got a 502 where going direct succeeded). Such a
request is sent again, once, on a new connection, and only when all of these hold: the
connection had answered before (a connection the upstream just accepted is not closed
for idleness, so a failure there is not resent); no byte has been read from it since
the request was sent (the socket's reads are counted: after a byte the upstream has the
request and may be answering it, and a provider's POST costs money); the failure is the
connection's end (a read or write error, or an end of stream: never a timeout, the
upstream may be working on it); the body can be sent again (httpx's ``ByteStream``, as
the gateway's client sends; a streamed body is consumed). Go's ``net/http`` applies this
rule (its ``errServerClosedIdle``) to requests it may replay, and resends a POST only if
none of it was written; urllib3 and aiohttp resend only idempotent methods. Here it
covers POSTs, which are all the gateway sends: an upstream that reads a request and
closes without a byte of answer looks the same from the client, and that request is
sent twice; ``retried`` counts the requests this rule resent.

:meth:`StackPool.exchange` sends a request given as its head's bytes and its body (how
the gateway's upstream client sends, ``_upstream``) under the same rules, without httpx's
or httpcore's request and response objects. :class:`StackTransport` puts the pool behind
httpx's public transport interface (for an httpx client on the pool, as its tests use): it converts
httpx's request to httpcore's and the response back, and httpcore's exceptions to
httpx's (the same mapping as httpx's own transport), using neither package's private
attributes, so an httpx upgrade cannot silently unplug it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import anyio
import httpcore
import httpx

from ._dialer import Dialer
from ._h1 import H1Connection, Head
from ._net import LoopBackend

__all__ = ["StackPool", "StackTransport"]


_Key = tuple[bytes, bytes, int]
_T = TypeVar("_T")

_EXCEPTIONS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
}
"""httpcore's exceptions and httpx's for them, as httpx's own transport maps them: the
gateway tells a timeout (504) from a failed connection (502) by httpx's types."""


def _httpx_error(exc: Exception) -> type[httpx.HTTPError] | None:
    """httpx's exception type for httpcore's ``exc`` (the most specific), None if ``exc``
    is not httpcore's."""
    for kind in type(exc).__mro__:
        mapped = _EXCEPTIONS.get(kind)
        if mapped is not None:
            return mapped
    return None


_DROPPED = (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError)
"""How a connection the upstream closed fails a request sent on it: a reset (a read or
write error) or an end of stream before an answer (httpcore's protocol error "Server
disconnected without sending a response"). Timeouts are not among them."""


def _key(origin: httpcore.Origin) -> _Key:
    """``origin`` as a dictionary key (httpcore's ``Origin`` has no hash)."""
    return (origin.scheme, origin.host, origin.port)


class _Connection:
    """One upstream connection: its HTTP/1.1 (``_h1``), the socket's read count, and whether it has
    answered a request before (taken from the idle stack)."""

    __slots__ = ("dialer", "http", "reused")

    def __init__(self, http: H1Connection, dialer: Dialer) -> None:
        self.http = http
        self.dialer = dialer
        self.reused = False

    def received(self) -> int:
        """Bytes read from the socket so far."""
        wire = self.dialer.wire
        return 0 if wire is None else wire.received

    def next_request(self) -> None:
        """A request is about to be written: its head is held for its body (a new
        connection's socket, not dialled yet, starts so)."""
        wire = self.dialer.wire
        if wire is not None:
            wire.hold = True


def _replayable(request: httpcore.Request) -> bool:
    """Whether ``request``'s body can be sent a second time: httpx's ``ByteStream`` (bytes
    given as the content) yields its bytes on every iteration."""
    return isinstance(request.stream, httpx.ByteStream)


class StackPool:
    """Keep-alive HTTP/1.1 connections, the idle ones on a stack per origin, at most
    ``max_connections`` open (see the module docstring). Takes httpcore's requests and
    answers httpcore's responses, whose body gives the connection back when closed."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float | None = 5.0,
        max_connections: int = 100,
        max_idle: int = 64,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._max_connections = max_connections
        self._max_idle = max_idle
        self._socket_options = socket_options
        self._backend = LoopBackend()
        self._idle: dict[_Key, list[_Connection]] = {}
        self._closed = False
        self._changed: anyio.Event | None = None
        """Set, and dropped, when a connection is given back or closed: the requests
        waiting for one (there are some when it is not None) look again."""
        self.open = 0
        """Connections open now, in use or idle (a slot each, of ``max_connections``)."""
        self.opened = 0
        """Connections opened so far (each request that found no idle one opens one)."""
        self.retried = 0
        """Requests sent again on a new connection: their kept-alive one had been closed
        by the upstream before any byte of an answer (see the module docstring)."""

    def idle(self) -> int:
        """How many idle connections are kept, all origins."""
        return sum(len(stack) for stack in self._idle.values())

    async def _take(
        self, origin: httpcore.Origin, patience: float | None, *, fresh: bool = False
    ) -> _Connection:
        """The last idle connection to ``origin`` still usable (unless ``fresh``), or a
        new one if a slot is free (the longest idle connection closed for it if need be),
        else wait, at most ``patience`` seconds (httpx's pool timeout). Cancelled or timed
        out while waiting, it has taken nothing."""
        key = _key(origin)
        deadline: float | None = None
        while True:
            if self._closed:
                raise httpcore.ConnectError("the connection pool is closed")
            stack = None if fresh else self._idle.get(key)
            if stack:
                connection = stack.pop()
                if connection.http.is_idle() and not connection.http.has_expired():
                    connection.reused = True
                    return connection
                await self._close(connection)
                continue
            if self.open < self._max_connections:
                self.open += 1
                self.opened += 1
                dialer = Dialer(self._backend)
                http = H1Connection(
                    origin=origin,
                    ssl_context=self._ssl_context,
                    keepalive_expiry=self._keepalive_expiry,
                    network_backend=dialer,
                    socket_options=self._socket_options,
                )
                return _Connection(http, dialer)
            other = next((s for s in self._idle.values() if s), None)
            if other is not None:
                await self._close(other.pop(0))  # the longest idle (another origin's,
                continue  # or, for a fresh one, maybe its own)
            if self._changed is None:
                self._changed = anyio.Event()
            if patience is not None and deadline is None:
                deadline = anyio.current_time() + patience
            left = None if deadline is None else deadline - anyio.current_time()
            with anyio.move_on_after(left) as waited:
                await self._changed.wait()
            if waited.cancelled_caught:
                raise httpcore.PoolTimeout(f"no connection free in {patience} s")

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _close(self, connection: _Connection) -> None:
        """Close ``connection`` (not cancelled half way) and free its slot."""
        try:
            with anyio.CancelScope(shield=True):
                await connection.http.aclose()
        finally:
            self.open -= 1
            self._wake()

    async def give_back(self, origin: httpcore.Origin, connection: _Connection) -> None:
        """``connection``'s response is closed: kept for the next request to ``origin``
        if it is idle (the answer was read to its end) and there is room, else closed."""
        stack = self._idle.setdefault(_key(origin), [])
        if not self._closed and connection.http.is_idle() and len(stack) < self._max_idle:
            stack.append(connection)
            self._wake()
        else:
            await self._close(connection)

    async def _sent(
        self,
        origin: httpcore.Origin,
        patience: float | None,
        replayable: bool,
        attempt: Callable[[H1Connection], Awaitable[_T]],
    ) -> tuple[_T, _Connection]:
        """``attempt`` (a request written, its answer's head read) on an idle connection
        of ``origin``, or a new one; made again on a new one if the upstream had closed
        the idle one and the body is ``replayable`` (see the module docstring)."""
        connection = await self._take(origin, patience)
        connection.next_request()
        before = connection.received()
        try:
            return await attempt(connection.http), connection
        except BaseException as exc:
            await self._close(connection)
            unanswered = connection.reused and connection.received() == before
            if not (unanswered and isinstance(exc, _DROPPED) and replayable):
                raise
        connection = await self._take(origin, patience, fresh=True)
        self.retried += 1
        try:
            return await attempt(connection.http), connection
        except BaseException:
            await self._close(connection)
            raise

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection of its origin, or a new one; sent again
        on a new one if the upstream had closed the idle one (see the module docstring)."""
        origin = request.url.origin
        patience = request.extensions.get("timeout", {}).get("pool")
        response, connection = await self._sent(
            origin, patience, _replayable(request), lambda http: http.handle_async_request(request)
        )
        assert isinstance(response.stream, AsyncIterable)
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Returned(response.stream, self, origin, connection),
            extensions=response.extensions,
        )

    async def exchange(
        self,
        origin: httpcore.Origin,
        method: bytes,
        head: bytes,
        body: bytes,
        timeouts: Mapping[str, float | None],
    ) -> tuple[Head, _Returned]:
        """A request given as its head's bytes (ended by its blank line) and its body,
        sent as :meth:`handle_async_request` sends one (the same reuse and retry: bytes
        can be sent again), without httpx's or httpcore's request and response objects;
        its answer's head and body. Errors are httpx's, as :class:`StackTransport`
        raises them."""
        write = timeouts.get("write")

        async def send(stream: httpcore.AsyncNetworkStream) -> None:
            await stream.write(head, write)  # held by the socket wrapper for the body:
            await stream.write(body, write)  # the two go in one write

        try:
            (answer, content), connection = await self._sent(
                origin,
                timeouts.get("pool"),
                True,
                lambda http: http.exchange(method, send, timeouts),
            )
        except Exception as exc:
            mapped = _httpx_error(exc)
            if mapped is None:
                raise
            raise mapped(str(exc)) from exc
        return answer, _Returned(content, self, origin, connection)

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their responses do."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for connection in stack:
                await self._close(connection)
        self._wake()

    async def __aenter__(self) -> StackPool:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


class _Returned(httpx.AsyncByteStream):
    """A response body, httpcore's exceptions raised as httpx's, that gives its
    connection back to the pool when closed."""

    def __init__(
        self,
        stream: AsyncIterable[bytes],
        pool: StackPool,
        origin: httpcore.Origin,
        connection: _Connection,
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
        except BaseException as exc:
            await self.aclose()
            mapped = _httpx_error(exc) if isinstance(exc, Exception) else None
            if mapped is None:
                raise
            raise mapped(str(exc)) from exc

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._connection.http.is_idle():
            # Read to its end: nothing below waits, unless the connection is closed,
            # which shields itself (an anyio cancel scope costs more than the rest).
            await self._give_back()
            return
        with anyio.CancelScope(shield=True):
            await self._give_back()

    async def _give_back(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()
        await self._pool.give_back(self._origin, self._connection)


class StackTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface in front of a :class:`StackPool` (``pool``): httpx's
    request converted to httpcore's, the response and exceptions back, as httpx's own
    transport does. TLS as httpx's default: ``httpx.create_ssl_context`` (certifi's
    roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``). No proxy: a client with one in its
    environment keeps httpx's own transports (see ``_upstream``)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        keepalive_expiry: float | None = 5.0,
        max_connections: int = 100,
        max_idle: int = 64,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        self.pool = StackPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            keepalive_expiry=keepalive_expiry,
            max_connections=max_connections,
            max_idle=max_idle,
            socket_options=socket_options,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the pool; its body is read as the response is."""
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        url = request.url
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=stream,
            extensions=request.extensions,
        )
        try:
            response = await self.pool.handle_async_request(sent)
        except Exception as exc:
            mapped = _httpx_error(exc)
            if mapped is None:
                raise
            raise mapped(str(exc)) from exc
        body = response.stream
        assert isinstance(body, _Returned)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=body,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()
