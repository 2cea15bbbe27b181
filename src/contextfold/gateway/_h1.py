"""One HTTP/1.1 client connection to the upstream: a request written, its answer read.

httpcore's connection runs every request through h11's state machine (events, state
transitions and header validation in Python, in both directions). For what the gateway
sends (a request with a ``content-length``, from a client that already validated its
headers) and what providers answer (a head, then a body framed by ``content-length``,
``chunked`` or the connection's end), this module does the same work with a few string
operations: on a 229 KB request relayed on loopback it was about 0.15 ms of CPU less per
request (``benchmarks/fig_gateway_latency.py``). The interface is httpcore's connection
interface as :class:`~contextfold.gateway._pool.StackPool` uses it, so the pool's rules
(reuse, expiry, the retry of a request an idle connection's close crossed) are unchanged;
under it, :meth:`H1Connection.exchange` takes a request as a function that writes it and
gives the answer's :class:`Head` and :class:`AnswerBody` (the gateway's own requests,
``StackPool.exchange``, use it without httpcore's request and response objects):
an answer read to its end leaves the connection idle for the next request; one closed
early, cancelled or failed closes it. Errors are httpcore's types, as its connection
raises them: an end of stream before any answer is its ``RemoteProtocolError``.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

import httpcore

__all__ = ["AnswerBody", "H1Connection", "Head", "encode_head"]

MAX_HEAD = 64 * 1024
"""Bytes an answer's status line and headers may take."""
READ_SIZE = 64 * 1024
"""Bytes asked of the socket per read."""

_NO_BODY_STATUS = frozenset({204, 304})


class Head(NamedTuple):
    """An answer's status line and headers, as received."""

    status: int
    reason: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]


