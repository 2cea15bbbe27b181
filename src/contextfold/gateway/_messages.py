"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` with Anthropic's
``context_management`` emulated for any upstream.

The client's body is edited as the edits say and sent without the field (and without its
beta in ``anthropic-beta``, which strict upstreams reject along with it); the answer gains
``context_management.applied_edits`` (on the final ``message_delta`` when streaming).
With pass-through configured, both routes are relayed unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._logging import logger
from ..context import ModelSummarizer, Summarizer
from ..message import Usage
from ._answer import UpstreamAnswer
from ._apply import EditOutcome, apply_context_management, unedited
from ._body import BodyError, read_parsed
from ._compaction import CompactionDone, compact
from ._count import Tally
from ._disconnect import ClientGone, race_disconnect
from ._edits import EditError
from ._errors import error_response, not_transformed
from ._kept import Kept, kept_as_is
from ._paused import paused_answer
from ._prefix import Known, checkpoint_after, recall
from ._proxy import (
    CLIENT_GONE,
    client_body,
    gateway_of,
    open_upstream,
    relay,
    stream_back,
    stream_error,
)
from ._reads import ReadContext
from ._reads_messages import answered
from ._relay import RelayResponse, upstream_chunks
from ._request_model import RequestModel
from ._sessions import SessionBusy
from ._sse import add_context_management
from ._transparent import TransparentPolicy, forward, view
from ._transparent_route import TransparentMode, asks_for_nothing, mode_of
from ._upstream import UpstreamFailure, relayed_headers
from ._wire import ParsedBody

__all__ = ["CONTEXT_MANAGEMENT_BETAS", "count_tokens", "messages"]

CONTEXT_MANAGEMENT_BETAS = frozenset({"context-management-2025-06-27", "compact-2026-01-12"})
"""Betas that go with the field: removed from ``anthropic-beta`` when the field is."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _forwarded(parsed: ParsedBody | None, body: dict[str, Any]) -> bytes:
    """``body`` as sent upstream: the client's own bytes for what is unchanged."""
    return parsed.dumps(body) if parsed is not None else _dumps(body)


def _edited(
    request: Request, raw: bytes, *, compaction: bool
) -> tuple[EditOutcome, bool, ParsedBody] | Response:
    """The request's edits applied, whether it asks for nothing (transparent mode's to
    manage), and the parsed body; or the error response to give."""
    gateway = gateway_of(request)
    try:
        parsed = read_parsed(raw)
        data = parsed.data
        if not isinstance(data.get("messages"), list):
            raise BodyError(400, "messages: expected a list of messages")
    except BodyError as exc:
        return error_response("anthropic", exc.status, exc.message)
    quiet = asks_for_nothing(data)
    try:
        outcome = apply_context_management(
            data, gateway.counter, compaction=compaction, cache=gateway.counts
        )
    except EditError as exc:
        return error_response("anthropic", 400, str(exc))
    except Exception as exc:  # a shape the edits do not handle: fail open, counted
        logger.warning("gateway: context edits not applied (%s)", type(exc).__name__)
        gateway.metrics.untransformed += 1
        if gateway.config.fail_closed:
            return error_response("anthropic", 500, not_transformed(exc))
        return unedited(data, gateway.counter), False, parsed
    return outcome, quiet, parsed


def _transparent_summarizer(
    request: Request, body: dict[str, Any], policy: TransparentPolicy
) -> tuple[Summarizer, Callable[[], Usage] | None]:
    """The app's summarizer, or a model summarizer on the request's own model (with what
    its calls cost, for the metrics)."""
    gateway = gateway_of(request)
    if policy.summarize_with != "model":
        return gateway.summarizer, None
    model = RequestModel(
        gateway.upstream,
        str(body.get("model")),
        headers=request.headers.items(),
        drop_betas=CONTEXT_MANAGEMENT_BETAS,
        counter=gateway.counter,
    )
    return ModelSummarizer(model, request="transcript"), lambda: model.spent


class _Refused(Exception):
    """Transparent mode failed and the gateway fails closed: the message to answer with."""


class _Busy(Exception):
    """The conversation stayed held past the wait and the gateway fails closed."""


