"""The upstream connections' sockets, on the running asyncio loop's own transports.

httpcore reaches its sockets through a network backend; its default (anyio's streams)
costs, per read or write, a cancel scope, a timeout scope and a checkpoint, and its TLS is
anyio's Python-level wrapper over a memory BIO. :class:`LoopBackend` gives httpcore the
loop's transport and a small protocol instead (uvloop's C transport and TLS under the
gateway's server stack): on a 190 KB request relayed on loopback the upstream call took
about a quarter less CPU. The behaviour httpcore relies on is kept: a read returns what
has arrived (at most ``max_bytes``) or ``b""`` at the end of the stream; a reset is a
``ReadError``/``WriteError``, a timeout the matching httpcore timeout; a socket "is
readable" when data, an end of stream or an error is waiting (how httpcore tells that an
idle connection was closed by the upstream); connections try each resolved address,
another every 250 ms until one answers (RFC 8305, as anyio's ``connect_tcp`` does).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any, cast

import anyio
import httpcore

__all__ = ["LoopBackend", "LoopStream"]

ATTEMPT_DELAY = 0.25
"""Seconds before the next address is tried while earlier attempts are still connecting."""
READ_AHEAD = 1 << 20
"""Bytes received and not yet read past which the socket stops reading (TCP then holds
the upstream back): without it, an answer the client reads slowly was buffered whole."""


class _Socket(asyncio.Protocol):
    """What the transport delivers: received bytes, the end of the stream, the error that
    closed it, and whether writing is paused (the transport's buffer is full)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ended = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.reading = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.reading and len(self.buffer) > READ_AHEAD and self.transport is not None:
            self.reading = False
            self.transport.pause_reading()
        self._wake()

    def taken(self) -> None:
        """Bytes were read from :attr:`buffer`: reading resumes once it is low again."""
        if not self.reading and len(self.buffer) <= READ_AHEAD // 2:
            self.reading = True
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _wait(future: asyncio.Future[None], timeout: float | None) -> bool:  # noqa: ASYNC109
    """Wait for ``future``; False if ``timeout`` seconds passed first."""
    if timeout is None:
        await future
        return True
    try:
        async with asyncio.timeout(timeout):
            await future
    except TimeoutError:
        return False
    return True


class LoopStream(httpcore.AsyncNetworkStream):
    """One connection for httpcore, over the loop's transport. (The ``timeout``
    parameters are httpcore's interface.)"""

    def __init__(self, protocol: _Socket) -> None:
        self._socket = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        state = self._socket
        while not state.buffer:
            if state.ended:
                if state.error is not None:
                    raise httpcore.ReadError(str(state.error) or type(state.error).__name__)
                return b""
            state.waiter = asyncio.get_running_loop().create_future()
            if not await _wait(state.waiter, timeout):
                raise httpcore.ReadTimeout(f"no byte from the upstream in {timeout} s")
        if len(state.buffer) <= max_bytes:
            data = bytes(state.buffer)
            state.buffer.clear()
        else:
            data = bytes(state.buffer[:max_bytes])
            del state.buffer[:max_bytes]
        state.taken()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if buffer:
            await self.write_parts((buffer,), timeout)

    async def write_parts(
        self,
        parts: tuple[bytes, ...],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """``parts`` written as one (the transport's ``writelines``: a request's head and
        its 229 KB body went out in one system call either way, but joining them was a
        copy of the body, about 20 microseconds)."""
        state = self._socket
        transport = state.transport
        if transport is None or state.ended or transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        if len(parts) == 1:
            transport.write(parts[0])
        else:
            transport.writelines(parts)
        if state.paused:
            state.drained = asyncio.get_running_loop().create_future()
            if not await _wait(state.drained, timeout):
                raise httpcore.WriteTimeout(f"the upstream took no byte in {timeout} s")
            if state.error is not None:
                raise httpcore.WriteError(str(state.error) or type(state.error).__name__)

    async def aclose(self) -> None:
        transport = self._socket.transport
        if transport is not None:
            transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        state = self._socket
        assert state.transport is not None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(
                    state.transport, state, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            state.transport.close()
            raise httpcore.ConnectTimeout(f"no TLS handshake in {timeout} s") from None
        except (OSError, ssl.SSLError) as exc:
            state.transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        state.transport = cast(asyncio.Transport, tls)
        return self

    def get_extra_info(self, info: str) -> Any:
        state = self._socket
        if info == "is_readable":
            return bool(state.buffer) or state.ended
        transport = state.transport
        if transport is None:
            return None
        names = {
            "ssl_object": "ssl_object",
            "client_addr": "sockname",
            "server_addr": "peername",
            "socket": "socket",
        }
        name = names.get(info)
        return None if name is None else transport.get_extra_info(name)


async def _dial(infos: list[tuple[Any, ...]], local_address: str | None) -> socket.socket:
    """A socket connected to the first address that answers, another tried every
    :data:`ATTEMPT_DELAY` seconds while earlier ones are pending; the others closed."""
    loop = asyncio.get_running_loop()
    winner: socket.socket | None = None
    errors: list[OSError] = []

    async def attempt(info: tuple[Any, ...], failed: anyio.Event) -> None:
        nonlocal winner
        family, kind, proto, _, address = info
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            if local_address is not None:
                sock.bind((local_address, 0))
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            failed.set()
            return
        except BaseException:
            sock.close()
            raise
        if winner is None:
            winner = sock
            group.cancel_scope.cancel()
        else:
            sock.close()

    async with anyio.create_task_group() as group:
        for info in infos:
            failed = anyio.Event()
            group.start_soon(attempt, info, failed)
            with anyio.move_on_after(ATTEMPT_DELAY):
                await failed.wait()
    if winner is None:
        raise OSError(f"could not connect: {'; '.join(str(e) for e in errors)}")
    return winner


def _interleaved(infos: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Addresses alternating between families, the first family first (RFC 8305)."""
    first = [i for i in infos if i[0] == infos[0][0]]
    other = [i for i in infos if i[0] != infos[0][0]]
    out: list[tuple[Any, ...]] = []
    for n in range(max(len(first), len(other))):
        out.extend(group[n] for group in (first, other) if n < len(group))
    return out


class LoopBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on the running asyncio loop (TCP; Unix sockets through
    httpcore's own backend)."""

    def __init__(self) -> None:
        self._fallback = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                if not infos:
                    raise OSError(f"no address for {host}")
                sock = await _dial(_interleaved(list(infos)), local_address)
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for option in socket_options or ():
                        sock.setsockopt(*option)
                    _, protocol = await loop.create_connection(_Socket, sock=sock)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection in {timeout} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return LoopStream(protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._fallback.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
