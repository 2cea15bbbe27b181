"""``POST /v1/chat/completions`` in transparent mode: tool results cut and offloaded, and
the read-back tool answered by the gateway, streamed or not (rules in :mod:`._reads`).

A streamed answer stays one Chat Completions stream: every chunk carries the first
round's ``id``; text is relayed as it arrives (a later round's text starts with a blank
line); tool-call chunks are held until the round's ``finish_reason``, then the client's
calls are relayed with their indexes from 0; one finish chunk, one usage chunk (the
sum over every round, when the client asked for usage) and ``[DONE]`` end it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from ._answer import UpstreamAnswer
from ._openai_decide import transparently
from ._proxy import client_json, relay
from ._reads import ReadContext, Rounds, answered_whole, dumps, summed
from ._reads_whole import chat_chunks, round_chunks
from ._retrieval import READ_TOOL
from ._sse import SSEEvents
from ._transparent_route import CHAT_ROUTE, mode_of

__all__ = ["chat_completions"]

_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens")
_DETAILS = {
    "prompt_tokens_details": ("cached_tokens", "audio_tokens"),
    "completion_tokens_details": ("reasoning_tokens", "audio_tokens"),
}


def _usage(usages: list[Any]) -> dict[str, Any] | None:
    """The usage of every round, summed (``None`` when no round reported one)."""
    found = [u for u in usages if isinstance(u, dict)]
    if not found:
        return None
    out: dict[str, Any] = {**found[-1], **summed(found, _USAGE)}
    for name, fields in _DETAILS.items():
        nested: list[dict[str, Any]] = [u[name] for u in found if isinstance(u.get(name), dict)]
        if nested:
            out[name] = {**nested[-1], **summed(nested, fields)}
    return out


def _ours(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and function.get("name") == READ_TOOL


async def chat_completions(request: Request) -> Response:
    """Relayed unchanged, or (transparent mode on this route) as transparent mode says."""
    transparent = mode_of(request, CHAT_ROUTE)
    if transparent is None:
        return await relay(request, "openai")
    read = await client_json(request, "openai")
    if isinstance(read, Response):
        return read
    raw, data = read
    return await transparently(
        request,
        raw,
        data,
        transparent,
        "messages",
        lambda: relay(request, "openai", raw),
        _streamed,
        _answered,
    )


async def _next_body(
    ctx: ReadContext, sent: dict[str, Any], text: str | None, calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """``sent`` with the round's text and read-back calls, and their results."""
    ours = [c for c in calls if _ours(c)]
    added: list[dict[str, Any]] = [{"role": "assistant", "content": text, "tool_calls": ours}]
    for call in ours:
        raw = call["function"].get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw else {}
        except json.JSONDecodeError:
            arguments = None
        result, _error = await ctx.answer(arguments)
        added.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
    return {**sent, "messages": [*sent["messages"], *added]}


def _joined(texts: list[str]) -> str | None:
    kept = [t for t in texts if t]
    return "\n\n".join(kept) if kept else None


