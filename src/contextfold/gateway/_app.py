"""The ASGI application: routes, the request counter, and the upstream client's lifetime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..context import ExtractiveSummarizer, Summarizer
from ..token import AnthropicEstimator, TokenCounter
from ..workspace import SessionStore
from ._config import GatewayConfig
from ._count import CountCache
from ._disconnect import stop_watching
from ._messages import count_tokens, messages
from ._metrics import Metrics
from ._proxy import Gateway, dialect_of, gateway_of, relay
from ._reads_chat import chat_completions
from ._responses import compact_responses, responses
from ._transparent import TransparentPolicy
from ._transparent_route import TransparentMode
from ._upstream import Upstream

__all__ = ["create_app"]

_ROUTES = frozenset(
    {
        "/health",
        "/metrics",
        "/v1/models",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/responses/compact",
    }
)


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "upstream": gateway_of(request).config.upstream})


async def _metrics(request: Request) -> Response:
    gateway = gateway_of(request)
    text = gateway.metrics.render(gateway.upstream.pool)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def _pass_through(request: Request) -> Response:
    return await relay(request, dialect_of(request))


def _bare(route: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """``route`` as an ASGI app of its own (no routing around it)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await route(Request(scope, receive))
        await response(scope, receive, send)

    return app


async def _relay_messages(request: Request) -> Response:
    """``POST /v1/messages`` when the gateway passes ``context_management`` through and
    has no transparent mode: what the route does then (the request relayed as it came)."""
    return await relay(request, "anthropic")


class _CountRequests:
    """Counts every answered request by route (unknown paths as ``other``) and status.
    ``POST /v1/messages`` goes straight to ``messages_app``, without Starlette's routing
    and exception wrappers around it, which were a tenth of the relayed request's time
    (every wake-up of the request's task passes through each of them); an exception
    from it still reaches Starlette's outermost handler, which answers 500."""

    def __init__(self, app: ASGIApp, metrics: Metrics, messages_app: ASGIApp) -> None:
        self.app = app
        self.metrics = metrics
        self.messages_app = messages_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in _ROUTES else "other"
        status = 499  # unless a response starts: the client left first

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if path == "/v1/messages" and scope["method"] == "POST":
                await self.messages_app(scope, receive, counted)
            else:
                await self.app(scope, receive, counted)
        finally:
            stop_watching(scope)  # the request's disconnect listener, if a step started one
            self.metrics.request(route, status)


def create_app(
    config: GatewayConfig,
    *,
    counter: TokenCounter | None = None,
    summarizer: Summarizer | None = None,
    transparent: TransparentPolicy | Mapping[str, TransparentPolicy] | None = None,
    sessions: SessionStore | None = None,
) -> Starlette:
    """The gateway as an ASGI app (serve it with any ASGI server, e.g. uvicorn).

    ``counter`` counts input tokens for the edits' triggers, ``applied_edits`` and
    ``count_tokens``; by default :class:`~contextfold.token.AnthropicEstimator`.
    ``summarizer`` writes the summary of ``compact_20260112``; by default
    :class:`~contextfold.context.ExtractiveSummarizer` (no model call, deterministic).
    ``transparent`` turns on transparent mode (one policy for ``/v1/messages``, or a
    policy by route: ``/v1/messages``, ``/v1/chat/completions``, ``/v1/responses``)
    for requests that ask for no context management; ``sessions`` keeps
    each conversation's state (in memory when ``None``; initialized at startup when it
    has an ``initialize`` method, e.g. :class:`~contextfold.workspace.SQLiteWorkspace`,
    and closed at shutdown). A store that grants leases
    (:class:`~contextfold.workspace.PostgresWorkspace`) lets several replicas share it: one
    decides for a conversation at a time (``config.session_lease_ttl``, ``session_wait``).
    """
    metrics = Metrics()
    mode = (
        TransparentMode.of(
            transparent,
            sessions,
            lease_ttl=config.session_lease_ttl,
            wait=config.session_wait,
            metrics=metrics,
        )
        if transparent is not None
        else None
    )
    gateway = Gateway(
        config=config,
        upstream=Upstream(config, metrics),
        metrics=metrics,
        counter=counter if counter is not None else AnthropicEstimator(),
        summarizer=summarizer if summarizer is not None else ExtractiveSummarizer(),
        counts=CountCache(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        initialize = getattr(sessions, "initialize", None)
        if mode is not None and initialize is not None:
            await initialize()
        # The tokenizer loads now, off the loop, rather than in the first client's request
        # (0.7 s on a quiet machine, seconds under load).
        await asyncio.to_thread(gateway.counter.count_text, "warm")
        yield
        if mode is not None:
            await mode.ahead.close()  # summaries in flight are dropped, counted
        await gateway.upstream.aclose()
        close = getattr(sessions, "close", None)
        if mode is not None and close is not None:
            await close()

    app = Starlette(
        routes=[
            Route("/health", _health, methods=["GET"]),
            Route("/metrics", _metrics, methods=["GET"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/responses/compact", compact_responses, methods=["POST"]),
            Route(
                "/v1/{path:path}",
                _pass_through,
                methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            ),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.transparent = mode
    app.add_middleware(
        _CountRequests,
        metrics=metrics,
        messages_app=_bare(
            _relay_messages if config.passes_context_management and mode is None else messages
        ),
    )
    return app
