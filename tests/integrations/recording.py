"""Record every request an OpenAI-compatible client sends, as the framework sent it."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx2

from contextfold.message import Msg, from_openai_messages


class RequestLog(httpx2.AsyncBaseTransport):
    """A transport that keeps each Chat Completions body, then forwards it.

    One shim for llama.cpp's server, applied after recording: frameworks send an
    assistant message that only calls tools with ``"content": null`` (as OpenAI allows),
    which llama-cpp-python's request model rejects; it is forwarded as ``""``.
    """

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(await request.aread())
            self.bodies.append(copy.deepcopy(body))
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx2.Request(
                request.method, request.url, headers=headers, content=json.dumps(body).encode()
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def client(self) -> httpx2.AsyncClient:
        """A client to hand the framework's OpenAI client."""
        return httpx2.AsyncClient(transport=self, timeout=600)

    def requests(self) -> list[list[Msg]]:
        """Every recorded request's messages, converted back to ``Msg``."""
        return [from_openai_messages(body["messages"]) for body in self.bodies]
