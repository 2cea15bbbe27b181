"""A streamed response to the client that ends the upstream request with it.

On a client disconnect the stream is cancelled at once (not at the next write) and the
upstream response is closed, which closes its connection: the upstream stops generating.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ._disconnect import wait_disconnect
from ._metrics import Metrics
from ._usage import AnswerUsage

__all__ = ["RelayResponse", "upstream_chunks"]


async def upstream_chunks(
    response: httpx.Response,
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


class RelayResponse(StreamingResponse):
    """Streams ``content`` while listening for the client's disconnect."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        upstream: httpx.Response,
        metrics: Metrics,
        status_code: int,
        headers: dict[str, str],
        on_done: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(content, status_code=status_code, headers=headers)
        self._upstream = upstream
        self._metrics = metrics
        self._on_done = on_done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False
        # uvicorn's receive() reports a disconnect as soon as the response is complete:
        # only a disconnect before the last byte was sent is a cancellation.
        finished = False
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    nonlocal finished
                    await self.stream_response(send)
                    finished = True
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await wait_disconnect(receive)
                gone = not finished
                group.cancel_scope.cancel()
        except OSError:
            gone = not finished
        finally:
            with anyio.CancelScope(shield=True):
                await self._upstream.aclose()
                if gone:
                    self._metrics.upstream_errors["cancelled"] += 1
                if self._on_done is not None:
                    await self._on_done()
