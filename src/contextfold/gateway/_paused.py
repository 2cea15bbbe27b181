"""The answer to a request whose compaction pauses (``pause_after_compaction``): only the
compaction block, ``stop_reason: "compaction"``; nothing is sent upstream."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from ._compaction import CompactionDone
from ._sse import compaction_events, encode_event

__all__ = ["paused_answer"]


def _message(model: Any, done: CompactionDone, field: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(done.block, sort_keys=True).encode()).hexdigest()
    return {
        "id": f"msg_compaction_{digest[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [done.block],
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "iterations": [done.iteration],
        },
        "context_management": field,
    }


async def _events(message: dict[str, Any]) -> AsyncIterator[bytes]:
    start = {**message, "content": [], "stop_reason": None}
    del start["context_management"]
    yield encode_event("message_start", {"type": "message_start", "message": start})
    for event in compaction_events(message["content"][0]):
        yield event
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "compaction", "stop_sequence": None},
        "usage": message["usage"],
        "context_management": message["context_management"],
    }
    yield encode_event("message_delta", delta)
    yield encode_event("message_stop", {"type": "message_stop"})


def paused_answer(body: dict[str, Any], done: CompactionDone, field: dict[str, Any]) -> Response:
    """The paused answer, streamed when the request asked for a stream."""
    message = _message(body.get("model"), done, field)
    if body.get("stream") is True:
        return StreamingResponse(_events(message), media_type="text/event-stream")
    return JSONResponse(message)
