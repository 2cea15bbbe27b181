"""Counting an Anthropic request body with the library's counters, message by message.

The default counter is :class:`~contextfold.token.AnthropicEstimator` (o200k_base x 1.4
plus Anthropic's documented tool and image costs; it errs high: Claude's tokenizer is
not public). Each message is counted once; an edit recounts only the messages it changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._exceptions import MessageFormatError
from ..message import Msg, ToolSpec, from_anthropic_messages
from ..token import TokenCounter

__all__ = ["Tally", "message_of", "tools_of"]


def message_of(raw: Any) -> Msg:
    """``raw`` (one wire message) as a ``Msg`` to count; content the decoder does not know
    (server tool blocks, compaction blocks) is counted as its JSON text."""
    try:
        return from_anthropic_messages([raw], strict=False)[0]
    except MessageFormatError:
        role = raw.get("role") if isinstance(raw, dict) else None
        content = raw.get("content") if isinstance(raw, dict) else raw
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        kind = "assistant" if role == "assistant" else "user"
        return Msg(kind, text, kind)


def _system_of(system: Any) -> Msg | None:
    if system is None:
        return None
    try:
        return from_anthropic_messages([], system=system, strict=False)[0]
    except MessageFormatError:
        return Msg("system", json.dumps(system, ensure_ascii=False), "system")


def tools_of(tools: Any) -> list[ToolSpec]:
    """The request's tools as ``ToolSpec``; a server tool (no ``input_schema``) is
    counted by its JSON."""
    if not isinstance(tools, list):
        return []
    out: list[ToolSpec] = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("input_schema"), dict):
            out.append(
                ToolSpec(
                    name=str(tool.get("name", "")),
                    description=str(tool.get("description", "")),
                    parameters=tool["input_schema"],
                )
            )
        else:
            out.append(ToolSpec(name="", description=json.dumps(tool, ensure_ascii=False)))
    return out


class Tally:
    """The token count of one request, kept per message and counted lazily: a request
    whose edits need no count (``clear_thinking`` with ``keep: "all"``, what Claude Code
    sends) is never counted, and an edit recounts only the messages it changed."""

    def __init__(self, counter: TokenCounter, body: dict[str, Any]) -> None:
        self.counter = counter
        self._body = body
        messages = body.get("messages")
        self._raw: Sequence[Any] = messages if isinstance(messages, list) else []
        self._fixed: int | None = None
        self._counts: dict[int, int] = {}

    def count(self, index: int) -> int:
        """Tokens of message ``index`` as it stands."""
        if index not in self._counts:
            self._counts[index] = self.measure(self._raw[index])
        return self._counts[index]

    @property
    def total(self) -> int:
        """Tokens of the whole request as it stands."""
        if self._fixed is None:
            system = _system_of(self._body.get("system"))
            self._fixed = self.counter.count_request(
                [system] if system is not None else [], tools_of(self._body.get("tools"))
            )
        return self._fixed + sum(self.count(i) for i in range(len(self._raw)))

    def measure(self, raw: Any) -> int:
        """Tokens of one message ``raw`` (not yet part of the tally)."""
        return self.counter.count_message(message_of(raw))

    def update(self, counts: dict[int, int]) -> None:
        """Set the counts of the messages an applied edit replaced."""
        self._counts.update(counts)
