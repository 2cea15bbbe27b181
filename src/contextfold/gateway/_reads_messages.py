"""The read-back tool answered by the gateway on ``/v1/messages``, streamed or not.

The rules are :mod:`._reads`'. A streamed answer stays one valid Anthropic stream:
``message_start`` of the first round, then the content blocks of every round numbered
from 0 without a gap, then one ``message_delta`` (the last round's, with the usage of
every round summed) and ``message_stop``. Text and thinking are relayed as they arrive;
from a round's first ``tool_use`` block on, its blocks are held until the round ends,
because only then is it known whether the read-back tool was among them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.responses import Response

from ._answer import UpstreamAnswer
from ._proxy import gateway_of, stream_back, stream_error
from ._reads import ReadContext, Rounds, answered_whole, dumps, summed
from ._reads_whole import anthropic_events, round_chunks
from ._relay import RelayResponse
from ._retrieval import READ_TOOL
from ._sse import SSEEvents, add_context_management, encode_event, error_event, event_name
from ._upstream import relayed_headers

__all__ = ["answered"]

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


_NOT_A_MESSAGE = error_event(
    "api_error", "the upstream's answer to a read-back round is not a message"
)


def _ours(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("name") == READ_TOOL
    )


def _is_call(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


async def _results(ctx: ReadContext, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        text, error = await ctx.answer(call.get("input"))
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": call.get("id"),
            "content": text,
        }
        if error:
            result["is_error"] = True
        out.append(result)
    return out


async def _next_body(ctx: ReadContext, sent: dict[str, Any], content: list[Any]) -> dict[str, Any]:
    """``sent`` with the round's answer (without client calls) and the gateway's results."""
    calls = [b for b in content if _ours(b)]
    assistant = {
        "role": "assistant",
        "content": [b for b in content if not _is_call(b) or _ours(b)],
    }
    results = {"role": "user", "content": await _results(ctx, calls)}
    return {**sent, "messages": [*sent["messages"], assistant, results]}


def _final(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer from every round's: earlier rounds' blocks other than calls, then the
    last round's without the read-back calls; usage summed."""
    final = dict(answers[-1])
    content: list[Any] = []
    for answer in answers[:-1]:
        content.extend(b for b in answer.get("content") or [] if not _is_call(b))
    content.extend(b for b in final.get("content") or [] if not _ours(b))
    final["content"] = content
    if final.get("stop_reason") == "tool_use" and not any(_is_call(b) for b in content):
        final["stop_reason"] = "end_turn"
    usage = final.get("usage")
    if isinstance(usage, dict):
        final["usage"] = {**usage, **summed((a.get("usage") for a in answers), USAGE_FIELDS)}
    return final


def _content(answer: dict[str, Any]) -> list[Any] | None:
    content = answer.get("content")
    return content if isinstance(content, list) else None


_ROUNDS = Rounds(
    calls=_content,
    ours=_ours,
    next_body=lambda ctx, sent, answer: _next_body(ctx, sent, answer["content"]),
    not_one="the upstream's answer is not a message",
)


async def answered(
    ctx: ReadContext,
    body: dict[str, Any],
    opened: UpstreamAnswer,
    field: dict[str, Any] | None = None,
) -> Response:
    """The client's response to ``body``, whose first upstream answer is ``opened``;
    ``field`` is the ``context_management`` the answer reports when the client sent one
    (Claude Code's no-op ``clear_thinking``: ``applied_edits`` empty)."""
    request = ctx.request
    gateway = gateway_of(request)
    if opened.status_code >= 400:
        return stream_back(request, opened, "anthropic")
    if opened.headers.get("content-type", "").startswith("text/event-stream"):
        events = _streamed(ctx, body, opened)
        return RelayResponse(
            add_context_management(events, field) if field is not None else events,
            upstream=opened,
            metrics=gateway.metrics,
            status_code=opened.status_code,
            headers=relayed_headers(opened.headers),
        )

    async def final(answers: list[dict[str, Any]]) -> dict[str, Any]:
        out = _final(answers)
        if field is not None:
            out["context_management"] = field
        return out

    return await answered_whole(ctx, opened, body, _ROUNDS, final)


class _Block:
    """One content block of a streamed round, rebuilt from its events."""

    def __init__(self, start: dict[str, Any]) -> None:
        block = start.get("content_block")
        self.block: dict[str, Any] = dict(block) if isinstance(block, dict) else {}
        self.events: list[tuple[str, dict[str, Any]]] = [("content_block_start", start)]
        self._json = ""

    def add(self, name: str, payload: dict[str, Any]) -> None:
        self.events.append((name, payload))
        delta = payload.get("delta")
        if name != "content_block_delta" or not isinstance(delta, dict):
            if name == "content_block_stop" and self._json:
                try:
                    self.block["input"] = json.loads(self._json)
                except json.JSONDecodeError:
                    self.block["input"] = {}
            return
        kind = delta.get("type")
        if kind == "text_delta":
            self.block["text"] = self.block.get("text", "") + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            self.block["thinking"] = self.block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            self.block["signature"] = delta.get("signature")
        elif kind == "input_json_delta":
            self._json += str(delta.get("partial_json", ""))
        elif kind == "citations_delta":
            self.block.setdefault("citations", []).append(delta.get("citation"))

    def encoded(self, index: int) -> list[bytes]:
        return [encode_event(name, {**payload, "index": index}) for name, payload in self.events]


