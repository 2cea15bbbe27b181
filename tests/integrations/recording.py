"""Record every request an OpenAI-compatible client sends, as the server receives it."""

from __future__ import annotations

import json
from typing import Any

import httpx2

from contextfold.message import Msg, from_openai_messages


class RequestLog:
    """An ``httpx2`` client whose request hook keeps each Chat Completions body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def _hook(self, request: httpx2.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            self.bodies.append(json.loads(await request.aread()))

    def client(self) -> httpx2.AsyncClient:
        """A client to hand the framework's OpenAI client."""
        return httpx2.AsyncClient(event_hooks={"request": [self._hook]}, timeout=600)

    def requests(self) -> list[list[Msg]]:
        """Every recorded request's messages, converted back to ``Msg``."""
        return [from_openai_messages(body["messages"]) for body in self.bodies]