def _busy() -> Response:
    return error_response(
        "anthropic",
        529,
        "this conversation is busy: another request of it is being decided (on this "
        "gateway or another replica); retry",
    )


async def _transparently(
    request: Request,
    body: dict[str, Any],
    mode: TransparentMode,
    policy: TransparentPolicy,
    parsed: ParsedBody | None = None,
) -> tuple[dict[str, Any], ReadContext | None]:
    """``body`` as transparent mode forwards it (the conversation's state updated, its
    cut results kept whole in its workspace), and what answering the read-back tool
    needs when the body carries it; the body unchanged, counted, if that fails (fail
    open), or ``_Refused`` (fail closed). A conversation another request holds past the
    wait is forwarded as its saved state says, with no compaction and no state change
    (``_Busy`` when failing closed). With ``parsed`` (the client's request, whose
    messages ``body`` still has), only what the conversation's previous request did not
    show is digested and counted."""
    gateway = gateway_of(request)
    try:
        summarizer, spent = _transparent_summarizer(request, body, policy)
        key = mode.key(request, body)
        same = parsed is not None and body.get("messages") is parsed.data.get("messages")
        known = (
            recall(parsed, mode.states.checkpoint(key), gateway.counter)
            if parsed is not None and same
            else None
        )
        try:
            async with mode.states.hold(key) as held:
                done = await mode.ahead.forward(
                    key,
                    body,
                    held.state,
                    policy,
                    counter=gateway.counter,
                    summarizer=summarizer,
                    spent=spent,
                    counts=gateway.counts,
                    known=known,
                )
                await held.save(done.state)
        except SessionBusy:
            gateway.metrics.session_busy += 1
            if gateway.config.fail_closed:
                raise _Busy from None
            done = await forward(
                body,
                await mode.states.load(key),
                policy,
                counter=gateway.counter,
                summarizer=summarizer,
                counts=gateway.counts,
                compaction=False,
                known=known,
            )
        checkpoint = None
        if known is not None and done.counted is not None:
            checkpoint = checkpoint_after(known, gateway.counter, done.counted)
        mode.states.keep_checkpoint(key, checkpoint)
        # Content-keyed and idempotent: kept outside the lease, busy or not.
        gateway.metrics.offloads += await mode.results.keep(key, done.offloads)
    except _Busy:
        raise
    except Exception as exc:
        logger.warning("gateway: transparent mode not applied (%s)", type(exc).__name__)
        gateway.metrics.untransformed += 1
        if gateway.config.fail_closed:
            raise _Refused(not_transformed(exc)) from None
        return body, None
    gateway.metrics.compactions += done.compacted
    gateway.metrics.tokens_saved += max(done.original_tokens - done.input_tokens, 0)
    reads = None
    if done.reads:
        reads = ReadContext(
            request,
            key,
            mode.results,
            page=policy.tool_result_limit or 0,
            rounds=policy.read_rounds,
            counter=gateway.counter,
            dialect="anthropic",
        )
    return done.body, reads


async def _viewed(
    request: Request,
    body: dict[str, Any],
    mode: TransparentMode,
    policy: TransparentPolicy,
    parsed: ParsedBody | None = None,
) -> tuple[dict[str, Any], Known | None, tuple[int, int] | None]:
    """``body`` as it would be forwarded now (no compaction run, no state changed), what
    the conversation's last request showed (with ``parsed``), and the tokens of the
    forwarded messages that need no counting again, when known."""
    gateway = gateway_of(request)
    try:
        key = mode.key(request, body)
        state = await mode.states.load(key)
        same = parsed is not None and body.get("messages") is parsed.data.get("messages")
        known = (
            recall(parsed, mode.states.checkpoint(key), gateway.counter)
            if parsed is not None and same
            else None
        )
        viewed = view(body, state, policy, gateway.counter, known=known)
        base = None
        if known is not None:
            digests = known.digests
            if state.cut < len(digests) and digests[state.cut] == state.cut_digest:
                base = known.forwarded_base(state)
        return viewed, known, base
    except Exception as exc:
        logger.warning("gateway: transparent view not applied (%s)", type(exc).__name__)
        return body, None, None


