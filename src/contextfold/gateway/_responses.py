"""``POST /v1/responses`` and ``/v1/responses/compact`` with OpenAI's compaction emulated
for any OpenAI-compatible upstream.

``context_management: [{"type": "compaction", "compact_threshold": N}]``: when the
input passes N tokens (o200k_base), the gateway summarizes it, sends the compacted input
upstream instead, and the answer starts with exactly one ``compaction`` item. A final
``compaction_trigger`` input item gets an answer holding that item alone, with no model
call; so does ``/v1/responses/compact``, whose window is the kept messages followed by
the item. Compaction items the client sends back are verified and replaced by their
summary before the upstream sees them (:mod:`._responses_items`). The field is removed
before forwarding, as strict upstreams reject it; a request that carries neither it nor
compaction items is relayed byte for byte. With pass-through configured (by default for
``api.openai.com``) both routes are relayed unchanged.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .._logging import logger
from ..context import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    ModelSummarizer,
    Summarizer,
    SummaryRequest,
    SummarySchema,
    render_summary,
    safe_format,
)
from ..message import Msg, ToolSpec, Usage
from ..token import OpenAITokenCounter, TokenCounter
from ._body import BodyError, read_json
from ._config import GatewayConfig
from ._disconnect import ClientGone, race_disconnect
from ._errors import error_response, not_transformed
from ._proxy import (
    CLIENT_GONE,
    Gateway,
    client_body,
    client_json,
    gateway_of,
    open_upstream,
    relay,
    stream_back,
)
from ._reads_responses import transparent_responses
from ._relay import RelayResponse, upstream_chunks
from ._responses_items import (
    Expanded,
    ResponsesError,
    compaction_threshold,
    expand,
    input_items,
    is_kept,
    messages_of,
    recent,
    summary_message,
    tail_digest,
    without_trigger,
)
from ._responses_model import ResponsesRequestModel
from ._responses_sse import compaction_stream, with_compaction_item
from ._seal import SealKey
from ._transparent_route import RESPONSES_ROUTE, mode_of
from ._upstream import UpstreamFailure, relayed_headers

__all__ = ["OPENAI_FIRST_PARTY_HOSTS", "compact_responses", "passes_responses", "responses"]

OPENAI_FIRST_PARTY_HOSTS = frozenset({"api.openai.com"})
"""Hosts that run OpenAI's own compaction: passed through by default."""


@dataclass(frozen=True)
class _State:
    key: SealKey
    counter: TokenCounter


class _NoKey(Exception):
    """The sealing key could not be read or created (a server fault, not the client's)."""


def _state(request: Request) -> _State:
    """The app's sealing key and counter, loaded on first use (so an app that never
    serves Responses compaction never creates a key file)."""
    found: _State | None = getattr(request.app.state, "responses_compaction", None)
    if found is None:
        try:
            key = SealKey.load()
        except (OSError, ValueError) as exc:
            logger.error("gateway: the compaction key is unavailable (%s)", exc)
            raise _NoKey from None
        found = _State(key, OpenAITokenCounter("o200k_base"))
        request.app.state.responses_compaction = found
    return found


def _no_key() -> Response:
    return error_response("openai", 500, "the gateway's compaction key is unavailable")


def passes_responses(config: GatewayConfig) -> bool:
    """Whether the Responses routes go upstream as sent."""
    if config.pass_through_context_management is not None:
        return config.pass_through_context_management
    return urlsplit(config.upstream).hostname in OPENAI_FIRST_PARTY_HOSTS


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _refused(exc: ResponsesError) -> Response:
    error = {
        "message": exc.message,
        "type": "invalid_request_error",
        "param": exc.param,
        "code": exc.code,
    }
    return JSONResponse({"error": error}, status_code=400)


def _count(counter: TokenCounter, items: list[Any], body: dict[str, Any]) -> int:
    """Input tokens of ``items`` with the request's instructions and tools."""
    messages = messages_of(items)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.insert(0, Msg("system", instructions, "system"))
    tools: list[ToolSpec] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("parameters"), dict):
            tools.append(
                ToolSpec(
                    name=str(tool.get("name", "")),
                    description=str(tool.get("description") or ""),
                    parameters=tool["parameters"],
                )
            )
        else:
            tools.append(ToolSpec(name="", description=json.dumps(tool, ensure_ascii=False)))
    return counter.count_request(messages, tools)


