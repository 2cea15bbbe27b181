"""Server-sent events relayed one by one, with ``applied_edits`` added to the final
``message_delta`` of an Anthropic stream.

Every other event goes out as the upstream sent it, byte for byte and as soon as it is
complete. A ``message_delta`` is held until the next event other than ``ping`` shows
whether it is the last (``message_stop`` or the end of the stream follows).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["SSEEvents", "add_context_management", "error_event", "event_name"]


class SSEEvents:
    """Splits a byte stream into complete events (each with its terminating blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events completed by ``chunk``."""
        self._buffer += chunk.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                return events
            events.append(self._buffer[: end + 2])
            self._buffer = self._buffer[end + 2 :]

    def rest(self) -> bytes:
        """What is left after the last complete event (a stream cut mid-event)."""
        rest, self._buffer = self._buffer, b""
        return rest


def event_name(event: bytes) -> str:
    """The ``event:`` field of one event (empty when it has none)."""
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace")
    return ""


def _with_field(event: bytes, field: dict[str, Any]) -> bytes:
    lines = event.rstrip(b"\n").split(b"\n")
    data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    try:
        payload = json.loads(data)
    except json.JSONDecodeError:
        return event
    if not isinstance(payload, dict) or "context_management" in payload:
        return event
    payload["context_management"] = field
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return b"event: message_delta\ndata: " + text.encode() + b"\n\n"


def error_event(kind: str, message: str) -> bytes:
    """An Anthropic in-stream ``error`` event."""
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


async def add_context_management(
    chunks: AsyncIterator[bytes], field: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The stream of events from ``chunks``, the final ``message_delta`` carrying ``field``."""
    events = SSEEvents()
    held: bytes | None = None
    async for chunk in chunks:
        for event in events.feed(chunk):
            name = event_name(event)
            if held is not None and name != "ping":
                yield _with_field(held, field) if name == "message_stop" else held
                held = None
            if name == "message_delta":
                held = event
            else:
                yield event
    if held is not None:
        yield _with_field(held, field)
    rest = events.rest()
    if rest:
        yield rest
