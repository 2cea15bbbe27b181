"""``POST /v1/responses`` in transparent mode: ``function_call_output`` items cut and
offloaded, and the read-back tool answered by the gateway, streamed or not (rules in
:mod:`._reads`).

The next round's request appends the round's output (reasoning, text and the read-back
calls; the client's calls dropped) and the gateway's ``function_call_output`` items to
``input``; a request chained by ``previous_response_id`` is chained to the round instead.
The client gets one response: the items of every round but function calls, then the
last round's without the read-back calls, usage summed, and the last round's ``id``
(the one whose stored context holds the whole exchange, for ``previous_response_id``).

A streamed answer stays one Responses stream: the first round's ``response.created``
and ``in_progress``, then every round's items with ``output_index`` counted from 0 and
``sequence_number`` from the first without a gap, then one ``response.completed``.
From a round's first ``function_call`` item on, its events are held until the round
ends, since only then is it known whether the read-back tool was called.
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
from ._proxy import gateway_of, open_upstream, stream_back
from ._reads import ReadContext, Rounds, answered_whole, dumps, summed
from ._reads_whole import responses_events, round_chunks
from ._relay import RelayResponse, upstream_chunks
from ._response_chain import Record, recorded, responses_key
from ._retrieval import READ_TOOL
from ._sse import SSEEvents, event_name
from ._transparent import TransparentPolicy
from ._transparent_route import TransparentMode
from ._upstream import relayed_headers

__all__ = ["transparent_responses"]

_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_DETAILS = {
    "input_tokens_details": ("cached_tokens",),
    "output_tokens_details": ("reasoning_tokens",),
}


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call"


def _ours(item: Any) -> bool:
    return _is_call(item) and item.get("name") == READ_TOOL


def _usage(usages: list[Any]) -> dict[str, Any] | None:
    found = [u for u in usages if isinstance(u, dict)]
    if not found:
        return None
    out: dict[str, Any] = {
        **found[-1],
        **summed(found, ("input_tokens", "output_tokens", "total_tokens")),
    }
    for name, fields in _DETAILS.items():
        nested: list[dict[str, Any]] = [u[name] for u in found if isinstance(u.get(name), dict)]
        if nested:
            out[name] = {**nested[-1], **summed(nested, fields)}
    return out


async def transparent_responses(
    request: Request,
    raw: bytes,
    data: dict[str, Any],
    mode: TransparentMode,
    policy: TransparentPolicy,
) -> Response:
    """A Responses request that asks for no compaction, as transparent mode forwards it:
    in the conversation of the response it continues, when it is chained, and with the
    id of the response the client gets mapped to its conversation
    (:mod:`._response_chain`), whatever path it takes."""
    key = await responses_key(mode.chains, request.headers, data)
    record = mode.chains.recorder(key, data, request.headers)

    def back(opened: UpstreamAnswer) -> Response:
        return _back(request, opened, record)

    async def as_sent() -> Response:
        opened = await open_upstream(request, raw, "openai")
        return opened if isinstance(opened, Response) else back(opened)

    return await transparently(
        request,
        raw,
        data,
        (mode, policy),
        "input",
        as_sent,
        _streamed,
        _answered,
        key=key,
        back=back,
        record=record,
    )


def _back(request: Request, opened: UpstreamAnswer, record: Record | None) -> Response:
    """The upstream's answer as it arrives, its response ids recorded on the way."""
    if record is None or opened.status_code >= 400:
        return stream_back(request, opened, "openai")
    streamed = opened.headers.get("content-type", "").startswith("text/event-stream")
    return RelayResponse(
        recorded(
            upstream_chunks(opened, usage=gateway_of(request).metrics),
            streamed=streamed,
            record=record,
        ),
        upstream=opened,
        metrics=gateway_of(request).metrics,
        status_code=opened.status_code,
        headers=relayed_headers(opened.headers),
    )


async def _next_body(
    ctx: ReadContext, sent: dict[str, Any], answer_id: Any, output: list[Any]
) -> dict[str, Any]:
    """The next round's request: ``sent`` continued by the round's ``output`` (without
    the client's calls) and the gateway's results."""
    results: list[dict[str, Any]] = []
    for item in output:
        if not _ours(item):
            continue
        raw = item.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw else {}
        except json.JSONDecodeError:
            arguments = None
        text, _error = await ctx.answer(arguments)
        results.append(
            {"type": "function_call_output", "call_id": item.get("call_id"), "output": text}
        )
    if sent.get("previous_response_id") is not None and isinstance(answer_id, str):
        return {**sent, "previous_response_id": answer_id, "input": results}
    kept = [item for item in output if not _is_call(item) or _ours(item)]
    return {**sent, "input": [*sent["input"], *kept, *results]}


def _merged(final: dict[str, Any], earlier: list[list[Any]], usages: list[Any]) -> dict[str, Any]:
    out = dict(final)
    output: list[Any] = []
    for items in earlier:
        output.extend(item for item in items if not _is_call(item))
    output.extend(item for item in final.get("output") or [] if not _ours(item))
    out["output"] = output
    usage = _usage(usages)
    if usage is not None:
        out["usage"] = usage
    return out


