"""A streamed response to the client that ends the upstream request with it.

On a client disconnect the stream is cancelled at once (not at the next write: the
request's listener, ``_disconnect``, cancels it) and the upstream response is closed,
which closes its connection: the upstream stops generating.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ._answer import UpstreamAnswer
from ._disconnect import ClientGone, guarded, stop_watching
from ._metrics import Metrics
from ._usage import AnswerUsage

__all__ = ["RelayResponse", "upstream_chunks"]


async def upstream_chunks(
    response: UpstreamAnswer,
    on_failure: Callable[[str], bytes] | None = None,
    *,
    usage: Metrics | None = None,
) -> AsyncIterator[bytes]:
    """The upstream body as it arrives, decoded. A timeout or broken connection mid-body
    ends the stream, after the bytes ``on_failure(kind)`` gives (an in-stream error event).
    With ``usage``, a successful answer's reported usage is added to it at its end."""
    tally = None
    if usage is not None and response.is_success:
        tally = AnswerUsage(response.headers.get("content-type", ""))
    try:
        async for chunk in response.aiter_bytes():
            if tally is not None:
                tally.feed(chunk)
            yield chunk
        if tally is not None and usage is not None:
            usage.usage(tally.tokens())
    except httpx.TimeoutException:
        if on_failure is not None:
            yield on_failure("timeout")
    except httpx.TransportError:
        if on_failure is not None:
            yield on_failure("connect")


class _CutShort(Exception):
    """The upstream's answer ended before the length the client was told: the client's
    connection is closed (its HTTP client reports an incomplete body)."""


class RelayResponse(StreamingResponse):
    """Streams ``content`` while listening for the client's disconnect. With ``length``
    (the upstream's own ``content-length``, the body relayed as received), the client
    gets that length rather than chunks: its answer ends with its last byte, and the
    relay writes to the client once fewer (two writes to the client instead of three
    for a small answer; the client's HTTP library parses one frame less)."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        upstream: UpstreamAnswer,
        metrics: Metrics,
        status_code: int,
        headers: dict[str, str],
        on_done: Callable[[], Awaitable[None]] | None = None,
        length: int | None = None,
    ) -> None:
        if length is not None:
            headers = {**headers, "content-length": str(length)}
        super().__init__(content, status_code=status_code, headers=headers)
        self._upstream = upstream
        self._metrics = metrics
        self._on_done = on_done
        self._length = length

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        sent = 0
        async for chunk in self.body_iterator:
            assert isinstance(chunk, bytes)
            sent += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self._length is not None and sent != self._length:
            raise _CutShort(f"the upstream sent {sent} of {self._length} bytes")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False
        try:
            await guarded(scope, receive, self.stream_response(send))
        except ClientGone:
            gone = True
        except OSError:  # the client's connection failed under a write
            gone = True
        finally:
            stop_watching(scope)
            with anyio.CancelScope(shield=True):
                await self._upstream.aclose()
                if gone:
                    self._metrics.upstream_errors["cancelled"] += 1
                if self._on_done is not None:
                    await self._on_done()
