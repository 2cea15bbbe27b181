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

__all__ = [
    "SSEEvents",
    "add_context_management",
    "compaction_events",
    "encode_event",
    "error_event",
    "event_name",
]


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


def _data(event: bytes) -> Any:
    lines = event.rstrip(b"\n").split(b"\n")
    data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return None


def encode_event(name: str, payload: dict[str, Any]) -> bytes:
    """One event in the form Anthropic sends."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {text}\n\n".encode()


def _with_field(event: bytes, field: dict[str, Any], iteration: dict[str, Any] | None) -> bytes:
    payload = _data(event)
    if not isinstance(payload, dict) or "context_management" in payload:
        return event
    payload["context_management"] = field
    if iteration is not None and isinstance(payload.get("usage"), dict):
        usage = payload["usage"]
        usage["iterations"] = [iteration, {"type": "message", **usage}]
    return encode_event("message_delta", payload)


def _shifted(event: bytes, name: str) -> bytes:
    payload = _data(event)
    if not isinstance(payload, dict) or not isinstance(payload.get("index"), int):
        return event
    payload["index"] += 1
    return encode_event(name, payload)


def compaction_events(block: dict[str, Any]) -> list[bytes]:
    """A compaction block as Anthropic streams it: a null start, one delta, a stop."""
    delta = {
        "type": "compaction_delta",
        "content": block["content"],
        "encrypted_content": block.get("encrypted_content"),
    }
    empty = {"type": "compaction", "content": None, "encrypted_content": None}
    return [
        encode_event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": empty},
        ),
        encode_event(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        ),
        encode_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]


def error_event(kind: str, message: str) -> bytes:
    """An Anthropic in-stream ``error`` event."""
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


async def add_context_management(
    chunks: AsyncIterator[bytes],
    field: dict[str, Any],
    compaction: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> AsyncIterator[bytes]:
    """The stream of events from ``chunks``, the final ``message_delta`` carrying ``field``.

    With ``compaction`` (the block and its ``usage.iterations`` entry) the block is
    streamed first, right after ``message_start``, the upstream's blocks move up one
    index, and the final ``message_delta``'s usage gains ``iterations``.
    """
    block, iteration = compaction if compaction is not None else (None, None)
    events = SSEEvents()
    held: bytes | None = None
    async for chunk in chunks:
        for event in events.feed(chunk):
            name = event_name(event)
            if held is not None and name != "ping":
                yield _with_field(held, field, iteration) if name == "message_stop" else held
                held = None
            if name == "message_delta":
                held = event
            elif block is not None and name.startswith("content_block_"):
                yield _shifted(event, name)
            else:
                yield event
                if block is not None and name == "message_start":
                    for extra in compaction_events(block):
                        yield extra
    if held is not None:
        yield _with_field(held, field, iteration)
    rest = events.rest()
    if rest:
        yield rest