def _payload(event: bytes) -> dict[str, Any]:
    lines = event.rstrip(b"\n").split(b"\n")
    data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


class _Round:
    """What one streamed round held back, and what it ended with."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.order: list[int] = []
        self.held: list[int] = []
        self.usage: dict[str, Any] = {}
        self.delta: dict[str, Any] | None = None
        self.delta_event = b""
        self.stop_event = b""

    def content(self) -> list[dict[str, Any]]:
        return [self.blocks[i].block for i in self.order]


async def _streamed(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer
) -> AsyncIterator[bytes]:
    """The events the client gets (see the module docstring)."""
    later: list[UpstreamAnswer] = []
    try:
        async for event in _rounds(ctx, body, opened, later):
            yield event
    finally:
        with anyio.CancelScope(shield=True):
            for response in later:
                await response.aclose()


async def _rounds(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer, later: list[UpstreamAnswer]
) -> AsyncIterator[bytes]:
    next_index = 0
    usages: list[dict[str, Any]] = []
    current, sent = opened, body
    for round_ in range(ctx.rounds + 1):
        state = _Round()
        mapped: dict[int, int] = {}
        events = SSEEvents()
        chunks = round_chunks(
            ctx, current, sent, anthropic_events, _NOT_A_MESSAGE, stream_error("anthropic")
        )
        async for chunk in chunks:
            for event in events.feed(chunk):
                name = event_name(event)
                if name in (
                    "message_start",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                ):
                    payload = _payload(event)
                else:
                    payload = {}
                if name == "message_start":
                    message = payload.get("message")
                    usage = message.get("usage") if isinstance(message, dict) else None
                    state.usage = dict(usage) if isinstance(usage, dict) else {}
                    if round_ == 0:
                        yield event
                elif name.startswith("content_block_"):
                    index = payload.get("index")
                    if not isinstance(index, int):
                        yield event
                        continue
                    if name == "content_block_start":
                        block = _Block(payload)
                        state.blocks[index] = block
                        state.order.append(index)
                        if state.held or _is_call(block.block):
                            state.held.append(index)
                            continue
                        mapped[index] = next_index
                        next_index += 1
                    elif index in state.blocks:
                        state.blocks[index].add(name, payload)
                    if index in mapped:
                        same = mapped[index] == index
                        yield (
                            event
                            if same
                            else encode_event(name, {**payload, "index": mapped[index]})
                        )
                elif name == "message_delta":
                    state.delta, state.delta_event = payload, event
                    usage = payload.get("usage")
                    if isinstance(usage, dict):
                        state.usage.update(usage)
                elif name == "message_stop":
                    state.stop_event = event
                else:  # ping, error, and events this gateway does not know
                    yield event
        rest = events.rest()
        if rest:
            yield rest
        if state.delta is None:
            return  # the stream broke off (its error event, if any, was relayed)
        usages.append(state.usage)
        calls = [i for i in state.held if _ours(state.blocks[i].block)]
        if calls and round_ < ctx.rounds:
            for i in state.held:  # text after a call is kept; every call is dropped
                if not _is_call(state.blocks[i].block):
                    for out in state.blocks[i].encoded(next_index):
                        yield out
                    next_index += 1
            sent = await _next_body(ctx, sent, state.content())
            again = await ctx.open(dumps(sent))
            if isinstance(again, Response) or again.status_code >= 400:
                if isinstance(again, UpstreamAnswer):
                    later.append(again)
                yield error_event("api_error", "the upstream failed on a read-back round")
                return
            later.append(again)
            current = again
            continue
        stripped = False
        for i in state.held:
            if _ours(state.blocks[i].block):
                stripped = True
                continue
            for out in state.blocks[i].encoded(next_index):
                yield out
            next_index += 1
        if round_ == 0 and not stripped:
            yield state.delta_event
        else:
            delta = dict(state.delta)
            inner = dict(delta.get("delta") or {})
            kept_call = any(
                _is_call(state.blocks[i].block) and not _ours(state.blocks[i].block)
                for i in state.held
            )
            if inner.get("stop_reason") == "tool_use" and not kept_call:
                inner["stop_reason"] = "end_turn"
            delta["delta"] = inner
            usage = delta.get("usage")
            delta["usage"] = {
                **(usage if isinstance(usage, dict) else {}),
                **summed(usages, USAGE_FIELDS),
            }
            yield encode_event("message_delta", delta)
        yield state.stop_event or encode_event("message_stop", {"type": "message_stop"})
        return
