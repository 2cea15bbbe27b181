"""A fake OpenAI / Anthropic server for the real SDK adapters, over ``httpx2.MockTransport``.

Requests are answered automatically (a summary for a forced ``write_summary`` call, text
otherwise) unless a fault is queued for that kind of request (``"reason"`` or
``"summary"``). Faults are wire-level: HTTP errors with the provider's error bodies,
timeouts, a stream cut in the middle, a garbled body, empty answers, tool calls with
malformed arguments. Every request body is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import httpx2

from contextfold.model import AnthropicChatModel, ChatModelBase, OpenAIChatModel
from contextfold.token import AnthropicEstimator
from tests.http_fakes import BrokenStream, cut_sse_response, garbled_response, sse_response

from .rel_support import summary_fields

SECRET = "sk-test-SECRET-0123456789abcdefghijklmnop"
"""The API key the adapters are built with; it must never be shown anywhere."""

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


class FakeServer:
    """One provider's API; queue faults with :meth:`fail`."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.pending: dict[Kind, list[str]] = {"reason": [], "summary": []}
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.replies = 0

    def fail(self, kind: Kind, *faults: str) -> None:
        self.pending[kind].extend(faults)

    def model(self, *, context_size: int = 4000, retries: int = 2) -> ChatModelBase:
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))
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
            "claude-sonnet-5",
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

    # -- dispatch ----------------------------------------------------------------

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        kind: Kind = (
            "summary" if "write_summary" in json.dumps(body.get("tool_choice")) else "reason"
        )
        stream = bool(body.get("stream"))
        fault = self.pending[kind].pop(0) if self.pending[kind] else None
        if fault == "timeout":
            raise httpx2.ReadTimeout("timed out", request=request)
        if fault == "connect":
            raise httpx2.ConnectError("connection refused", request=request)
        if fault in ("429", "500", "503", "context_length", "401"):
            status, payload = self._error(fault)
            headers = {"retry-after": "0"} if fault == "429" else {}
            return httpx2.Response(status, json=payload, headers=headers)
        if fault == "garbled_body":
            return garbled_response(stream=stream)
        text, calls = "", []
        if fault == "empty":
            pass
        elif fault == "malformed_args":
            calls = [("call_bad", "add", '{"a": 1, "b": ')]
        elif fault == "unknown_tool":
            calls = [("call_unknown", "no_such_tool", '{"x": 1}')]
        elif fault == "invalid_summary":
            calls = [("call_sum", "write_summary", '{"task_overview": 5}')]
        elif fault == "text" or kind == "reason":
            self.replies += 1
            text = f"answer {self.replies} " + " ".join(f"t{self.replies}x{j}" for j in range(40))
        else:
            calls = [("call_sum", "write_summary", json.dumps(summary_fields("wire")))]
        if self.provider == "anthropic" and not stream and fault == "malformed_args":
            calls = []  # a JSON body cannot carry malformed tool input; send an empty answer
        if stream:
            events = list(self._sse(text, calls))
            return cut_sse_response(events) if fault == "cut" else sse_response(events)
        if fault == "cut":  # a whole-body answer cut in the middle
            whole = json.dumps(self._json(text, calls)).encode()
            return httpx2.Response(
                200, headers={"content-type": "application/json"}, stream=BrokenStream([whole[:40]])
            )
        return httpx2.Response(200, json=self._json(text, calls))

    # -- wire formats ---------------------------------------------------------------

    def _error(self, fault: str) -> tuple[int, dict[str, Any]]:
        openai = self.provider == "openai"

        def body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
            if openai:
                return {"error": {"message": message, "type": type_, "param": None, "code": code}}
            return {"type": "error", "error": {"type": type_, "message": message}}

        return {
            "429": (429, body("Rate limit reached", "rate_limit_error", "rate_limit_exceeded")),
            "500": (500, body("The server had an error", "api_error")),
            "503": (503, body("Overloaded", "overloaded_error")),
            "context_length": (
                400,
                body(
                    "This model's maximum context length is 4000 tokens"
                    if openai
                    else "prompt is too long: 5000 tokens > 4000 maximum",
                    "invalid_request_error",
                    "context_length_exceeded",
                ),
            ),
            "401": (401, body(f"Incorrect API key provided: {SECRET}", "authentication_error")),
        }[fault]

    def _json(self, text: str, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
        if self.provider == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ]
            return {
                "id": "chatcmpl-x",
                "object": "chat.completion",
                "created": 1700000000,
                "model": "gpt-4o-mini",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if calls else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [
            {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls
        ]
        return {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5",
            "content": blocks,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def _sse(self, text: str, calls: list[tuple[str, str, str]]) -> Iterator[bytes]:
        pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
        if self.provider == "openai":

            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                data = {
                    "id": "chatcmpl-x",
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                return f"data: {json.dumps(data)}\n\n".encode()

            yield chunk({"role": "assistant", "content": ""})
            for piece in pieces:
                yield chunk({"content": piece})
            for index, (i, n, a) in enumerate(calls):
                yield chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": i,
                                "type": "function",
                                "function": {"name": n, "arguments": a},
                            }
                        ]
                    }
                )
            yield chunk({}, finish="tool_calls" if calls else "stop")
            yield b"data: [DONE]\n\n"
            return

        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

        start = self._json("", []) | {"content": [], "stop_reason": None}
        yield event("message_start", {"message": start})
        index = 0
        if text:
            yield event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
            for piece in pieces:
                yield event(
                    "content_block_delta",
                    {"index": 0, "delta": {"type": "text_delta", "text": piece}},
                )
            yield event("content_block_stop", {"index": 0})
            index = 1
        for i, n, a in calls:
            yield event(
                "content_block_start",
                {
                    "index": index,
                    "content_block": {"type": "tool_use", "id": i, "name": n, "input": {}},
                },
            )
            yield event(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": a}},
            )
            yield event("content_block_stop", {"index": index})
            index += 1
        yield event(
            "message_delta",
            {
                "delta": {
                    "stop_reason": "tool_use" if calls else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": 5},
            },
        )
        yield event("message_stop", {})
