"""The reader model of :mod:`.reader` in OpenAI's shapes: Chat Completions and Responses,
whole or streamed. It calls the read-back tool at the offset a shortened tool output
names, pages on, and answers with the line that holds the needle."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from contextfold.gateway import READ_TOOL

from .reader import MORE, NEEDLE, NOTE
from .servers import Received, ScriptedUpstream

MODEL = "gpt-test"


def _decision(outputs: list[tuple[str, str]]) -> tuple[str, dict[str, Any] | None]:
    """From the last tool outputs (call id, text): the text to say and the call to make."""
    reads = [text for call, text in outputs if call.startswith("call_read")]
    if reads:
        found = NEEDLE.search(reads[-1])
        more = MORE.search(reads[-1])
        if found is None and more is not None:
            item = reads[-1].split(",", 1)[0].removeprefix("[item ")
            return "Reading on.", {"id": item, "offset": int(more.group(1))}
        return f"Found: {found.group(0) if found else 'nothing'}", None
    for _call, text in reversed(outputs):
        note = NOTE.search(text)
        if note:
            return "Reading the rest.", {"id": note.group(1), "offset": int(note.group(2))}
    return "ok", None


# -- Chat Completions ---------------------------------------------------------------------


def chat_completion(
    text: str, calls: list[dict[str, Any]], n: int, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": usage
        or {
            "prompt_tokens": 50,
            "completion_tokens": 5,
            "total_tokens": 55,
            "prompt_tokens_details": {"cached_tokens": 40},
        },
    }


def decide_chat(body: dict[str, Any], also: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    messages = body["messages"]
    tail: list[tuple[str, str]] = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        tail.insert(0, (str(m.get("tool_call_id")), str(m.get("content"))))
    text, read = _decision(tail)
    calls = list(also or []) if read is not None else []
    if read is not None:
        calls.append(
            {
                "id": f"call_read_{len(messages)}",
                "type": "function",
                "function": {"name": READ_TOOL, "arguments": json.dumps(read)},
            }
        )
    return chat_completion(text, calls, len(messages))


def chat_chunks(completion: dict[str, Any], include_usage: bool) -> bytes:
    """``completion`` as Chat Completions streams it."""
    base = {k: completion[k] for k in ("id", "created", "model")} | {
        "object": "chat.completion.chunk"
    }
    message = completion["choices"][0]["message"]
    chunks: list[Any] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    text = message.get("content") or ""
    for piece in (text[:5], text[5:]):
        if piece:
            chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}}]})
    for i, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        first = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        for delta in (first, {"index": i, "function": {"arguments": arguments}}):
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    finish = completion["choices"][0]["finish_reason"]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return out + b"data: [DONE]\n\n"


def chat_answer(completion: dict[str, Any], body: dict[str, Any]) -> Response:
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            iter([chat_chunks(completion, usage)]), media_type="text/event-stream"
        )
    return JSONResponse(completion)


def then_chat_reader(upstream: ScriptedUpstream, times: int, **kw: Any) -> None:
    def answer(_request: Request, got: Received) -> Response:
        body = got.json()
        return chat_answer(decide_chat(body, **kw), body)

    for _ in range(times):
        upstream.then(answer)


# -- Responses --------------------------------------------------------------------------


def response(n: int, text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    output: list[dict[str, Any]] = [
        {
            "type": "message",
            "id": f"msg_{n}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        },
        *calls,
    ]
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1_760_000_000,
        "status": "completed",
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 30},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 43,
        },
    }


def decide_responses(
    body: dict[str, Any], also: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    items = body["input"]
    tail: list[tuple[str, str]] = []
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            break
        tail.insert(0, (str(item.get("call_id")), str(item.get("output"))))
    text, read = _decision(tail)
    n = len(items)
    calls = list(also or []) if read is not None else []
    if read is not None:
        calls.append(
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_read_{n}",
                "name": READ_TOOL,
                "arguments": json.dumps(read),
                "status": "completed",
            }
        )
    return response(n, text, calls)


def response_events(done: dict[str, Any]) -> bytes:
    """``done`` as the Responses API streams it (numbered from 0)."""
    start = {**done, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for i, item in enumerate(done["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            text = part["text"]
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item": {**item, "status": "in_progress", "content": []},
                },
                {
                    "type": "response.content_part.added",
                    "item_id": item["id"],
                    "output_index": i,
                    "content_index": 0,
                    "part": {**part, "text": ""},
                },
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": i,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                },
                {
                    "type": "response.output_text.done",
                    "item_id": item["id"],
                    "output_index": i,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                },
                {
                    "type": "response.content_part.done",
                    "item_id": item["id"],
                    "output_index": i,
                    "content_index": 0,
                    "part": part,
                },
            ]
        else:
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                },
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": i,
                    "delta": item["arguments"],
                },
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": i,
                    "arguments": item["arguments"],
                },
            ]
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": done})
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n".encode()
        for n, e in enumerate(events)
    )


def then_responses_reader(upstream: ScriptedUpstream, times: int, **kw: Any) -> None:
    def answer(_request: Request, got: Received) -> Response:
        body = got.json()
        done = decide_responses(body, **kw)
        if body.get("stream"):
            return StreamingResponse(iter([response_events(done)]), media_type="text/event-stream")
        return JSONResponse(done)

    for _ in range(times):
        upstream.then(answer)
