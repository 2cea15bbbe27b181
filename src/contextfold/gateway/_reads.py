"""What every route needs to answer the read-back tool itself: the conversation, its
workspace, the page size and the bound on extra upstream calls.

The decision, the same on every route (documented in docs/GATEWAY.md):

- the model calls only the read-back tool: the gateway answers the calls, sends the
  conversation with the call and its result appended upstream again, and the client
  sees one answer: the text of every round, then the last round's output;
- the model calls it beside client tools: the gateway answers its own calls and asks
  again without the client's calls (the model repeats them when it still wants them):
  a client never gets a call whose sibling it cannot see;
- after ``rounds`` extra calls, the read-back calls left in the last answer are removed
  (a ``tool_use`` stop with no client call left becomes ``end_turn``).

Usage is the sum over every upstream call the request made, field by field.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..token import TokenCounter
from ._answer import UpstreamAnswer
from ._disconnect import ClientGone, race_disconnect
from ._errors import Dialect, error_response
from ._proxy import CLIENT_GONE, gateway_of, open_upstream, stream_back
from ._retrieval import ResultStore
from ._upstream import UpstreamFailure, relayed_headers

__all__ = ["ReadContext", "Rounds", "answered_whole", "dumps", "summed", "whole_rounds"]


def dumps(value: Any) -> bytes:
    """A body sent upstream again (compact, UTF-8 as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class ReadContext:
    """One request whose forwarded body carries the read-back tool."""

    request: Request
    key: str
    """The conversation (its items are the only ones this request can read)."""
    results: ResultStore
    page: int
    """Tokens per read (the route's ``tool_result_limit``)."""
    rounds: int
    """Extra upstream calls allowed for this request."""
    counter: TokenCounter
    dialect: Dialect
    drop_betas: frozenset[str] = frozenset()
    record: Callable[[str], Awaitable[None]] | None = None
    """Maps the id of the response the client gets to the conversation
    (``/v1/responses``, for ``previous_response_id``; see :mod:`._response_chain`)."""

    async def answer(self, arguments: Any) -> tuple[str, bool]:
        """The read-back tool's result for ``arguments``, and whether it is an error."""
        gateway_of(self.request).metrics.reads += 1
        return await self.results.answer(self.key, arguments, page=self.page, counter=self.counter)

    async def read(self, response: UpstreamAnswer) -> tuple[bytes, Any] | Response:
        """The whole body of one round's answer and its JSON value (``None``: not JSON),
        or the error response to give (the upstream failed mid-body, or the client left)."""
        gateway = gateway_of(self.request)
        try:
            return await race_disconnect(self.request, lambda: gateway.upstream.read_json(response))
        except UpstreamFailure as failure:
            return error_response(self.dialect, failure.status, failure.message)
        except ClientGone:
            gateway.metrics.upstream_errors["cancelled"] += 1
            return Response(status_code=CLIENT_GONE)

    async def open(self, body: bytes) -> UpstreamAnswer | Response:
        """The upstream's answer to one more round (or the error response to give)."""
        return await open_upstream(self.request, body, self.dialect, drop_betas=self.drop_betas)


def summed(usages: Iterable[Any], fields: Iterable[str]) -> dict[str, int]:
    """``fields`` of every usage object added up (a field no round reports stays out)."""
    out: dict[str, int] = {}
    wanted = tuple(fields)
    for usage in usages:
        if not isinstance(usage, dict):
            continue
        for name in wanted:
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                out[name] = out.get(name, 0) + value
    return out


@dataclass(frozen=True)
class Rounds:
    """A dialect's whole (not streamed) answers, as :func:`whole_rounds` reads them."""

    calls: Callable[[dict[str, Any]], list[Any] | None]
    """The answer's blocks, items or tool calls among which the read-back calls are;
    ``None`` when the answer is not of the dialect's shape."""
    ours: Callable[[Any], bool]
    """Whether one of them is a call to the read-back tool."""
    next_body: Callable[[ReadContext, dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]
    """The body of the next round: the one sent, then the answer with its calls answered."""
    not_one: str
    """The 502's message when a later round's answer is not of the dialect's shape."""


async def whole_rounds(
    ctx: ReadContext, opened: UpstreamAnswer, body: dict[str, Any], rounds: Rounds
) -> tuple[list[dict[str, Any]], dict[str, str]] | Response:
    """Every round's answer while the model calls only the read-back tool (at most
    ``ctx.rounds`` more), and the last one's headers to relay; or the response to give at
    once: an upstream error as it came, the first answer as it came if it is not of the
    dialect's shape, a 502 for a later one, or the client's leaving."""
    answers: list[dict[str, Any]] = []
    current, sent = opened, body
    headers: dict[str, str] = {}
    for round_ in range(ctx.rounds + 1):
        if current.status_code >= 400:
            return stream_back(ctx.request, current, ctx.dialect)  # a later round's too
        read = await ctx.read(current)
        if isinstance(read, Response):
            return read
        raw, answer = read
        headers = relayed_headers(current.headers)
        calls = rounds.calls(answer) if isinstance(answer, dict) else None
        if answer is None or calls is None:
            if not answers:
                return Response(raw, status_code=current.status_code, headers=headers)
            return error_response(ctx.dialect, 502, rounds.not_one)
        answers.append(answer)
        if round_ == ctx.rounds or not any(rounds.ours(c) for c in calls):
            break
        sent = await rounds.next_body(ctx, sent, answer)
        again = await ctx.open(dumps(sent))
        if isinstance(again, Response):
            return again
        current = again
    return answers, headers


async def answered_whole(
    ctx: ReadContext,
    opened: UpstreamAnswer,
    body: dict[str, Any],
    rounds: Rounds,
    final: Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]],
) -> Response:
    """The client's answer to ``body`` read whole: ``final`` of every round's answer
    (:func:`whole_rounds`), with the last round's headers; or the response to give at
    once."""
    read = await whole_rounds(ctx, opened, body, rounds)
    if isinstance(read, Response):
        return read
    answers, headers = read
    return Response(dumps(await final(answers)), status_code=200, headers=headers)
