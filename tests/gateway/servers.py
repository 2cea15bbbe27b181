"""Loopback servers for the gateway tests: a scripted Anthropic-shaped upstream that records
what it received, and a runner that serves any ASGI app with uvicorn in a thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """``app`` served on loopback; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@dataclass
class Received:
    """One request the upstream received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Request, Received], Any]
"""A scripted answer: returns a Response (may be async)."""


def message(text: str = "done", **extra: Any) -> dict[str, Any]:
    """An Anthropic Messages API answer."""
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 2,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
        **extra,
    }


def sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def message_stream(text: str = "Hello there") -> list[tuple[str, dict[str, Any]]]:
    """The documented event order of a streamed text answer (with a ping)."""
    start = message("")
    start["content"] = []
    start["stop_reason"] = None
    half = len(text) // 2
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text[:half]},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text[half:]},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 3},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


@dataclass
class ScriptedUpstream:
    """An Anthropic-shaped upstream: answers from a script, records every request."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    script: list[Handler] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def then(self, handler: Handler) -> ScriptedUpstream:
        self.script.append(handler)
        return self

    def then_json(
        self, body: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> ScriptedUpstream:
        return self.then(lambda _r, _x: JSONResponse(body, status_code=status, headers=headers))

    def then_sse(
        self, events: list[tuple[str, dict[str, Any]]], delay: float = 0.0
    ) -> ScriptedUpstream:
        async def chunks() -> Any:
            for name, data in events:
                yield sse([(name, data)])
                await asyncio.sleep(delay)

        return self.then(lambda _r, _x: StreamingResponse(chunks(), media_type="text/event-stream"))

    def then_slow_stream(
        self, events: list[tuple[str, dict[str, Any]]], gap: float
    ) -> ScriptedUpstream:
        """Stream ``events`` with ``gap`` seconds between them, noting if the gateway hangs
        up before the end."""

        async def chunks() -> Any:
            finished = False
            try:
                for name, data in events:
                    yield sse([(name, data)])
                    await asyncio.sleep(gap)
                finished = True
            finally:
                if not finished:
                    self.disconnected.set()

        return self.then(lambda _r, _x: StreamingResponse(chunks(), media_type="text/event-stream"))

    def then_hang(self, seconds: float) -> ScriptedUpstream:
        """Answer nothing for ``seconds``, noting if the gateway hangs up meanwhile."""

        async def hang(request: Request, _x: Received) -> Response:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    self.disconnected.set()
                    return Response(status_code=499)
                await asyncio.sleep(0.02)
            return JSONResponse(message("late"))

        return self.then(hang)

    def app(self) -> Starlette:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            got = Received(request.method, request.url.path, dict(request.headers), body)
            self.received.append(got)
            if not self.script:
                return JSONResponse(
                    {"type": "error", "error": {"type": "api_error", "message": "no script"}},
                    status_code=500,
                )
            result = self.script.pop(0)(request, got)
            if asyncio.iscoroutine(result):
                result = await result
            return result  # type: ignore[no-any-return]

        methods = ["GET", "POST"]
        return Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])
