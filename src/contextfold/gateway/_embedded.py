"""The upstream ``contextfold serve`` uses when given none: the embedded model behind the
two wire formats the gateway speaks, so a newcomer can try the gateway with ``curl`` and no
key.

``POST /v1/messages`` (Anthropic) and ``POST /v1/chat/completions`` (OpenAI), streamed or
not, with tools; ``GET /v1/models``. Requests run one at a time (one llama.cpp context).
The model is any :class:`~contextfold.model.ChatModelBase`; the CLI gives it the embedded
SmolLM2 through :class:`~contextfold.model.LocalChatModel`. Text streams as the model
writes it; tool calls arrive whole at the end of the stream.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..message import (
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    from_anthropic_messages,
    from_openai_messages,
)
from ..model import ChatModelBase, ChatResponse, ResponseCompleted, TextDelta
from ._errors import Dialect, error_response
from ._serve import server_stack

__all__ = ["embedded_upstream", "serving_upstream"]

_MAX_TOKENS_CAP = 2048
"""Largest ``max_tokens`` honoured; the embedded model's window is small."""


class _BadRequest(ValueError):
    """A request the embedded upstream cannot read (answered with a 400)."""


def _anthropic_tools(body: dict[str, Any]) -> tuple[list[ToolSpec], ToolChoice | None]:
    tools = [
        ToolSpec(
            name=t["name"],
            description=t.get("description", ""),
            parameters=t.get("input_schema") or {"type": "object", "properties": {}},
        )
        for t in body.get("tools") or []
        if isinstance(t, dict) and "name" in t
    ]
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return tools, None
    kind = choice.get("type")
    picked: ToolChoice | None = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
    return tools, (str(choice.get("name")) if kind == "tool" else picked)


def _openai_tools(body: dict[str, Any]) -> tuple[list[ToolSpec], ToolChoice | None]:
    tools = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and "name" in fn:
            tools.append(
                ToolSpec(
                    name=fn["name"],
                    description=fn.get("description", ""),
                    parameters=fn.get("parameters") or {"type": "object", "properties": {}},
                )
            )
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return tools, str((choice.get("function") or {}).get("name"))
    return tools, choice if choice in ("auto", "none", "required") else None


def _anthropic_content(response: ChatResponse) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in response.content:
        if isinstance(block, TextBlock):
            out.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCallBlock):
            out.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
    return out


def _anthropic_usage(usage: Usage | None) -> dict[str, int]:
    u = usage or Usage()
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "cache_creation_input_tokens": 0,
    }


def _stop(response: ChatResponse, dialect: Dialect) -> str:
    if response.tool_calls:
        return "tool_use" if dialect == "anthropic" else "tool_calls"
    if response.stop_reason == "max_tokens":
        return "max_tokens" if dialect == "anthropic" else "length"
    return "end_turn" if dialect == "anthropic" else "stop"


def _openai_message(response: ChatResponse) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
    if response.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.input)},
            }
            for c in response.tool_calls
        ]
    return message


