"""Fake OpenAI and Anthropic HTTP servers for the real SDKs, through ``httpx2.MockTransport``.

:class:`FakeOpenAI` and :class:`FakeAnthropic` answer with :mod:`model_scenarios` turns in
the provider's documented wire format: a JSON body, or Server-Sent Events when the request
has ``"stream": true``. The turns come from a queue, or from a function of each request
body; :class:`FakeServer` is such a function for the reliability suite (automatic answers,
with wire-level faults queued per kind of request). Every request body is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import pytest

pytest.importorskip("httpx2", reason="the fake provider servers need httpx2 (dev extra)")

import httpx2

from contextfold.context import SUMMARY_ASK
from contextfold.model import ChatModelBase
from contextfold.token import AnthropicEstimator

from .model_scenarios import SECRET_KEY, Cut, Failure, Reply, Turn

MODEL_ANTHROPIC = "claude-sonnet-5"

# -- transport pieces ----------------------------------------------------------------------


class BrokenStream(httpx2.AsyncByteStream):
    """A body that sends some bytes, then loses the connection."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        raise httpx2.ReadError("connection reset by peer")


def sse_response(events: list[bytes]) -> httpx2.Response:
    """A 200 carrying ``events`` as Server-Sent Events."""
    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=b"".join(events)
    )


def cut_sse_response(events: list[bytes]) -> httpx2.Response:
    """A 200 stream that loses the connection after the first half of ``events``."""
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=BrokenStream(events[: len(events) // 2]),
    )


def garbled_response(*, stream: bool) -> httpx2.Response:
    """A 200 whose body a proxy mangled: half a JSON object, or an SSE event of bad JSON."""
    if stream:
        content_type, garbage = "text/event-stream", b"data: {oops\n\n"
    else:
        content_type, garbage = "application/json", b'{"id": "x", "choi'
    return httpx2.Response(200, headers={"content-type": content_type}, content=garbage)


# -- the fakes -----------------------------------------------------------------------------


class FakeProvider:
    """Base of the fakes: a queue of turns and a record of requests."""

    def __init__(
        self,
        turns: list[Turn] | Callable[[dict[str, Any]], Turn],
        *,
        piece: int = 4,
        api_key: str = SECRET_KEY,
    ) -> None:
        self.turns = turns if callable(turns) else list(turns)
        self.piece = piece
        """Characters per streamed delta."""
        self.api_key = api_key
        """The key the 401 body quotes (as OpenAI's does), to check it is redacted."""
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
        if callable(self.turns):
            turn = self.turns(body)
        elif self.turns:
            turn = self.turns.pop(0)
        else:
            return httpx2.Response(500, json={"error": {"message": "fake: no turn left"}})
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
            if body.get("stream"):
                return cut_sse_response(list(self.sse(turn.reply)))
            whole = json.dumps(self.json(turn.reply)).encode()
            return httpx2.Response(
                200, headers={"content-type": "application/json"}, stream=BrokenStream([whole[:40]])
            )
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
            "overloaded": (503, body("The engine is currently overloaded", "server_error")),
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
                    f"Incorrect API key provided: {self.api_key}.",
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
            "overloaded": (503, body("overloaded_error", "Overloaded")),
            "context_window": (
                400,
                body("invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum"),
            ),
            "auth": (401, body("authentication_error", f"invalid x-api-key {self.api_key}")),
            "bad_request": (400, body("invalid_request_error", "messages: roles must alternate")),
        }[kind]


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- the reliability suite's server --------------------------------------------------------

SECRET = "sk-test-SECRET-0123456789abcdefghijklmnop"
"""The API key :meth:`FakeServer.model` builds adapters with; it must never be shown anywhere."""

Provider = Literal["openai", "anthropic"]
Kind = Literal["reason", "summary"]

FAULTS = (
    "timeout",
    "connect",
    "429",
    "500",
    "503",
    "context_length",
    "401",
    "garbled_body",
    "empty",
    "cut",
    "malformed_args",
    "unknown_tool",
    "invalid_summary",
    "text",
)
# Faults that are provider errors or transport failures, as the fakes' failure kinds.
_FAILURES = {
    "timeout": "timeout",
    "connect": "connection",
    "429": "rate_limit",
    "500": "server_error",
    "503": "overloaded",
    "context_length": "context_window",
    "401": "auth",
    "garbled_body": "garbled",
}


