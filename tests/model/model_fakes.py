"""Fake OpenAI and Anthropic HTTP servers for the real SDKs, through ``httpx2.MockTransport``.

Each fake serves a queue of :mod:`model_scenarios` turns in the provider's documented wire
format: a JSON body, or Server-Sent Events when the request has ``"stream": true``.
Every request body is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2

from tests.http_fakes import cut_sse_response, garbled_response, sse_response

from .model_scenarios import SECRET_KEY, Cut, Failure, Reply, Turn

MODEL_ANTHROPIC = "claude-sonnet-5"


class FakeProvider:
    """Base of the fakes: a queue of turns and a record of requests."""

    def __init__(self, turns: list[Turn], *, piece: int = 4) -> None:
        self.turns = list(turns)
        self.piece = piece
        """Characters per streamed delta."""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=self.transport())

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if not self.turns:
            return httpx2.Response(500, json={"error": {"message": "fake: no turn left"}})
        turn = self.turns.pop(0)
        if isinstance(turn, Failure):
            if turn.kind == "connection":
                raise httpx2.ConnectError("connection refused", request=request)
            if turn.kind == "timeout":
                raise httpx2.ReadTimeout("timed out", request=request)
            if turn.kind == "garbled":  # a 200 whose body a proxy mangled
                return garbled_response(stream=bool(body.get("stream")))
            status, payload = self.error(turn.kind)
            headers = {"retry-after": turn.retry_after} if turn.retry_after else {}
            return httpx2.Response(status, json=payload, headers=headers)
        if isinstance(turn, Cut):
            return cut_sse_response(list(self.sse(turn.reply)))
        if body.get("stream"):
            return sse_response(list(self.sse(turn)))
        return httpx2.Response(200, json=self.json(turn))

    def json(self, reply: Reply) -> dict[str, Any]:
        raise NotImplementedError

    def sse(self, reply: Reply) -> Iterator[bytes]:
        raise NotImplementedError

    def error(self, kind: str) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError


class FakeOpenAI(FakeProvider):
    """The Chat Completions API (``POST /v1/chat/completions``)."""

    def json(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in reply.tool_calls
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": self._usage(reply),
        }

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }

    def sse(self, reply: Reply) -> Iterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "gpt-4o-mini-2024-07-18",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(data)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""})
        for word in _pieces(reply.text, self.piece):
            yield chunk({"content": word})
        for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _pieces(arguments, self.piece + 1):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, finish="tool_calls" if reply.tool_calls else "stop")
        usage = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [],
            "usage": self._usage(reply),
        }
        yield f"data: {json.dumps(usage)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    def error(self, kind: str) -> tuple[int, dict[str, Any]]:
        def body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
            return {"error": {"message": message, "type": type_, "param": None, "code": code}}

        return {
            "rate_limit": (
                429,
                body("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
            ),
            "server_error": (500, body("The server had an error", "server_error")),
            "context_window": (
                400,
                body(
                    "This model's maximum context length is 128000 tokens. However, your "
                    "messages resulted in 130512 tokens.",
                    "invalid_request_error",
                    "context_length_exceeded",
                ),
            ),
            "auth": (
                401,
                body(
                    f"Incorrect API key provided: {SECRET_KEY}.",
                    "invalid_request_error",
                    "invalid_api_key",
                ),
            ),
            "bad_request": (400, body("Invalid value for 'temperature'", "invalid_request_error")),
        }[kind]


class FakeAnthropic(FakeProvider):
    """The Messages API (``POST /v1/messages``)."""

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.thinking:
            blocks.append(
                {"type": "thinking", "thinking": reply.thinking[0], "signature": reply.thinking[1]}
            )
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call_id, name, arguments in reply.tool_calls:
            blocks.append(
                {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
            )
        return blocks

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens - reply.cached_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
            "output_tokens": reply.output_tokens,
        }

    def json(self, reply: Reply) -> dict[str, Any]:
        return self._envelope(reply) | {
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        }

    def _envelope(self, reply: Reply) -> dict[str, Any]:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": MODEL_ANTHROPIC,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def sse(self, reply: Reply) -> Iterator[bytes]:
        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

        usage = self._usage(reply)
        start = self._envelope(reply)
        start["usage"] = usage | {"output_tokens": 1}
        yield event("message_start", {"message": start})
        yield event("ping", {})
        index = 0
        if reply.thinking:
            yield event(
                "content_block_start",
                {
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
            for piece in _pieces(reply.thinking[0], self.piece):
                yield event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "thinking_delta", "thinking": piece}},
                )
            yield event(
                "content_block_delta",
                {
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": reply.thinking[1]},
                },
            )
            yield event("content_block_stop", {"index": index})
            index += 1
        if reply.text:
            yield event(
                "content_block_start",
                {"index": index, "content_block": {"type": "text", "text": ""}},
            )
            for piece in _pieces(reply.text, self.piece):
                yield event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "text_delta", "text": piece}},
                )
            yield event("content_block_stop", {"index": index})
            index += 1
        for call_id, name, arguments in reply.tool_calls:
            yield event(
                "content_block_start",
                {
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
            for piece in _pieces(arguments, self.piece + 1):
                yield event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}},
                )
            yield event("content_block_stop", {"index": index})
            index += 1
        yield event(
            "message_delta",
            {
                "delta": {
                    "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": reply.output_tokens},
            },
        )
        yield event("message_stop", {})

    def error(self, kind: str) -> tuple[int, dict[str, Any]]:
        def body(type_: str, message: str) -> dict[str, Any]:
            return {"type": "error", "error": {"type": type_, "message": message}}

        return {
            "rate_limit": (
                429,
                body(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                ),
            ),
            "server_error": (500, body("api_error", "Internal server error")),
            "context_window": (
                400,
                body("invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum"),
            ),
            "auth": (401, body("authentication_error", f"invalid x-api-key {SECRET_KEY}")),
            "bad_request": (400, body("invalid_request_error", "messages: roles must alternate")),
        }[kind]


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
