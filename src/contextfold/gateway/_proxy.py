"""The gateway's shared state and the pass-through route: a request relayed unchanged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..context import Summarizer
from ..token import TokenCounter
from ._answer import UpstreamAnswer
from ._body import BodyError, read_body, read_json
from ._config import GatewayConfig
from ._count import CountCache
from ._disconnect import ClientGone, race_disconnect
from ._errors import Dialect, error_response
from ._metrics import Metrics
from ._relay import RelayResponse, upstream_chunks
from ._sse import error_event
from ._upstream import Upstream, UpstreamFailure, relayed_headers

__all__ = [
    "Gateway",
    "client_body",
    "client_json",
    "dialect_of",
    "gateway_of",
    "open_upstream",
    "relay",
    "stream_back",
    "stream_error",
]

CLIENT_GONE = 499
"""The status recorded for a request whose client disconnected (nginx's convention)."""


@dataclass
class Gateway:
    """What every route shares: the settings, the upstream client, the counters."""

    config: GatewayConfig
    upstream: Upstream
    metrics: Metrics
    counter: TokenCounter
    summarizer: Summarizer
    """Writes the summary of an emulated ``compact_20260112``."""
    counts: CountCache
    """Message counts kept across requests."""


def gateway_of(request: Request) -> Gateway:
    """The gateway the app was built with."""
    gateway: Gateway = request.app.state.gateway
    return gateway


def dialect_of(request: Request) -> Dialect:
    """Anthropic when the client speaks it (its version header or key header), else OpenAI."""
    headers = request.headers
    return "anthropic" if "anthropic-version" in headers or "x-api-key" in headers else "openai"


async def open_upstream(
    request: Request,
    body: bytes,
    dialect: Dialect,
    *,
    drop_betas: frozenset[str] = frozenset(),
) -> UpstreamAnswer | Response:
    """The upstream's response to ``body`` sent on ``request``'s path, or the error response
    to give the client (unreachable, timed out, or the client left first)."""
    gateway = gateway_of(request)

    def send() -> Awaitable[UpstreamAnswer]:
        return gateway.upstream.open(
            request.method,
            request.url.path,
            query=request.url.query,
            headers=request.headers.items(),
            body=body,
            drop_betas=drop_betas,
        )

    try:
        return await race_disconnect(request, send)
    except UpstreamFailure as failure:
        return error_response(dialect, failure.status, failure.message)
    except ClientGone:
        gateway.metrics.upstream_errors["cancelled"] += 1
        return Response(status_code=CLIENT_GONE)


def stream_error(dialect: Dialect) -> Callable[[str], bytes] | None:
    """What ends a stream whose upstream failed mid-body: an Anthropic ``error`` event
    (``timeout_error`` or ``api_error``); nothing for OpenAI streams."""
    if dialect != "anthropic":
        return None
    return lambda kind: error_event(
        "timeout_error" if kind == "timeout" else "api_error",
        "the upstream stopped sending in time" if kind == "timeout" else "the upstream failed",
    )


def stream_back(request: Request, response: UpstreamAnswer, dialect: Dialect) -> RelayResponse:
    """The upstream's response relayed as it arrives (status, headers, body unchanged;
    with its ``content-length`` when it has one and no ``content-encoding``)."""
    gateway = gateway_of(request)
    length = response.length if request.method != "HEAD" else None
    # A sized answer cut short cannot take an error event: its connection is closed.
    failure = stream_error(dialect) if length is None else None
    return RelayResponse(
        upstream_chunks(response, failure, usage=gateway.metrics),
        upstream=response,
        metrics=gateway.metrics,
        status_code=response.status_code,
        headers=relayed_headers(response.headers),
        length=length,
    )


async def client_body(request: Request, dialect: Dialect) -> bytes | Response:
    """The request's body within the configured size, or the error response to give in
    ``dialect``'s shape (413 past the size, 415 or 400 for an encoding it cannot undo)."""
    try:
        return await read_body(request, gateway_of(request).config.max_body_bytes)
    except BodyError as exc:
        return error_response(dialect, exc.status, exc.message)


async def client_json(
    request: Request, dialect: Dialect
) -> tuple[bytes, dict[str, Any]] | Response:
    """The request's body and its JSON object, or the error response to give in
    ``dialect``'s shape (as :func:`client_body`, and 400 for a body that is not one)."""
    raw = await client_body(request, dialect)
    if isinstance(raw, Response):
        return raw
    try:
        return raw, read_json(raw)
    except BodyError as exc:
        return error_response(dialect, exc.status, exc.message)


async def relay(request: Request, dialect: Dialect, body: bytes | None = None) -> Response:
    """Send the request upstream as it came and relay the answer, errors included."""
    if body is None:
        read = await client_body(request, dialect)
        if isinstance(read, Response):
            return read
        body = read
    opened = await open_upstream(request, body, dialect)
    if isinstance(opened, Response):
        return opened
    return stream_back(request, opened, dialect)
