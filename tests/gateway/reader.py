"""A scripted model behind the gateway that reads back offloaded tool results: when the
last tool result it is sent was shortened, it calls the gateway's read-back tool at the
offset the note names; when it gets the read-back, it answers with the line of it that
holds a needle. Anthropic Messages shapes, whole or streamed."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from contextfold.gateway import READ_TOOL

from .servers import Received, ScriptedUpstream, message, sse

NOTE = re.compile(r'call contextfold_read_result with \{"id": "(r[0-9a-f]{16})", "offset": (\d+)\}')
NEEDLE = re.compile(r"NEEDLE-[A-Z0-9-]+[^\n]*")
MORE = re.compile(r"continue with offset (\d+)\]")


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def last_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def decide(body: dict[str, Any], *, also: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The model's answer to ``body`` (see the module docstring). ``also``: client tool
    calls to make beside the read-back call."""
    results = last_results(body)
    reads = [b for b in results if str(b.get("tool_use_id", "")).startswith("toolu_read")]
    if reads:
        text = result_text(reads[-1])
        found = NEEDLE.search(text)
        more = MORE.search(text)
        if found is None and more is not None:  # the next page
            item = re.search(r"\[item (r[0-9a-f]{16})", text)
            assert item is not None
            return _read_call(body, item.group(1), int(more.group(1)), [])
        return message(f"Found: {found.group(0) if found else 'nothing'}")
    for block in reversed(results):
        note = NOTE.search(result_text(block))
        if note:
            return _read_call(body, note.group(1), int(note.group(2)), also or [])
    return message("ok")


def _read_call(body: dict[str, Any], item: str, offset: int, also: list[Any]) -> dict[str, Any]:
    call = {
        "type": "tool_use",
        "id": f"toolu_read_{len(body['messages'])}",
        "name": READ_TOOL,
        "input": {"id": item, "offset": offset},
    }
    content = [{"type": "text", "text": "Reading the rest."}, *also, call]
    return message("", content=content, stop_reason="tool_use")


def events_of(answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``answer`` as Anthropic streams it (the documented event order, with a ping)."""
    start = {**answer, "content": [], "stop_reason": None}
    start["usage"] = {**answer["usage"], "output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for i, block in enumerate(answer["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [{"type": "text_delta", "text": p} for p in (text[:4], text[4:]) if p]
        elif block["type"] == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            thought = block["thinking"]
            deltas = [
                *({"type": "thinking_delta", "thinking": p} for p in (thought[:3], thought[3:])),
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            first = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (raw[:5], raw[5:])]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            )
        )
        for delta in deltas:
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": answer["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def answer_of(answer: dict[str, Any], streamed: bool) -> Response:
    """``answer`` whole, or streamed as Anthropic streams it."""
    if streamed:
        return StreamingResponse(iter([sse(events_of(answer))]), media_type="text/event-stream")
    return JSONResponse(answer)


def then_answer(upstream: ScriptedUpstream, answer: dict[str, Any]) -> None:
    """``answer``, streamed when the request asks to be."""
    upstream.then(lambda _r, got: answer_of(answer, bool(got.json().get("stream"))))


def then_reader(upstream: ScriptedUpstream, times: int, **kw: Any) -> None:
    """``times`` answers by :func:`decide`, streamed when the request asks to be."""

    def answer(_request: Request, got: Received) -> Response:
        body = got.json()
        decided = decide(body, **kw)
        if body.get("stream"):
            return StreamingResponse(
                iter([sse(events_of(decided))]), media_type="text/event-stream"
            )
        return JSONResponse(decided)

    for _ in range(times):
        upstream.then(answer)