def _output(answer: dict[str, Any]) -> list[Any] | None:
    output = answer.get("output")
    return output if isinstance(output, list) else None


_ROUNDS = Rounds(
    calls=_output,
    ours=_ours,
    next_body=lambda ctx, sent, answer: _next_body(ctx, sent, answer.get("id"), answer["output"]),
    not_one="the upstream's answer is not a response",
)


async def _answered(ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer) -> Response:
    async def final(answers: list[dict[str, Any]]) -> dict[str, Any]:
        merged = _merged(
            answers[-1], [a["output"] for a in answers[:-1]], [a.get("usage") for a in answers]
        )
        if ctx.record is not None and isinstance(merged.get("id"), str):
            await ctx.record(merged["id"])
        return merged

    return await answered_whole(ctx, opened, body, _ROUNDS, final)


def _payload(event: bytes) -> dict[str, Any] | None:
    lines = event.rstrip(b"\n").split(b"\n")
    data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _encode(name: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


_NOT_A_RESPONSE = _encode(
    "error",
    {
        "type": "error",
        "code": "upstream_error",
        "message": "the upstream's answer to a read-back round is not a response",
        "param": None,
        "sequence_number": 0,
    },
)


async def _streamed(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer
) -> AsyncIterator[bytes]:
    later: list[UpstreamAnswer] = []
    try:
        async for event in _rounds(ctx, body, opened, later):
            yield event
    finally:
        with anyio.CancelScope(shield=True):
            for response in later:
                await response.aclose()


class _Emitter:
    """Numbers what the client gets: ``sequence_number`` without a gap across rounds."""

    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, name: str, payload: dict[str, Any], **changes: Any) -> bytes:
        out = {**payload, **changes}
        if "sequence_number" in payload:
            out["sequence_number"] = self.sequence
            self.sequence += 1
        return _encode(name, out)


async def _rounds(
    ctx: ReadContext, body: dict[str, Any], opened: UpstreamAnswer, later: list[UpstreamAnswer]
) -> AsyncIterator[bytes]:
    emit = _Emitter()
    next_index = 0
    earlier: list[list[Any]] = []
    usages: list[Any] = []
    current, sent = opened, body
    for round_ in range(ctx.rounds + 1):
        events = SSEEvents()
        mapped: dict[int, int] = {}
        held: list[tuple[str, dict[str, Any]]] = []
        holding: set[int] = set()
        items: dict[int, Any] = {}
        final: tuple[str, dict[str, Any]] | None = None
        async for chunk in round_chunks(ctx, current, sent, responses_events, _NOT_A_RESPONSE):
            for event in events.feed(chunk):
                payload = _payload(event)
                if payload is None:
                    yield event
                    continue
                name = event_name(event) or str(payload.get("type", ""))
                kind = payload.get("type")
                if kind in _OPENING:
                    if round_ == 0:
                        yield emit(name, payload)
                    continue
                if kind in _FINAL:
                    final = (name, payload)
                    continue
                index = payload.get("output_index")
                if not isinstance(index, int):
                    yield emit(name, payload)
                    if kind == "error":
                        return
                    continue
                if kind == "response.output_item.added":
                    if holding or _is_call(payload.get("item")):
                        holding.add(index)
                    else:
                        mapped[index] = next_index
                        next_index += 1
                if kind == "response.output_item.done":
                    items[index] = payload.get("item")
                if index in holding:
                    held.append((name, payload))
                elif index in mapped:
                    yield emit(name, payload, output_index=mapped[index])
                else:
                    yield emit(name, payload)
        if final is None:
            return  # the stream broke off
        name, payload = final
        found = payload.get("response")
        response: dict[str, Any] = found if isinstance(found, dict) else {}
        output = response.get("output") if isinstance(response.get("output"), list) else None
        if output is None:
            output = [items[i] for i in sorted(items)]
        usages.append(response.get("usage"))
        calls = [item for item in output if _ours(item)]
        if calls and round_ < ctx.rounds and payload.get("type") == "response.completed":
            for index in sorted(holding):
                if _is_call(items.get(index)):
                    continue
                for held_name, held_payload in held:
                    if held_payload.get("output_index") == index:
                        yield emit(held_name, held_payload, output_index=next_index)
                next_index += 1
            earlier.append(output)
            sent = await _next_body(ctx, sent, response.get("id"), output)
            again = await ctx.open(dumps(sent))
            if isinstance(again, Response) or again.status_code >= 400:
                if isinstance(again, UpstreamAnswer):
                    later.append(again)
                yield emit(
                    "error",
                    {
                        "type": "error",
                        "code": "upstream_error",
                        "message": "the upstream failed on a read-back round",
                        "param": None,
                        "sequence_number": 0,
                    },
                )
                return
            later.append(again)
            current = again
            continue
        for index in sorted(holding):
            if _ours(items.get(index)):
                continue
            for held_name, held_payload in held:
                if held_payload.get("output_index") == index:
                    yield emit(held_name, held_payload, output_index=next_index)
            next_index += 1
        merged = _merged(response, earlier, usages)
        if ctx.record is not None and isinstance(merged.get("id"), str):
            await ctx.record(merged["id"])
        yield emit(name, {**payload, "response": merged})
        return
