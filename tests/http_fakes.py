"""Transport-level pieces shared by the fake provider servers (``httpx2.MockTransport``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2


class BrokenStream(httpx2.AsyncByteStream):
    """A body that sends some bytes, then loses the connection."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        raise httpx2.ReadError("connection reset by peer")


def sse_response(events: list[bytes]) -> httpx2.Response:
    """A 200 carrying ``events`` as Server-Sent Events."""
    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=b"".join(events)
    )


def cut_sse_response(events: list[bytes]) -> httpx2.Response:
    """A 200 stream that loses the connection after the first half of ``events``."""
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=BrokenStream(events[: len(events) // 2]),
    )


def garbled_response(*, stream: bool) -> httpx2.Response:
    """A 200 whose body a proxy mangled: half a JSON object, or an SSE event of bad JSON."""
    if stream:
        content_type, garbage = "text/event-stream", b"data: {oops\n\n"
    else:
        content_type, garbage = "application/json", b'{"id": "x", "choi'
    return httpx2.Response(200, headers={"content-type": content_type}, content=garbage)