async def _transparent_relay(
    request: Request, mode: TransparentMode, policy: TransparentPolicy, *, count: bool
) -> Response:
    """Pass-through with transparent mode: a request that asks for nothing is forwarded
    as transparent mode says (``count_tokens`` counts that form); any other as it came."""
    raw = await client_body(request, "anthropic")
    if isinstance(raw, Response):
        return raw
    try:
        parsed = read_parsed(raw)
    except BodyError as exc:
        return error_response("anthropic", exc.status, exc.message)
    data = parsed.data
    if not asks_for_nothing(data) or not isinstance(data.get("messages"), list):
        return await relay(request, "anthropic", raw)
    if count:
        body, _, _ = await _viewed(request, data, mode, policy, parsed)
        return await relay(request, "anthropic", parsed.dumps(body))
    try:
        body, reads = await _transparently(request, data, mode, policy, parsed)
    except _Refused as refused:
        return error_response("anthropic", 500, str(refused))
    except _Busy:
        return _busy()
    if reads is None:
        return await relay(request, "anthropic", parsed.dumps(body))
    opened = await open_upstream(request, parsed.dumps(body), "anthropic")
    if isinstance(opened, Response):
        return opened
    return await answered(reads, body, opened)


def _summarizer(
    request: Request, body: dict[str, Any]
) -> tuple[Summarizer, Callable[[], Usage] | None]:
    """The app's summarizer, or a model summarizer on the request's own model (with what
    its calls cost)."""
    gateway = gateway_of(request)
    if gateway.config.summarize_with != "model":
        return gateway.summarizer, None
    model = RequestModel(
        gateway.upstream,
        str(body.get("model")),
        headers=request.headers.items(),
        drop_betas=CONTEXT_MANAGEMENT_BETAS,
        counter=gateway.counter,
    )
    return ModelSummarizer(model, request="transcript"), lambda: model.spent


async def _passed_through(
    request: Request, transparent: tuple[TransparentMode, TransparentPolicy] | None, *, count: bool
) -> Response:
    """A first-party upstream runs ``context_management`` itself: the request relayed as
    sent, or as transparent mode forwards it when the client asks for nothing."""
    if transparent is not None:
        return await _transparent_relay(request, *transparent, count=count)
    return await relay(request, "anthropic")


async def messages(request: Request) -> Response:
    """Create a message, with the request's context edits applied here."""
    gateway = gateway_of(request)
    transparent = mode_of(request)
    if gateway.config.passes_context_management:
        return await _passed_through(request, transparent, count=False)
    raw = await client_body(request, "anthropic")
    if isinstance(raw, Response):
        return raw
    kept = kept_as_is(raw) if transparent is None else None
    if kept is not None:
        return await _as_is(request, kept)
    edited = _edited(request, raw, compaction=True)
    if isinstance(edited, Response):
        return edited
    outcome, quiet, parsed = edited
    for entry in outcome.applied_edits:
        gateway.metrics.edits[str(entry["type"])] += 1
    gateway.metrics.tokens_saved += outcome.tokens_saved
    body = outcome.body
    field = outcome.response_field()
    done: CompactionDone | None = None
    reads: ReadContext | None = None
    if outcome.compaction is not None:
        pending = outcome.compaction
        try:
            summarizer, spent = _summarizer(request, body)
            done = await race_disconnect(request, lambda: compact(pending, summarizer, spent=spent))
        except ClientGone:
            gateway.metrics.upstream_errors["cancelled"] += 1
            return Response(status_code=CLIENT_GONE)
        gateway.metrics.compactions += done.block["content"] is not None
        body = {**body, "messages": done.messages}
        gateway.metrics.tokens_saved += max(
            outcome.input_tokens - Tally(gateway.counter, body, gateway.counts).total, 0
        )
        if pending.edit.pause_after_compaction:
            return paused_answer(body, done, field)
    elif transparent is not None and quiet and not outcome.failed:
        try:
            body, reads = await _transparently(request, body, *transparent, parsed)
        except _Refused as refused:
            return error_response("anthropic", 500, str(refused))
        except _Busy:
            return _busy()
    betas = CONTEXT_MANAGEMENT_BETAS if outcome.requested else frozenset()
    opened = await open_upstream(request, _forwarded(parsed, body), "anthropic", drop_betas=betas)
    if isinstance(opened, Response):
        return opened
    if reads is not None:
        reads.drop_betas = betas  # every round goes out as the first did
        return await answered(reads, body, opened, field if outcome.requested else None)
    if opened.status_code >= 400 or not outcome.requested or outcome.failed:
        return stream_back(request, opened, "anthropic")
    return await _with_field(request, opened, field, done)


