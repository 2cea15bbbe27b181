"""The token counter protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..message import Msg, ToolSpec

__all__ = ["TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way one model family sees them.

    ``count_message`` includes the per-message framing the provider adds, and
    ``count_request`` is exactly what a request of these messages and tools costs:
    ``sum(count_message) + count_tools + request_overhead``. Implementations cache
    each message's count on the message (``Msg.cache_tokens``) under ``name``.
    """

    name: str
    """Identifies the tokenizer and framing, e.g. ``"o200k_base/openai-chat"``."""

    exact: bool
    """True when counts equal the provider's; False for estimators."""

    def count_text(self, text: str) -> int:
        """Tokens in a bare string (no framing)."""
        ...

    def count_message(self, msg: Msg) -> int:
        """Tokens a message costs in a request, framing included; cached per message."""
        ...

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens the tool definitions add to a request (0 for no tools)."""
        ...

    def count_request(self, messages: Sequence[Msg], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens of a whole request: messages, tools and the reply priming."""
        ...
