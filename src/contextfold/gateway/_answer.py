"""An upstream's answer as the routes read it: status, headers, the body as it arrives.

The gateway's own connections give the answer's head as bytes and its body as the
socket delivers it; building httpx's request and response objects around them (header
normalization, URL parsing, the decoders' set-up) was about a third of the pass-through
hop's CPU. This is the part of ``httpx.Response`` the routes use, on those bytes: names
lower-cased and repeated headers joined by ``", "`` (as ``httpx.Headers.items()`` gives
them), the body decoded from its ``content-encoding`` (by httpx's own decoders, only when
there is one), and the connection given back when the body is read to its end or closed.
An ``httpx.Response`` (httpx's own transports, through a proxy) is wrapped the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence

import httpx

__all__ = ["UpstreamAnswer"]

_IDENTITY = frozenset({"", "identity"})


class _Raw(httpx.AsyncByteStream):
    """Bytes as they arrive, for httpx's decoders."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk


def header_map(raw: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    """Headers by lower-cased name, repeated ones joined by ``", "``; bytes read as
    latin-1, so relaying them gives back the bytes received."""
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous}, {text}"
    return headers


def _length(status: int, headers: dict[str, str]) -> int | None:
    """The body's length as its one ``content-length`` says, if the body is framed by
    it (not chunked, not an answer without a body)."""
    length = headers.get("content-length")
    if length is None or "transfer-encoding" in headers or status < 200 or status in (204, 304):
        return None
    return int(length) if length.isdigit() else None  # repeated ones were joined: not digits


class UpstreamAnswer:
    """The upstream's answer to one request; :meth:`aclose` (or reading the body to its
    end) ends it and gives its connection back."""

    __slots__ = ("_chunks", "_close", "_closed", "headers", "length", "status_code")

    def __init__(
        self,
        status: int,
        raw_headers: Sequence[tuple[bytes, bytes]],
        chunks: AsyncIterable[bytes],
        close: Callable[[], Awaitable[None]],
        *,
        decoded: bool = False,
    ) -> None:
        self.status_code = status
        self.headers = header_map(raw_headers)
        """Lower-cased names; see the module docstring."""
        encoding = self.headers.get("content-encoding", "").strip().lower()
        self.length = _length(status, self.headers) if encoding in _IDENTITY else None
        """The body's length in bytes when its ``content-length`` gives it (and no
        ``content-encoding`` changes it), else None."""
        if not decoded and encoding not in _IDENTITY:
            coded = httpx.Response(status, headers=list(raw_headers), stream=_Raw(chunks))
            chunks = coded.aiter_bytes()
        self._chunks = chunks
        self._close = close
        self._closed = False

    @classmethod
    def of_httpx(cls, response: httpx.Response) -> UpstreamAnswer:
        """``response`` (its body unread) as an answer."""
        return cls(
            response.status_code,
            response.headers.raw,
            response.aiter_bytes(),
            response.aclose,
            decoded=True,
        )

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives, decoded; the answer closed at its end or on a failure."""
        try:
            async for chunk in self._chunks:
                if chunk:
                    yield chunk
        finally:
            await self.aclose()

    async def aread(self) -> bytes:
        """The whole body, decoded; the answer closed."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        """End the answer: its connection is kept for the next request if the body was
        read to its end, else closed."""
        if not self._closed:
            self._closed = True
            await self._close()