async def _summarize(
    items: list[Any], summarizer: Summarizer, spent: Callable[[], Usage] | None
) -> tuple[str, Usage | None]:
    """The summary of ``items``, and what it cost (``spent`` when the result does not say)."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    request = SummaryRequest(
        messages=messages_of(items),
        previous=None,
        instructions=safe_format(DEFAULT_COMPRESSION_PROMPT, {"current_time": now}),
        hints=(),
        schema=SummarySchema.model_json_schema(),
    )
    result = await summarizer.summarize(request)
    usage = result.usage if result.usage is not None else spent() if spent else None
    return render_summary(DEFAULT_SUMMARY_TEMPLATE, result.fields), usage


def _summarizer(
    request: Request, gateway: Gateway, model: Any
) -> tuple[Summarizer, Callable[[], Usage] | None]:
    """The app's summarizer, or (``--summarizer model``) a model summarizer on the
    request's own model through the upstream's Responses API, with what its calls cost."""
    if gateway.config.summarize_with != "model":
        return gateway.summarizer, None
    chat = ResponsesRequestModel(
        gateway.upstream,
        str(model),
        headers=request.headers.items(),
        counter=_state(request).counter,
    )
    return ModelSummarizer(chat, request="transcript"), lambda: chat.spent


def _item(key: SealKey, summary: str, tail: list[Any] | None = None) -> dict[str, Any]:
    """The compaction item of ``summary`` and of the ``tail`` items it kept after the
    summary (the same summary and tail give the same item)."""
    payload: dict[str, Any] = {"v": 1, "summary": summary}
    if tail:
        payload |= {"tail": len(tail), "tail_sha": tail_digest(tail)}
    token = key.seal(payload)
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {"type": "compaction", "id": f"cmp_{digest[:32]}", "encrypted_content": token}


def _usage(usage: Usage | None) -> dict[str, Any]:
    """OpenAI's usage object for a compaction (zeros when no model wrote the summary)."""
    inp = usage.input_tokens if usage else 0
    out = usage.output_tokens if usage else 0
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens if usage else 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


async def _compaction(
    request: Request, gateway: Gateway, items: list[Any], model: Any
) -> tuple[str, Usage | None] | Response:
    """The summary of ``items``, or the response to give: the client left, or the
    summarizer failed (a 502: a compaction was asked for and none can be given)."""
    try:
        summarizer, spent = _summarizer(request, gateway, model)
        return await race_disconnect(request, lambda: _summarize(items, summarizer, spent))
    except ClientGone:
        gateway.metrics.upstream_errors["cancelled"] += 1
        return Response(status_code=CLIENT_GONE)
    except Exception as exc:
        logger.warning("gateway: responses compaction failed (%s)", type(exc).__name__)
        return error_response("openai", 502, "the compaction summary could not be written")


