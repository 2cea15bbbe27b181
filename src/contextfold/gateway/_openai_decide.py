"""One transparent-mode decision on an OpenAI route (``/v1/chat/completions``,
``/v1/responses``): what to forward, the conversation's state updated under its hold (a
lock here, the store's lease across replicas), the cut results kept whole first.

Compaction runs when the client sends its whole history (a Responses request chained by
``previous_response_id`` holds only its new items: it is cut and offloaded, never
compacted, in the conversation of the response it continues: :mod:`._response_chain`).
The summary is the app's summarizer's (extractive by default), or with ``--summarizer
model`` the request's own model's, called through the upstream in the route's own wire
format (:mod:`._chat_model`, :mod:`._responses_model`) with the client's headers.
A conversation another request holds past the wait is forwarded as its saved state
says, with no compaction and no state change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .._logging import logger
from ..context import ModelSummarizer, Summarizer
from ..message import Usage
from ._answer import UpstreamAnswer
from ._chat_model import ChatRequestModel, limit_field
from ._errors import error_response, not_transformed
from ._openai_transparent import (
    OpenAIForwarded,
    compacting_forward,
    dumps,
    openai_counter,
    openai_key,
    reads_tool,
)
from ._proxy import gateway_of, open_upstream, stream_back
from ._reads import ReadContext
from ._relay import RelayResponse
from ._responses_model import ResponsesRequestModel
from ._session_lease import SessionBusy
from ._sessions import SessionState
from ._transparent import Forwarded, TransparentPolicy
from ._transparent_route import TransparentMode
from ._upstream import relayed_headers

__all__ = ["BUSY", "Busy", "decide", "manages", "transparently"]


class Busy(Exception):
    """The conversation stayed held past the wait and the gateway fails closed."""


def _compacts(data: dict[str, Any], field: str) -> bool:
    """Whether the request holds its whole history (not a chained Responses request)."""
    return field != "input" or data.get("previous_response_id") is None


def _summarizer(
    request: Request, policy: TransparentPolicy, data: dict[str, Any], field: str
) -> tuple[Summarizer, Callable[[], Usage] | None]:
    """The app's summarizer, or (``summarize_with="model"``) the request's own model
    through the upstream, in the route's wire format, with the client's headers (and
    what its calls cost, for the metrics)."""
    gateway = gateway_of(request)
    if policy.summarize_with != "model":
        return gateway.summarizer, None
    name = str(data.get("model"))
    headers = request.headers.items()
    if field == "messages":
        chat = ChatRequestModel(gateway.upstream, name, headers=headers, counter=openai_counter())
        chat.limit = limit_field(data)
        return ModelSummarizer(chat, request="transcript"), lambda: chat.spent
    model = ResponsesRequestModel(gateway.upstream, name, headers=headers, counter=openai_counter())
    return ModelSummarizer(model, request="transcript"), lambda: model.spent


def manages(data: dict[str, Any], field: str, policy: TransparentPolicy) -> bool:
    """Whether transparent mode has anything to do with ``data``: its history is a list,
    and it may be compacted or its results cut."""
    if not isinstance(data.get(field), list):
        return False
    return _compacts(data, field) or policy.tool_result_limit is not None


async def decide(
    request: Request,
    mode: TransparentMode,
    policy: TransparentPolicy,
    data: dict[str, Any],
    field: str,
    key: str | None = None,
) -> tuple[str, OpenAIForwarded]:
    """The conversation's key (``key`` when the caller knows it) and what to forward:
    ``data`` itself when nothing changed (the caller then sends the client's bytes).
    ``Busy`` when failing closed on a held conversation; any other exception: the caller
    fails open or closed."""
    gateway = gateway_of(request)
    if key is None:
        key = openai_key(request.headers, data)
    if not _compacts(data, field):  # cut and offload only: no state to keep
        forwarded = await compacting_forward(
            data, SessionState(), policy, field=field, summarizer=gateway.summarizer,
            counts=gateway.counts, compaction=False,
        )  # fmt: skip
        async with mode.states.lock(key):
            gateway.metrics.offloads += await mode.results.keep(key, forwarded.offloads)
        return key, _sent(data, forwarded)
    summarizer, spent = _summarizer(request, policy, data, field)
    try:
        async with mode.states.hold(key) as held:
            forwarded = await compacting_forward(
                data,
                held.state,
                policy,
                field=field,
                summarizer=summarizer,
                counts=gateway.counts,
                ahead=(mode.ahead, key, spent),
            )
            await held.save(forwarded.state)
    except SessionBusy:
        gateway.metrics.session_busy += 1
        if gateway.config.fail_closed:
            raise Busy from None
        forwarded = await compacting_forward(
            data,
            await mode.states.load(key),
            policy,
            field=field,
            summarizer=gateway.summarizer,
            counts=gateway.counts,
            compaction=False,
        )
    # Content-keyed and idempotent: kept outside the hold, busy or not.
    gateway.metrics.offloads += await mode.results.keep(key, forwarded.offloads)
    gateway.metrics.compactions += forwarded.compacted
    gateway.metrics.tokens_saved += max(forwarded.original_tokens - forwarded.input_tokens, 0)
    return key, _sent(data, forwarded)


def _sent(data: dict[str, Any], forwarded: Forwarded) -> OpenAIForwarded:
    """What to send: ``data`` itself when nothing was cut, added or summarized (the
    caller then sends the client's bytes)."""
    if forwarded.body == data:
        return OpenAIForwarded(data, (), False)
    return OpenAIForwarded(forwarded.body, forwarded.offloads, reads_tool(forwarded))


BUSY = (
    "this conversation is busy: another request of it is being decided (on this gateway "
    "or another replica); retry"
)


Streamed = Callable[[ReadContext, dict[str, Any], UpstreamAnswer], AsyncIterator[bytes]]
Answered = Callable[[ReadContext, dict[str, Any], UpstreamAnswer], Awaitable[Response]]


async def transparently(
    request: Request,
    raw: bytes,
    data: dict[str, Any],
    route: tuple[TransparentMode, TransparentPolicy],
    field: str,
    as_sent: Callable[[], Awaitable[Response]],
    streamed: Streamed,
    answered: Answered,
    *,
    key: str | None = None,
    back: Callable[[UpstreamAnswer], Response] | None = None,
    record: Callable[[str], Awaitable[None]] | None = None,
) -> Response:
    """An OpenAI route's request in transparent mode: decided, sent, and its read-back
    rounds answered by the route's ``streamed`` or ``answered``; ``as_sent`` relays the
    client's bytes when there is nothing to do or transparent mode fails open. ``key``
    is the conversation when the route tells it itself; ``back`` relays an answer with no
    read-back round (default: as it arrives); ``record`` maps the id of the response the
    client gets to the conversation (``/v1/responses``)."""
    mode, policy = route
    gateway = gateway_of(request)
    if not manages(data, field, policy):
        return await as_sent()  # nothing to do: the bytes as sent
    try:
        key, done = await decide(request, mode, policy, data, field, key)
    except Busy:
        return error_response("openai", 503, BUSY)
    except Exception as exc:
        logger.warning("gateway: transparent mode not applied (%s)", type(exc).__name__)
        gateway.metrics.untransformed += 1
        if gateway.config.fail_closed:
            return error_response("openai", 500, not_transformed(exc))
        return await as_sent()
    body = done.body
    opened = await open_upstream(request, raw if body is data else dumps(body), "openai")
    if isinstance(opened, Response):
        return opened
    if not done.reads or opened.status_code >= 400:
        return back(opened) if back is not None else stream_back(request, opened, "openai")
    ctx = ReadContext(
        request,
        key,
        mode.results,
        page=policy.tool_result_limit or 0,
        rounds=policy.read_rounds,
        counter=openai_counter(),
        dialect="openai",
        record=record,
    )
    if opened.headers.get("content-type", "").startswith("text/event-stream"):
        return RelayResponse(
            streamed(ctx, body, opened),
            upstream=opened,
            metrics=gateway.metrics,
            status_code=opened.status_code,
            headers=relayed_headers(opened.headers),
        )
    return await answered(ctx, body, opened)