class H1Connection:
    """An HTTP/1.1 connection to ``origin``, dialled on the first request through
    ``network_backend`` (TLS for ``https``), kept alive between requests."""

    def __init__(
        self,
        *,
        origin: httpcore.Origin,
        ssl_context: ssl.SSLContext | None,
        keepalive_expiry: float | None,
        network_backend: httpcore.AsyncNetworkBackend,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        self._origin = origin
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._backend = network_backend
        self._socket_options = socket_options
        self._stream: httpcore.AsyncNetworkStream | None = None
        self._idle = True
        """No request in flight, and the last answer was read to its end on a connection
        the upstream keeps open."""
        self._closed = False
        self._expire_at: float | None = None

    def is_idle(self) -> bool:
        """Whether a next request may be sent on this connection."""
        return self._idle and not self._closed

    def has_expired(self) -> bool:
        """Idle past ``keepalive_expiry``, or the upstream sent something (its close) on
        the idle connection."""
        if self._stream is None:
            return False
        if self._expire_at is not None and time.monotonic() > self._expire_at:
            return True
        return bool(self._stream.get_extra_info("is_readable"))

    async def aclose(self) -> None:
        """Close the socket."""
        self._closed = True
        self._idle = False
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    async def _connect(self, timeouts: Mapping[str, float | None]) -> httpcore.AsyncNetworkStream:
        host = self._origin.host.decode("ascii")
        stream = await self._backend.connect_tcp(
            host,
            self._origin.port,
            timeout=timeouts.get("connect"),
            socket_options=self._socket_options,
        )
        if self._origin.scheme == b"https":
            context = self._ssl_context or ssl.create_default_context()
            try:
                stream = await stream.start_tls(
                    context, server_hostname=host, timeout=timeouts.get("connect")
                )
            except BaseException:
                await stream.aclose()
                raise
        return stream

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` and read its answer's head; the body is read as the returned
        response's stream is."""
        timeouts: Mapping[str, float | None] = request.extensions.get("timeout", {})
        write = timeouts.get("write")

        async def send(stream: httpcore.AsyncNetworkStream) -> None:
            await _send(stream, request, write)

        head, body = await self.exchange(request.method, send, timeouts)
        return httpcore.Response(
            status=head.status,
            headers=head.headers,
            content=body,
            extensions={
                "http_version": head.version,
                "reason_phrase": head.reason,
                "network_stream": self._stream,
            },
        )

    async def exchange(
        self,
        method: bytes,
        send: Callable[[httpcore.AsyncNetworkStream], Awaitable[None]],
        timeouts: Mapping[str, float | None],
    ) -> tuple[Head, AnswerBody]:
        """Write a request with ``send`` (dialling first if need be) and read its answer's
        head; the body is read as the returned :class:`AnswerBody` is iterated."""
        if not self.is_idle():
            raise httpcore.ConnectionNotAvailable()
        self._idle = False
        self._expire_at = None
        try:
            if self._stream is None:
                self._stream = await self._connect(timeouts)
            stream = self._stream
            await send(stream)
            reader = _Reader(stream, timeouts.get("read"))
            while True:
                head = await reader.head()
                if not 100 <= head.status < 200 or head.status == 101:
                    break  # 1xx answers (103 Early Hints) come before the real one
        except BaseException:
            await self.aclose()
            raise
        keep = (
            head.version == b"HTTP/1.1"
            and head.status != 101  # the connection now speaks another protocol
            and not _has_token(head.headers, b"connection", b"close")
        )
        framing = _framing(method, head.status, head.headers)
        if framing is None:  # read to the connection's end: it cannot be reused
            keep = False
        return head, AnswerBody(self, reader, framing, keep)

    def body_read(self, *, keep: bool) -> None:
        """The answer was read to its end: idle again if ``keep``."""
        if keep and not self._closed:
            self._idle = True
            if self._keepalive_expiry is not None:
                self._expire_at = time.monotonic() + self._keepalive_expiry


def encode_head(
    method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> list[bytes]:
    """A request's line and header lines (without the blank line that ends the head); a
    ``LocalProtocolError`` if a name or value holds a line break (it would split the
    request on the wire)."""
    lines = [b"%s %s HTTP/1.1\r\n" % (method, target)]
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpcore.LocalProtocolError(f"header {name!r} has a line break")
        lines.append(b"%s: %s\r\n" % (name, value))
    return lines


async def _send(
    stream: httpcore.AsyncNetworkStream,
    request: httpcore.Request,
    timeout: float | None,  # noqa: ASYNC109
) -> None:
    """The request's head, then its body: one write each, as httpcore writes them (the
    pool's socket wrapper sends the two together). A body whose headers say
    ``transfer-encoding: chunked`` (httpx's, for a streamed body) is sent in chunks; any
    other is sent whole, its ``content-length`` added if it has none (httpx sets it)."""
    content = request.stream
    assert isinstance(content, AsyncIterable)
    chunked = _has_token(request.headers, b"transfer-encoding", b"chunked")
    lines = encode_head(request.method, request.url.target, request.headers)
    if chunked:
        lines.append(b"\r\n")
        await stream.write(b"".join(lines), timeout)
        async for part in content:
            if part:
                await stream.write(b"%x\r\n%s\r\n" % (len(part), part), timeout)
        await stream.write(b"0\r\n\r\n", timeout)
        return
    sized = any(name.lower() == b"content-length" for name, _ in request.headers)
    parts = [part async for part in content]
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    if not sized and body:
        lines.append(b"content-length: %d\r\n" % len(body))
    lines.append(b"\r\n")
    await stream.write(b"".join(lines), timeout)
    await stream.write(body, timeout)


def _has_token(headers: Iterable[tuple[bytes, bytes]], name: bytes, token: bytes) -> bool:
    """Whether header ``name`` lists ``token`` (case-insensitive, comma-separated)."""
    for key, value in headers:
        if key.lower() == name and token in (t.strip() for t in value.lower().split(b",")):
            return True
    return False


def _framing(method: bytes, status: int, headers: list[tuple[bytes, bytes]]) -> int | str | None:
    """How the body ends (RFC 9112 section 6.3): ``0`` (no body), its length, ``"chunked"``,
    or None (at the connection's end)."""
    if method == b"HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
        return 0
    if _has_token(headers, b"transfer-encoding", b"chunked"):
        return "chunked"
    lengths = {v.strip() for k, v in headers if k.lower() == b"content-length"}
    if len(lengths) > 1:
        raise httpcore.RemoteProtocolError("the answer has conflicting content-length headers")
    if lengths:
        (length,) = lengths
        if not length.isdigit():
            raise httpcore.RemoteProtocolError(f"bad content-length {length!r}")
        return int(length)
    return None


class _Reader:
    """Buffered reads from the connection's socket: what arrived is :attr:`buffer` from
    :attr:`pos` on (taken by moving ``pos``, so many small chunks in one read cost no
    copy of the rest each)."""

    def __init__(self, stream: httpcore.AsyncNetworkStream, timeout: float | None) -> None:
        self._stream = stream
        self._timeout = timeout
        self.buffer = b""
        self.pos = 0
        self.answered = False
        """Whether any byte of an answer arrived."""

    def pending(self) -> int:
        """Bytes received and not taken yet."""
        return len(self.buffer) - self.pos

    def take(self, most: int) -> bytes:
        """Up to ``most`` of the bytes received, taken."""
        part = self.buffer[self.pos : self.pos + most]
        self.pos += len(part)
        return part

    async def more(self) -> bool:
        """Read what has arrived; False at the stream's end."""
        data = await self._stream.read(READ_SIZE, self._timeout)
        if not data:
            return False
        self.answered = True
        self.buffer = self.buffer[self.pos :] + data if self.pending() else data
        self.pos = 0
        return True

    async def line(self, limit: int) -> bytes:
        """The next line, without its CRLF."""
        while True:
            end = self.buffer.find(b"\r\n", self.pos)
            if end >= 0:
                line = self.buffer[self.pos : end]
                self.pos = end + 2
                return line
            if self.pending() > limit:
                raise httpcore.RemoteProtocolError("an answer line is too long")
            if not await self.more():
                raise httpcore.RemoteProtocolError("the upstream closed the connection mid-answer")

    async def head(self) -> Head:
        """The status, reason, version and headers of the next answer."""
        while True:
            end = self.buffer.find(b"\r\n\r\n", self.pos)
            if end >= 0:
                break
            if self.pending() > MAX_HEAD:
                raise httpcore.RemoteProtocolError("the answer's head is too large")
            if not await self.more():
                raise httpcore.RemoteProtocolError(
                    "the upstream closed the connection mid-answer"
                    if self.answered
                    else "Server disconnected without sending a response."  # httpcore's words
                )
        raw = self.buffer[self.pos : end]
        self.pos = end + 4
        status_line, *header_lines = raw.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise httpcore.RemoteProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        headers: list[tuple[bytes, bytes]] = []
        for line in header_lines:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpcore.RemoteProtocolError(f"malformed header line {line[:80]!r}")
            headers.append((name, value.strip()))
        return Head(int(parts[1]), parts[2] if len(parts) > 2 else b"", parts[0], headers)


class AnswerBody:
    """An answer's body as it arrives; the connection idle again once it was read to its
    end, closed if it is closed before."""

    def __init__(
        self, connection: H1Connection, reader: _Reader, framing: int | str | None, keep: bool
    ) -> None:
        self._connection = connection
        self._reader = reader
        self._framing = framing
        self._keep = keep
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            if self._framing == "chunked":
                async for part in self._chunks():
                    yield part
            elif self._framing is None:
                async for part in self._to_the_end():
                    yield part
            else:
                assert isinstance(self._framing, int)
                async for part in self._sized(self._framing):
                    yield part
        except BaseException:
            await self.aclose()
            raise
        self._done = True
        self._connection.body_read(keep=self._keep and not self._reader.pending())

    async def _sized(self, length: int) -> AsyncIterator[bytes]:
        reader = self._reader
        while length > 0:
            if not reader.pending() and not await reader.more():
                raise httpcore.RemoteProtocolError(
                    f"the upstream closed the connection with {length} bytes of the body unsent"
                )
            part = reader.take(length)
            length -= len(part)
            yield part

    async def _to_the_end(self) -> AsyncIterator[bytes]:
        reader = self._reader
        while True:
            if reader.pending():
                yield reader.take(reader.pending())
            if not await reader.more():
                return

    async def _chunks(self) -> AsyncIterator[bytes]:
        reader = self._reader
        while True:
            size_line = (await reader.line(1024)).split(b";", 1)[0].strip()
            if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
                raise httpcore.RemoteProtocolError(f"bad chunk size {size_line[:40]!r}")
            size = int(size_line, 16)
            if size == 0:
                while await reader.line(MAX_HEAD):  # trailers, to the empty line
                    pass
                return
            async for part in self._sized(size):
                yield part
            if await reader.line(2):
                raise httpcore.RemoteProtocolError("a chunk is longer than its size")

    async def aclose(self) -> None:
        """Closed before the body's end: the connection goes with it (what is left of the
        answer would be read as the next one's)."""
        if not self._done:
            self._done = True
            await self._connection.aclose()