def _message(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The completion's first choice's message (None if it has none)."""
    try:
        message = answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def _calls(answer: dict[str, Any]) -> list[Any] | None:
    message = _message(answer)
    if message is None:
        return None
    calls = message.get("tool_calls") or []
    return calls if isinstance(calls, list) else []


def _next(ctx: ReadContext, sent: dict[str, Any], answer: dict[str, Any]) -> Any:
    message = _message(answer) or {}
    return _next_body(ctx, sent, message.get("content"), _calls(answer) or [])


_ROUNDS = Rounds(
    calls=_calls,
    ours=_ours,
    next_body=_next,
    not_one="the upstream's answer is not a completion",
)


async def _final(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The last round's completion, its message given every round's text and only the
    client's tool calls, its usage summed (copied where changed: the answers stay)."""
    last = answers[-1]
    choice = dict(last["choices"][0])
    message = choice["message"] = dict(choice["message"])
    final = {**last, "choices": [choice, *last["choices"][1:]]}
    texts = [a["choices"][0]["message"].get("content") or "" for a in answers]
    message["content"] = _joined(texts)
    kept = [c for c in message.get("tool_calls") or [] if not _ours(c)]
    if kept:
        message["tool_calls"] = kept
    else:
        message.pop("tool_calls", None)
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    usage = _usage([a.get("usage") for a in answers])
    if usage is not None:
        final["usage"] = usage
    return final


async def _answered(ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer) -> Response:
    return await answered_whole(ctx, opened, body, _ROUNDS, _final)


def _chunk(data: dict[str, Any]) -> bytes:
    return b"data: " + dumps(data) + b"\n\n"


_NOT_A_COMPLETION = _chunk(
    {"error": {"message": "the upstream's answer to a read-back round is not a completion"}}
)


def _data(event: bytes) -> str:
    lines = event.rstrip(b"\n").split(b"\n")
    raw = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    return raw.decode("utf-8", "replace")


async def _streamed(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer
) -> AsyncIterator[bytes]:
    later: list[UpstreamAnswer] = []
    try:
        async for chunk in _rounds(ctx, body, opened, later):
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            for response in later:
                await response.aclose()


async def _rounds(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer, later: list[UpstreamAnswer]
) -> AsyncIterator[bytes]:
    first_id: Any = None
    wrote_text = False
    usages: list[Any] = []
    current, sent = opened, body
    for round_ in range(ctx.rounds + 1):
        events = SSEEvents()
        held: list[dict[str, Any]] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: dict[str, Any] | None = None
        usage_chunk: dict[str, Any] | None = None
        text: list[str] = []
        started_text = False
        async for chunk in round_chunks(ctx, current, sent, chat_chunks, _NOT_A_COMPLETION):
            for event in events.feed(chunk):
                raw = _data(event)
                if raw == "[DONE]" or not raw:
                    continue
                try:
                    payload = json.loads(raw)
                except json.JSONDecodeError:
                    yield event
                    continue
                if not isinstance(payload, dict):
                    yield event
                    continue
                if first_id is None:
                    first_id = payload.get("id")
                payload["id"] = first_id
                if "error" in payload and "choices" not in payload:
                    yield _chunk(payload)
                    return
                choices = payload.get("choices")
                if not choices:
                    if isinstance(payload.get("usage"), dict):
                        usage_chunk = payload
                    continue
                choice = choices[0]
                delta = dict(choice.get("delta") or {})
                for call in delta.pop("tool_calls", None) or []:
                    index = call.get("index", 0)
                    found = calls.setdefault(
                        index, {"id": None, "function": {"name": "", "arguments": ""}}
                    )
                    if call.get("id"):
                        found["id"] = call["id"]
                    function = call.get("function") or {}
                    found["function"]["name"] += function.get("name") or ""
                    found["function"]["arguments"] += function.get("arguments") or ""
                    held.append(call)
                if choice.get("finish_reason") is not None:
                    finish = payload
                    continue
                if round_ > 0:
                    delta.pop("role", None)
                content = delta.get("content")
                if isinstance(content, str) and content:
                    text.append(content)
                    if round_ > 0 and wrote_text and not started_text:
                        delta["content"] = "\n\n" + content
                    started_text = wrote_text = True
                if delta:
                    yield _chunk({**payload, "choices": [{**choice, "delta": delta}]})
        if finish is None:
            return  # the stream broke off
        usages.append((usage_chunk or finish).get("usage"))
        ours = [c for c in calls.values() if _ours(c)]
        if ours and round_ < ctx.rounds:
            listed = [{**c, "type": "function"} for c in calls.values()]
            sent = await _next_body(ctx, sent, "".join(text) or None, listed)
            again = await ctx.open(dumps(sent))
            if isinstance(again, Response) or again.status_code >= 400:
                if isinstance(again, UpstreamAnswer):
                    later.append(again)
                yield _chunk({"error": {"message": "the upstream failed on a read-back round"}})
                return
            later.append(again)
            current = again
            continue
        renumber = {i: n for n, i in enumerate(i for i, c in calls.items() if not _ours(c))}
        template = finish
        for call in held:
            index = call.get("index", 0)
            if index not in renumber:
                continue
            delta = {"tool_calls": [{**call, "index": renumber[index]}]}
            yield _chunk(
                {**template, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            )
        choice = dict(finish["choices"][0])
        if choice.get("finish_reason") == "tool_calls" and not renumber:
            choice["finish_reason"] = "stop"
        usage = _usage(usages)
        closing = {**finish, "choices": [choice]}
        if "usage" in finish and usage is not None:
            closing["usage"] = usage
        yield _chunk(closing)
        if usage_chunk is not None and usage is not None:
            yield _chunk({**usage_chunk, "usage": usage})
        yield b"data: [DONE]\n\n"
        return
