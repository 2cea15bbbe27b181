"""An upstream connection's socket for the pool: the bytes read from it counted (a request
that failed with none read since it was sent had no byte of an answer: the pool's retry
rule), and a request's head held to go out with its body in one write."""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

from ._net import LoopStream

__all__ = ["Dialer", "Wire"]


class Wire(httpcore.AsyncNetworkStream):
    """A connection's socket, counting the bytes read from it: a request that failed with
    none read since it was sent had no byte of an answer. (The ``timeout`` parameters
    here are httpcore's interface, passed on.)"""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self.stream = stream
        self.received = 0
        self.hold = True
        """Keep the next write (a request's head) to send with the one after it."""
        self._held = b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data = await self.stream.read(max_bytes, timeout)
        self.received += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """httpcore writes a request as its head, its body, then its end (empty with a
        ``content-length``): the head waits here for the body, so the upstream gets the
        request in one write (one wake-up of its reader, not two)."""
        if self.hold:
            self.hold = False
            self._held = buffer
            return
        if not self._held:
            await self.stream.write(buffer, timeout)
            return
        head, self._held = self._held, b""
        if isinstance(self.stream, LoopStream):  # both in one write, the body not copied
            await self.stream.write_parts((head, buffer), timeout)
        else:
            await self.stream.write(head + buffer, timeout)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        self.stream = await self.stream.start_tls(ssl_context, server_hostname, timeout)
        return self

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class Dialer(httpcore.AsyncNetworkBackend):
    """Opens one connection's socket through ``backend`` and keeps it, counted."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self.backend = backend
        self.wire: Wire | None = None

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.backend.connect_tcp(host, port, timeout, local_address, socket_options)
        self.wire = Wire(stream)
        return self.wire

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.backend.connect_unix_socket(path, timeout, socket_options)
        self.wire = Wire(stream)
        return self.wire

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)
