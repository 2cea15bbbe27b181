"""Exact counters for OpenAI's o200k_base and cl100k_base, offline."""

from __future__ import annotations

import json
from collections.abc import Sequence

import toktok

from ..message import Msg, ToolSpec

__all__ = ["OpenAITokenCounter"]


class OpenAITokenCounter:
    """Counts Chat Completions requests for an OpenAI encoding (provisional framing)."""

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding
        self.name = f"{encoding}/openai-chat"

    def count_text(self, text: str) -> int:
        return int(toktok.batch_count([text], self.encoding)[0])

    def count_message(self, msg: Msg) -> int:
        cached = msg.cached_tokens(self.name)
        if cached is not None:
            return cached
        count = 3 + self.count_text(msg.role) + self.count_text(
            msg.content if isinstance(msg.content, str) else msg.model_dump_json(include={"content"})
        )
        msg.cache_tokens(self.name, count)
        return count

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        if not tools:
            return 0
        return self.count_text(json.dumps([t.model_dump() for t in tools]))

    def count_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        return sum(self.count_message(m) for m in messages) + self.count_tools(tools) + 3
