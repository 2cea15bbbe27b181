"""One transparent-mode decision on an OpenAI route (``/v1/chat/completions``,
``/v1/responses``): what to forward, the conversation's state updated under its hold (a
lock here, the store's lease across replicas), the cut results kept whole first.

Compaction runs when the policy's summaries are extractive (the OpenAI routes have no
model summarizer) and the client sends its whole history (a Responses request chained by
``previous_response_id`` holds only its new items: it is cut and offloaded, never
compacted). A conversation another request holds past the wait is forwarded as its saved
state says, with no compaction and no state change.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ._openai_transparent import (
    OpenAIForwarded,
    compacting_forward,
    openai_key,
    reads_tool,
)
from ._proxy import gateway_of
from ._session_lease import SessionBusy
from ._sessions import SessionState
from ._transparent import Forwarded, TransparentPolicy
from ._transparent_route import TransparentMode

__all__ = ["BUSY", "Busy", "decide", "manages"]


class Busy(Exception):
    """The conversation stayed held past the wait and the gateway fails closed."""


def _compacts(data: dict[str, Any], field: str, policy: TransparentPolicy) -> bool:
    chained = field == "input" and data.get("previous_response_id") is not None
    return policy.summarize_with == "extractive" and not chained


def manages(data: dict[str, Any], field: str, policy: TransparentPolicy) -> bool:
    """Whether transparent mode has anything to do with ``data``: its history is a list,
    and it may be compacted or its results cut."""
    if not isinstance(data.get(field), list):
        return False
    return _compacts(data, field, policy) or policy.tool_result_limit is not None


async def decide(
    request: Request,
    mode: TransparentMode,
    policy: TransparentPolicy,
    data: dict[str, Any],
    field: str,
) -> tuple[str, OpenAIForwarded]:
    """The conversation's key and what to forward: ``data`` itself when nothing changed
    (the caller then sends the client's bytes). ``Busy`` when failing closed on a held
    conversation; any other exception: the caller fails open or closed."""
    gateway = gateway_of(request)
    key = openai_key(request.headers, data)
    if not _compacts(data, field, policy):  # cut and offload only: no state to keep
        forwarded = await compacting_forward(
            data, SessionState(), policy, field=field, summarizer=gateway.summarizer,
            counts=gateway.counts, compaction=False,
        )  # fmt: skip
        async with mode.states.lock(key):
            gateway.metrics.offloads += await mode.results.keep(key, forwarded.offloads)
        return key, _sent(data, forwarded)
    try:
        async with mode.states.hold(key) as held:
            forwarded = await compacting_forward(
                data,
                held.state,
                policy,
                field=field,
                summarizer=gateway.summarizer,
                counts=gateway.counts,
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
