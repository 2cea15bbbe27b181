"""The token counter protocols."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..message import Msg, ToolSpec, Usage

__all__ = ["TokenCounter", "TokenSlicer", "UsageCalibration"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way one model family sees them.

    ``count_message`` includes the per-message framing the provider adds, and
    ``count_request`` is exactly what a request of these messages and tools costs:
    ``sum(count_message) + count_tools + count_request([], ())``. That identity lets a
    running total be kept per message. Implementations cache each message's count on the
    message (``Msg.cache_tokens``) under ``name``.
    """

    name: str
    """Identifies the tokenizer and framing, e.g. ``"openai-chat/o200k_base"``; the cache key."""

    exact: bool
    """True when text counts equal the provider tokenizer's; False for estimators."""

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


@runtime_checkable
class TokenSlicer(Protocol):
    """Cuts text to a token budget, exactly: ``count_text(head(t, n)) <= n``.

    Counters that can do so implement this too (check with ``isinstance``). Cuts land on
    character boundaries, so a multi-token character is dropped whole rather than split.
    """

    def head(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` found within ``max_tokens`` tokens."""
        ...

    def tail(self, text: str, max_tokens: int) -> str:
        """The longest suffix of ``text`` found within ``max_tokens`` tokens."""
        ...


@runtime_checkable
class UsageCalibration(Protocol):
    """A counter that learns from the input tokens the provider reported.

    Counters without the provider's tokenizer (:class:`CalibratedCounter`) implement this
    as well as :class:`TokenCounter`: models call :meth:`observe` after every answer, and
    the context engine adds :meth:`correction` to its running total. Exact counters do not
    implement it and cost nothing.
    """

    def observe(
        self, messages: Sequence[Msg], tools: Sequence[ToolSpec], usage: Usage | int
    ) -> None:
        """Learn from a request whose prompt the provider reported as ``usage``."""
        ...

    def correction(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec] = (),
        *,
        estimate: int | None = None,
    ) -> int:
        """What to add to ``count_request(messages, tools)`` (0 when nothing is known);
        ``estimate`` is that count when the caller has it, which spares a recount."""
        ...