async def _as_is(request: Request, kept: Kept) -> Response:
    """A request its edits leave as it is (``_kept``): sent as it came, without the
    field, the answer given ``applied_edits: []`` (what the full path does with it)."""
    betas = CONTEXT_MANAGEMENT_BETAS if kept.requested else frozenset()
    opened = await open_upstream(request, kept.body, "anthropic", drop_betas=betas)
    if isinstance(opened, Response):
        return opened
    if opened.status_code >= 400 or not kept.requested:
        return stream_back(request, opened, "anthropic")
    return await _with_field(request, opened, {"applied_edits": []}, None)


async def _with_field(
    request: Request, opened: UpstreamAnswer, field: dict[str, Any], done: CompactionDone | None
) -> Response:
    """The upstream's successful answer with ``context_management`` (``field``) and the
    compaction block (``done``), streamed or whole."""
    gateway = gateway_of(request)
    compaction = (done.block, done.iteration) if done is not None else None
    if opened.headers.get("content-type", "").startswith("text/event-stream"):
        chunks = upstream_chunks(opened, stream_error("anthropic"), usage=gateway.metrics)
        return RelayResponse(
            add_context_management(chunks, field, compaction),
            upstream=opened,
            metrics=gateway.metrics,
            status_code=opened.status_code,
            headers=relayed_headers(opened.headers),
        )
    try:
        raw, answer = await race_disconnect(request, lambda: gateway.upstream.read_json(opened))
    except UpstreamFailure as failure:
        return error_response("anthropic", failure.status, failure.message)
    except ClientGone:
        gateway.metrics.upstream_errors["cancelled"] += 1
        return Response(status_code=CLIENT_GONE)
    headers = relayed_headers(opened.headers)
    if isinstance(answer, dict) and answer.get("type") == "message":
        answer["context_management"] = field
        if done is not None:
            _add_compaction(answer, done)
        raw = _dumps(answer)
    return Response(raw, status_code=opened.status_code, headers=headers)


def _add_compaction(answer: dict[str, Any], done: CompactionDone) -> None:
    """The compaction block first in ``content``; its iteration in ``usage.iterations``
    (the top-level usage stays the upstream's: Anthropic excludes compaction from it)."""
    content = answer.get("content")
    answer["content"] = [done.block, *(content if isinstance(content, list) else [])]
    usage = answer.get("usage")
    if isinstance(usage, dict):
        message = {k: v for k, v in usage.items() if k != "iterations"}
        usage["iterations"] = [done.iteration, {"type": "message", **message}]


async def count_tokens(request: Request) -> Response:
    """The input tokens of what ``/v1/messages`` would send after the edits, counted by
    the gateway's counter (named in the ``x-contextfold-counter`` header)."""
    gateway = gateway_of(request)
    transparent = mode_of(request)
    if gateway.config.passes_context_management:
        return await _passed_through(request, transparent, count=True)
    raw = await client_body(request, "anthropic")
    if isinstance(raw, Response):
        return raw
    edited = _edited(request, raw, compaction=False)
    if isinstance(edited, Response):
        return edited
    outcome, quiet, parsed = edited
    if transparent is not None and quiet and not outcome.failed:
        body, known, base = await _viewed(request, outcome.body, *transparent, parsed)
        input_tokens = Tally(gateway.counter, body, gateway.counts, base=base).total
        client = known.client_base() if known is not None else None
        sent = Tally(gateway.counter, outcome.body, gateway.counts, base=client)
        original = sent.total + outcome.tokens_saved if outcome.requested else 0
    else:
        input_tokens = outcome.input_tokens
        original = outcome.original_input_tokens if outcome.requested else 0
    result: dict[str, Any] = {"input_tokens": input_tokens}
    if outcome.requested:
        result["context_management"] = {"original_input_tokens": original}
    name = str(getattr(gateway.counter, "name", type(gateway.counter).__name__))
    return JSONResponse(result, headers={"x-contextfold-counter": name})