def _sse(event: str | None, data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class _Upstream:
    """The two routes over one model, one request at a time."""

    def __init__(self, model: ChatModelBase) -> None:
        self.model = model
        self.lock = asyncio.Lock()

    async def _read(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise _BadRequest("the body must be an object with a 'messages' list")
        return body

    def _limit(self, body: dict[str, Any], key: str) -> None:
        wanted = body.get(key)
        if isinstance(wanted, int) and wanted > 0 and hasattr(self.model, "max_tokens"):
            self.model.max_tokens = min(wanted, _MAX_TOKENS_CAP)

    async def messages(self, request: Request) -> Response:
        try:
            body = await self._read(request)
            msgs = from_anthropic_messages(
                body["messages"], system=body.get("system"), strict=False
            )
            tools, choice = _anthropic_tools(body)
        except (_BadRequest, ValueError) as exc:
            return error_response("anthropic", 400, str(exc))
        if body.get("stream"):
            return StreamingResponse(
                self._anthropic_stream(body, msgs, tools, choice), media_type="text/event-stream"
            )
        async with self.lock:
            self._limit(body, "max_tokens")
            response = await self.model.generate(msgs, tools=tools, tool_choice=choice)
        return JSONResponse(
            {
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model") or self.model.model_name,
                "content": _anthropic_content(response),
                "stop_reason": _stop(response, "anthropic"),
                "stop_sequence": None,
                "usage": _anthropic_usage(response.usage),
            }
        )

    async def _anthropic_stream(
        self,
        body: dict[str, Any],
        msgs: list[Msg],
        tools: list[ToolSpec],
        choice: ToolChoice | None,
    ) -> AsyncIterator[bytes]:
        start: dict[str, Any] = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.model.model_name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _anthropic_usage(None),
        }
        yield _sse("message_start", {"type": "message_start", "message": start})
        index, text_open, final = 0, False, None
        async with self.lock:
            self._limit(body, "max_tokens")
            async for event in self.model.stream(msgs, tools=tools, tool_choice=choice):
                if isinstance(event, TextDelta) and event.text:
                    if not text_open:
                        block = {"type": "text", "text": ""}
                        yield _sse(
                            "content_block_start",
                            {"type": "content_block_start", "index": 0, "content_block": block},
                        )
                        text_open = True
                    delta = {"type": "text_delta", "text": event.text}
                    yield _sse(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": delta},
                    )
                elif isinstance(event, ResponseCompleted):
                    final = event.response
        if text_open:
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            index = 1
        for call in final.tool_calls if final else []:
            use: dict[str, Any] = {"type": "tool_use", "id": call.id, "name": call.name}
            use["input"] = {}
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": use},
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call.input)}
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        usage = _anthropic_usage(final.usage if final else None)
        stop = _stop(final, "anthropic") if final else "end_turn"
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": usage,
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})

    async def chat_completions(self, request: Request) -> Response:
        try:
            body = await self._read(request)
            msgs = from_openai_messages(body["messages"], strict=False)
            tools, choice = _openai_tools(body)
        except (_BadRequest, ValueError) as exc:
            return error_response("openai", 400, str(exc))
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        model_name = body.get("model") or self.model.model_name
        if body.get("stream"):
            return StreamingResponse(
                self._openai_stream(body, key, model_name, msgs, tools, choice),
                media_type="text/event-stream",
            )
        async with self.lock:
            self._limit(body, key)
            response = await self.model.generate(msgs, tools=tools, tool_choice=choice)
        u = response.usage or Usage()
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": _openai_message(response),
                        "finish_reason": _stop(response, "openai"),
                    }
                ],
                "usage": {
                    "prompt_tokens": u.input_tokens,
                    "completion_tokens": u.output_tokens,
                    "total_tokens": u.input_tokens + u.output_tokens,
                    "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
                },
            }
        )

    async def _openai_stream(
        self,
        body: dict[str, Any],
        key: str,
        model_name: str,
        msgs: list[Msg],
        tools: list[ToolSpec],
        choice: ToolChoice | None,
    ) -> AsyncIterator[bytes]:
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model_name,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice_ = {"index": 0, "delta": delta, "finish_reason": finish}
            return _sse(None, {**head, "choices": [choice_]})

        yield chunk({"role": "assistant", "content": ""})
        final = None
        async with self.lock:
            self._limit(body, key)
            async for event in self.model.stream(msgs, tools=tools, tool_choice=choice):
                if isinstance(event, TextDelta) and event.text:
                    yield chunk({"content": event.text})
                elif isinstance(event, ResponseCompleted):
                    final = event.response
        if final is not None and final.tool_calls:
            calls = _openai_message(final)["tool_calls"]
            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
        yield chunk({}, _stop(final, "openai") if final else "stop")
        if (body.get("stream_options") or {}).get("include_usage") and final is not None:
            u = final.usage or Usage()
            usage = {
                "prompt_tokens": u.input_tokens,
                "completion_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.output_tokens,
            }
            yield _sse(None, {**head, "choices": [], "usage": usage})
        yield _sse(None, "[DONE]")

    async def models(self, _request: Request) -> Response:
        name = self.model.model_name
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "contextfold"}],
            }
        )


def embedded_upstream(model: ChatModelBase) -> Starlette:
    """An ASGI app answering Anthropic Messages and OpenAI Chat Completions with ``model``."""
    upstream = _Upstream(model)
    return Starlette(
        routes=[
            Route("/v1/messages", upstream.messages, methods=["POST"]),
            Route("/v1/chat/completions", upstream.chat_completions, methods=["POST"]),
            Route("/v1/models", upstream.models, methods=["GET"]),
        ]
    )


@contextmanager
def serving_upstream(model: ChatModelBase, *, host: str = "127.0.0.1") -> Iterator[str]:
    """:func:`embedded_upstream` served on a free loopback port in a thread; yields its
    base URL and stops it on exit."""
    config = uvicorn.Config(
        embedded_upstream(model),
        host=host,
        port=0,
        log_level="warning",
        access_log=False,
        **server_stack(),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="contextfold-embedded", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the embedded upstream did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
