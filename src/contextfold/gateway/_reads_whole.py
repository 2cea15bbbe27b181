"""A read-back round answered whole while the client reads a stream.

The gateway asks every round for a stream when the client did, but an upstream may still
answer a round whole (a compatible server that ignores ``stream`` on some requests, or
a proxy that buffers). The client has its first events already, so the whole answer is
turned into the events the upstream would have streamed, in the route's own grammar
(Anthropic Messages, Chat Completions chunks, Responses events), and the round is read
from them like any other: the client gets the rest of its stream and its terminal events.
An answer that is not the route's shape ends the stream with the route's in-stream error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response

from ._answer import UpstreamAnswer
from ._proxy import gateway_of
from ._reads import ReadContext
from ._relay import upstream_chunks

__all__ = ["anthropic_events", "chat_chunks", "responses_events", "round_chunks"]

Whole = Callable[[dict[str, Any], dict[str, Any]], bytes | None]
"""A whole answer and the request it answers, as the route's stream (``None``: not the
route's shape)."""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {_json(payload)}\n\n".encode()


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {_json(payload)}\n\n".encode()


async def round_chunks(
    ctx: ReadContext,
    response: UpstreamAnswer,
    sent: dict[str, Any],
    whole: Whole,
    failure: bytes,
    on_failure: Callable[[str], bytes] | None = None,
) -> AsyncIterator[bytes]:
    """One round's stream: the upstream's own when it streams, else its whole answer to
    ``sent`` as ``whole`` streams it; ``failure`` when it is neither (or the body could not
    be read: the upstream failed, or the client left)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        metrics = gateway_of(ctx.request).metrics
        async for chunk in upstream_chunks(response, on_failure, usage=metrics):
            yield chunk
        return
    read = await ctx.read(response)
    streamed: bytes | None = None
    if not isinstance(read, Response):
        value = read[1]
        if isinstance(value, dict):
            streamed = whole(value, sent)
    yield failure if streamed is None else streamed


# -- Anthropic Messages -------------------------------------------------------------------


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {k: v for k, v in block.items() if k not in ("text", "citations")}
        start["text"] = ""
        if "citations" in block:
            start["citations"] = []
        deltas.append({"type": "text_delta", "text": str(block.get("text", ""))})
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        deltas.append({"type": "thinking_delta", "thinking": str(block.get("thinking", ""))})
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    elif kind in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        deltas.append({"type": "input_json_delta", "partial_json": _json(block.get("input", {}))})
    else:  # redacted thinking, server tool results: whole in their start event
        start = block
    out = [
        _event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    out += [
        _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    out.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return out


def anthropic_events(message: dict[str, Any], _sent: dict[str, Any]) -> bytes | None:
    """A whole Messages answer as Anthropic streams it: ``message_start`` (its usage),
    each block's start, deltas and stop, ``message_delta`` (stop reason and usage),
    ``message_stop``."""
    content = message.get("content")
    if message.get("type", "message") != "message" or not isinstance(content, list):
        return None
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    out = [_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(content):
        if isinstance(block, dict):
            out += _block_events(index, block)
    delta = {
        "type": "message_delta",
        "delta": {
            "stop_reason": message.get("stop_reason"),
            "stop_sequence": message.get("stop_sequence"),
        },
        "usage": usage,
    }
    out.append(_event("message_delta", delta))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(out)


# -- Chat Completions ---------------------------------------------------------------------


def chat_chunks(completion: dict[str, Any], sent: dict[str, Any]) -> bytes | None:
    """A whole completion as Chat Completions streams it: the role, the text (and any
    reasoning), each tool call, the finish chunk, a usage chunk when ``sent`` asked for
    one (``stream_options.include_usage``). No ``[DONE]``: the round's reader ends the
    client's stream itself."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None
    fields = ("id", "created", "model", "system_fingerprint")
    base: dict[str, Any] = {k: completion[k] for k in fields if k in completion}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: Any = None) -> bytes:
        return _data({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    for key in ("reasoning_content", "content", "refusal"):
        value = message.get(key)
        if isinstance(value, str) and value:
            out.append(chunk({key: value}))
    for i, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        found = call.get("function")
        function: dict[str, Any] = found if isinstance(found, dict) else {}
        delta = {
            "index": i,
            "id": call.get("id"),
            "type": call.get("type", "function"),
            "function": {
                "name": function.get("name", ""),
                "arguments": function.get("arguments", ""),
            },
        }
        out.append(chunk({"tool_calls": [delta]}))
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    options = sent.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        out.append(_data({**base, "choices": [], "usage": completion.get("usage")}))
    return b"".join(out)


# -- Responses ----------------------------------------------------------------------------

_FINAL_OF = {"incomplete": "response.incomplete", "failed": "response.failed"}


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item.get("type")
    item_id = item.get("id")
    if kind == "message" and isinstance(item.get("content"), list):
        events: list[dict[str, Any]] = [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        ]
        for n, part in enumerate(item["content"]):
            if not isinstance(part, dict):
                continue
            where = {"item_id": item_id, "output_index": index, "content_index": n}
            text = part.get("text")
            if part.get("type") == "output_text" and isinstance(text, str):
                events.append(
                    {"type": "response.content_part.added", **where, "part": {**part, "text": ""}}
                )
                events.append(
                    {"type": "response.output_text.delta", **where, "delta": text, "logprobs": []}
                )
                events.append(
                    {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
                )
            else:
                events.append({"type": "response.content_part.added", **where, "part": part})
            events.append({"type": "response.content_part.done", **where, "part": part})
    elif kind == "function_call":
        arguments = str(item.get("arguments", ""))
        where = {"item_id": item_id, "output_index": index}
        events = [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            },
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments},
            {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
        ]
    else:  # reasoning and other items: whole in their added and done events
        events = [{"type": "response.output_item.added", "output_index": index, "item": item}]
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def responses_events(response: dict[str, Any], _sent: dict[str, Any]) -> bytes | None:
    """A whole response as the Responses API streams it: ``created``, ``in_progress``,
    each output item's events, then ``completed`` (``incomplete`` or ``failed`` as its
    status says), numbered from 0 (the round's reader renumbers them)."""
    output = response.get("output")
    if response.get("object", "response") != "response" or not isinstance(output, list):
        return None
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(output):
        if isinstance(item, dict):
            events += _item_events(index, item)
    final = _FINAL_OF.get(str(response.get("status")), "response.completed")
    events.append({"type": final, "response": response})
    return b"".join(_event(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events))
