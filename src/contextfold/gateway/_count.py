"""Counting an Anthropic request body with the library's counters, message by message.

The default counter is :class:`~contextfold.token.AnthropicEstimator` (o200k_base x 1.4
plus Anthropic's documented tool and image costs; it errs high: Claude's tokenizer is
not public). Each message is counted once; an edit recounts only the messages it changed.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .._exceptions import MessageFormatError
from ..message import Msg, ToolSpec, from_anthropic_messages
from ..token import TokenCounter

__all__ = ["CountCache", "Tally", "fixed_tokens", "message_of", "tools_of"]


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


class CountCache:
    """Token counts of messages by content, shared by the requests of every session: an
    agent resends its whole history each turn, and only what is new gets counted.

    Keyed by the counter's name and a SHA-256 of the message's JSON (no content is kept);
    at most ``size`` entries, the least recently used dropped first.
    """

    def __init__(self, size: int = 200_000) -> None:
        self.size = size
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _cached(self, counter: TokenCounter, kind: str, raw: Any, count: Any) -> int:
        name = str(getattr(counter, "name", type(counter).__name__))
        text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        key = hashlib.sha256(f"{name}\0{kind}\0{text}".encode()).digest()
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        value: int = count()
        self._counts[key] = value
        if len(self._counts) > self.size:
            self._counts.popitem(last=False)
        return value

    def count(
        self, counter: TokenCounter, raw: Any, to_msg: Callable[[Any], Msg] = message_of
    ) -> int:
        """The tokens of one wire message, counted once per content (``to_msg`` reads
        it: an Anthropic message by default)."""
        kind = "message" if to_msg is message_of else f"message:{to_msg.__qualname__}"
        return self._cached(counter, kind, raw, lambda: counter.count_message(to_msg(raw)))

    def fixed(self, counter: TokenCounter, system: Any, tools: Any) -> int:
        """The tokens of a request's system prompt, tools and framing, once per content."""
        return self._cached(
            counter, "fixed", [system, tools], lambda: fixed_tokens(counter, system, tools)
        )


def fixed_tokens(counter: TokenCounter, system: Any, tools: Any) -> int:
    """The tokens of a request besides its messages: system prompt, tools, framing."""
    msg = _system_of(system)
    return counter.count_request([msg] if msg is not None else [], tools_of(tools))


class Tally:
    """The token count of one request, kept per message and counted lazily: a request
    whose edits need no count (``clear_thinking`` with ``keep: "all"``, what Claude Code
    sends) is never counted, and an edit recounts only the messages it changed."""

    def __init__(
        self,
        counter: TokenCounter,
        body: dict[str, Any],
        cache: CountCache | None = None,
        *,
        base: tuple[int, int] | None = None,
        to_msg: Callable[[Any], Msg] = message_of,
    ) -> None:
        self.counter = counter
        self.cache = cache
        self.to_msg = to_msg
        self._body = body
        self._base = base
        """``(k, tokens of messages[:k])`` when known without counting them (the
        conversation's previous request showed the same ``k`` messages)."""
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
            system, tools = self._body.get("system"), self._body.get("tools")
            self._fixed = (
                self.cache.fixed(self.counter, system, tools)
                if self.cache is not None
                else fixed_tokens(self.counter, system, tools)
            )
        return self._fixed + self.messages_before(len(self._raw))

    def messages_before(self, k: int) -> int:
        """Tokens of ``messages[:k]``."""
        if self._base is not None:
            known, tokens = self._base
            if k >= known:
                return tokens + sum(self.count(i) for i in range(known, k))
            if known - k < k:  # fewer to count back from the known prefix than forward
                return tokens - sum(self.count(i) for i in range(k, known))
        return sum(self.count(i) for i in range(k))

    def measure(self, raw: Any) -> int:
        """Tokens of one message ``raw`` (not yet part of the tally)."""
        if self.cache is not None:
            if self.to_msg is message_of:
                return self.cache.count(self.counter, raw)
            return self.cache.count(self.counter, raw, self.to_msg)
        return self.counter.count_message(self.to_msg(raw))

    def update(self, counts: dict[int, int]) -> None:
        """Set the counts of the messages an applied edit replaced."""
        self._counts.update(counts)