def _answer(body: dict[str, Any], item: dict[str, Any], usage: Usage | None) -> dict[str, Any]:
    """A completed response whose only output is ``item`` (a ``compaction_trigger``)."""
    return {
        "id": "resp_" + item["id"].removeprefix("cmp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "model": body.get("model"),
        "output": [item],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "usage": _usage(usage),
    }


async def _triggered(
    request: Request, gateway: Gateway, body: dict[str, Any], expanded: Expanded
) -> Response:
    current = expanded.items()
    if not current:
        return _refused(
            ResponsesError("input: nothing to compact before compaction_trigger", "input")
        )
    written = await _compaction(request, gateway, current, body.get("model"))
    if isinstance(written, Response):
        return written
    summary, usage = written
    gateway.metrics.compactions += 1
    answer = _answer(body, _item(_state(request).key, summary), usage)
    if body.get("stream") is True:
        return StreamingResponse(compaction_stream(answer), media_type="text/event-stream")
    return JSONResponse(answer)


async def responses(request: Request) -> Response:
    """Create a response, with OpenAI's compaction emulated here."""
    gateway = gateway_of(request)
    transparent = mode_of(request, RESPONSES_ROUTE)
    if passes_responses(gateway.config) and transparent is None:
        return await relay(request, "openai")
    raw = await client_body(request, "openai")
    if isinstance(raw, Response):
        return raw
    if b'"compaction' not in raw and b"context_management" not in raw:
        if transparent is not None:  # asks for nothing: transparent mode's to manage
            try:
                data = read_json(raw)
            except BodyError as exc:
                return error_response("openai", exc.status, exc.message)
            return await transparent_responses(request, raw, data, *transparent)
        return await relay(request, "openai", raw)  # nothing to emulate: the bytes as sent
    if passes_responses(gateway.config):
        return await relay(request, "openai", raw)
    try:
        data = read_json(raw)
        state = _state(request)
        threshold = compaction_threshold(data.get("context_management"))
        items, triggered = without_trigger(input_items(data.get("input")))
        expanded = expand(items, state.key)
    except BodyError as exc:
        return error_response("openai", exc.status, exc.message)
    except ResponsesError as exc:
        return _refused(exc)
    except _NoKey:
        return _no_key()
    if triggered:
        return await _triggered(request, gateway, data, expanded)
    if threshold is None and not expanded.had_items:
        return await relay(request, "openai", raw)
    body = {k: v for k, v in data.items() if k != "context_management"}
    if expanded.had_items:
        body["input"] = expanded.items()
    item: dict[str, Any] | None = None
    if threshold is not None:
        compacted = await _compacted(request, gateway, state, body, expanded, threshold)
        if isinstance(compacted, Response):
            return compacted
        if compacted is not None:
            body["input"], item = compacted
    return await _forward(request, gateway, body, item)


async def _compacted(
    request: Request,
    gateway: Gateway,
    state: _State,
    body: dict[str, Any],
    expanded: Expanded,
    threshold: int,
) -> tuple[list[Any], dict[str, Any]] | Response | None:
    """The compacted input and its item when the input passes ``threshold``; ``None`` to
    send the input as it is: under the threshold, a compaction that would not shrink it
    (the kept messages alone pass the threshold), or one that failed (fail open, counted)."""
    current = expanded.items()
    try:
        before = _count(state.counter, current, body)
    except Exception as exc:  # an item the counter cannot read: sent as it is, counted
        logger.warning("gateway: responses input not counted (%s)", type(exc).__name__)
        gateway.metrics.untransformed += 1
        if gateway.config.fail_closed:
            return error_response("openai", 500, not_transformed(exc))
        return None
    if before <= threshold:
        return None
    written = await _compaction(request, gateway, current, body.get("model"))
    if isinstance(written, Response):
        if written.status_code == CLIENT_GONE:
            return written
        gateway.metrics.untransformed += 1
        if gateway.config.fail_closed:
            return error_response("openai", 500, "the compaction summary could not be written")
        return None
    summary = written[0]
    # The tool loop in progress: its newest calls within a quarter of the threshold.
    tail = recent(expanded.tail(), threshold // 4, lambda i: _count(state.counter, [i], {}))
    compacted = [*expanded.window(), summary_message(summary), *tail]
    after = _count(state.counter, compacted, body)
    if after >= before:
        return None
    gateway.metrics.compactions += 1
    gateway.metrics.tokens_saved += before - after
    return compacted, _item(state.key, summary, tail)


async def _forward(
    request: Request, gateway: Gateway, body: dict[str, Any], item: dict[str, Any] | None
) -> Response:
    """Send ``body`` upstream; the answer gains ``item`` first in its output."""
    opened = await open_upstream(request, _dumps(body), "openai")
    if isinstance(opened, Response):
        return opened
    if opened.status_code >= 400 or item is None:
        return stream_back(request, opened, "openai")
    headers = relayed_headers(opened.headers)
    if opened.headers.get("content-type", "").startswith("text/event-stream"):
        return RelayResponse(
            with_compaction_item(upstream_chunks(opened, usage=gateway.metrics), item),
            upstream=opened,
            metrics=gateway.metrics,
            status_code=opened.status_code,
            headers=headers,
        )
    try:
        raw, answer = await race_disconnect(request, lambda: gateway.upstream.read_json(opened))
    except UpstreamFailure as failure:
        return error_response("openai", failure.status, failure.message)
    except ClientGone:
        gateway.metrics.upstream_errors["cancelled"] += 1
        return Response(status_code=CLIENT_GONE)
    if isinstance(answer, dict) and isinstance(answer.get("output"), list):
        answer["output"] = [item, *answer["output"]]
        raw = _dumps(answer)
    return Response(raw, status_code=opened.status_code, headers=headers)


def _as_output(item: dict[str, Any]) -> dict[str, Any]:
    """A kept message in the form of an item (a string content as one text part)."""
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "input_text", "text": content}]
    return {**item, "type": "message", "content": content}


async def compact_responses(request: Request) -> Response:
    """``/v1/responses/compact``: the kept messages followed by one compaction item,
    written here with no model call unless the summarizer makes one."""
    gateway = gateway_of(request)
    if passes_responses(gateway.config):
        return await relay(request, "openai")
    read = await client_json(request, "openai")
    if isinstance(read, Response):
        return read
    _raw, data = read
    try:
        if not isinstance(data.get("model"), str) or not data["model"]:
            raise ResponsesError("model: a model name is required", "model")
        if data.get("input") is None and data.get("previous_response_id") is not None:
            raise ResponsesError(
                "previous_response_id: the gateway compacts the input it is sent; send the "
                "conversation as input",
                "previous_response_id",
            )
        items, _ = without_trigger(input_items(data.get("input")))
        expanded = expand(items, _state(request).key)
        if not expanded.items():
            raise ResponsesError("input: nothing to compact", "input")
    except ResponsesError as exc:
        return _refused(exc)
    except _NoKey:
        return _no_key()
    written = await _compaction(request, gateway, expanded.items(), data["model"])
    if isinstance(written, Response):
        return written
    summary, usage = written
    gateway.metrics.compactions += 1
    item = _item(_state(request).key, summary)
    window: list[Any] = [_as_output(m) for m in expanded.window() if is_kept(m)]
    return JSONResponse(
        {
            "id": item["id"],
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*window, item],
            "usage": _usage(usage),
        }
    )