class FakeServer:
    """One provider's API that answers by itself; queue faults with :meth:`fail`.

    A request forcing ``write_summary`` is a ``"summary"`` request, any other a
    ``"reason"`` one. Without a queued fault a summary request gets a valid summary (a
    value for every property of the forced tool's schema), a reasoning request text.
    """

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.pending: dict[Kind, list[str]] = {"reason": [], "summary": []}
        self.replies = 0
        fake = FakeOpenAI if provider == "openai" else FakeAnthropic
        self.wire: FakeProvider = fake(self._turn, piece=8, api_key=SECRET)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.wire.requests

    @property
    def headers(self) -> list[dict[str, str]]:
        return self.wire.headers

    def fail(self, kind: Kind, *faults: str) -> None:
        self.pending[kind].extend(faults)

    def model(self, *, context_size: int = 4000, retries: int = 2) -> ChatModelBase:
        """The real SDK adapter of this provider, talking to this fake."""
        from contextfold.model import AnthropicChatModel, OpenAIChatModel

        client = self.wire.client()
        if self.provider == "openai":
            return OpenAIChatModel(
                "gpt-4o-mini",
                api_key=SECRET,
                http_client=client,
                context_size=context_size,
                max_retries=retries,
                retry_base_delay=0.0,
            )
        return AnthropicChatModel(
            MODEL_ANTHROPIC,
            api_key=SECRET,
            http_client=client,
            context_size=context_size,
            max_retries=retries,
            retry_base_delay=0.0,
            # This fake reports a fixed 10 input tokens, which the default counter
            # (calibrated by reported usage) would believe; these tests are about faults,
            # so they count with the plain estimator.
            token_counter=AnthropicEstimator(),
        )

    def _turn(self, body: dict[str, Any]) -> Turn:
        asked = _text_summary_fields(body)
        forced = "write_summary" in json.dumps(body.get("tool_choice"))
        kind: Kind = "summary" if forced or asked else "reason"
        fault = self.pending[kind].pop(0) if self.pending[kind] else None
        if fault in _FAILURES:
            return Failure(_FAILURES[fault], retry_after="0" if fault == "429" else None)
        text, calls = "", ()
        if fault == "empty":
            pass
        elif fault == "malformed_args" and asked:
            text = '{"task_overview": "cut'  # a JSON answer cut short
        elif fault == "malformed_args":
            # A JSON body from Anthropic cannot carry malformed tool input: an empty answer.
            if self.provider == "openai" or body.get("stream"):
                calls = (("call_bad", "add", '{"a": 1, "b": '),)
        elif fault == "unknown_tool":
            calls = (("call_unknown", "no_such_tool", '{"x": 1}'),)
        elif fault == "invalid_summary" and asked:
            text = '{"task_overview": 5}'
        elif fault == "invalid_summary":
            calls = (("call_sum", "write_summary", '{"task_overview": 5}'),)
        elif fault == "text" or kind == "reason":
            self.replies += 1
            text = f"answer {self.replies} " + " ".join(f"t{self.replies}x{j}" for j in range(40))
        elif asked:
            text = json.dumps({name: f"{name} (wire)" for name in asked})
        else:
            summary = {name: f"{name} (wire)" for name in _schema(body, "write_summary")}
            calls = (("call_sum", "write_summary", json.dumps(summary)),)
        reply = Reply(text=text, tool_calls=calls, input_tokens=10, output_tokens=5)
        return Cut(reply) if fault == "cut" else reply


def _text_summary_fields(body: dict[str, Any]) -> list[str]:
    """The fields a summary request that keeps the agent's tools asks for (in its
    instruction, after ``SUMMARY_ASK``, which retries follow); empty for any other
    request."""
    for message in reversed(body.get("messages") or []):
        text = json.dumps(message)
        if SUMMARY_ASK in text:
            return re.findall(r"\\n- (\w+):", text)
    return []


def _schema(body: dict[str, Any], tool: str) -> dict[str, Any]:
    """The properties of ``tool``'s parameters in a request body of either provider."""
    for spec in body.get("tools", []):
        spec = spec.get("function", spec)
        if spec["name"] == tool:
            return dict(spec.get("parameters", spec.get("input_schema", {}))["properties"])
    raise AssertionError(f"the request forced {tool!r} without offering it")
