"""Provider prompt caches, simulated on requests as they would be sent.

A request body (the wire form the adapters send) is cut into the blocks the provider caches
by: the tool list, the system prompt, then every content block of every message (Anthropic)
or every message (OpenAI); for the embedded model, whose wire form is its ChatML prompt,
the tool turn, then every message's turn, then the generation prompt. A block's identity
is a hash chained over everything before it, so a prefix is cached exactly when every byte
of it was sent before. Each model applies its provider's published rules (``pricing.json``
names the sources):

- ``anthropic``: explicit ``cache_control`` breakpoints read from the body (at most 4); a
  hit is the longest cached prefix ending at a block boundary within ``lookback_blocks``
  before a breakpoint; the prefix up to the last breakpoint is written when it is at least
  ``min_cacheable_tokens`` long and was not read; entries live ``ttl_seconds`` from their
  last use. Changing ``tool_choice`` invalidates the message blocks (not tools and system).
- ``openai``: automatic; the longest previously sent prefix of at least
  ``min_cacheable_tokens`` is read, rounded down to ``increment_tokens``; writing is free.
- ``llama``: llama.cpp's KV cache of one slot (the embedded model in-process,
  ``LocalChatModel``; blocks from :func:`llama_blocks`): only the previous request's
  prefix is kept; the longest prefix of whole blocks shared with it is read, except the
  last token, which llama.cpp always evaluates again; no minimum, no lifetime, writing is
  free.
- ``none``: nothing is cached.

Token counts are the replay counter's counts of each block's text (plus a few tokens of
framing per message), so a request's total can differ slightly from the engine's exact
count of the same request; the simulator needs the split, not the last token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..message import (
    Msg,
    ToolChoice,
    ToolSpec,
    chatml_message,
    chatml_prompt,
    chatml_tools,
    tools_shown,
)
from ..token import TokenCounter

__all__ = [
    "AnthropicCache",
    "Block",
    "CacheKind",
    "CacheModel",
    "CacheUsage",
    "LlamaCache",
    "NoCache",
    "OpenAICache",
    "anthropic_blocks",
    "cache_model",
    "llama_blocks",
    "openai_blocks",
]

CacheKind = Literal["anthropic", "openai", "llama", "none"]

_MESSAGE_FRAMING = 4
"""Tokens a message adds beside its blocks' text (role, separators), attributed to its
first block."""


@dataclass(frozen=True)
class Block:
    """One cacheable unit of a request: its prefix identity and its tokens."""

    key: str
    """A hash of this block and everything before it in the request."""
    tokens: int
    breakpoint: bool = False
    """Whether the request marks a cache breakpoint after this block."""


@dataclass(frozen=True)
class CacheUsage:
    """How a request's input splits under a cache model."""

    uncached: int
    write: int
    read: int

    @property
    def total(self) -> int:
        return self.uncached + self.write + self.read


class CacheModel(Protocol):
    """A provider's prompt cache: feed it each request in order, get its input split."""

    kind: CacheKind

    def request(self, blocks: Sequence[Block], *, at: float) -> CacheUsage:
        """Account one request sent at time ``at`` (seconds); updates the cache."""
        ...


def _chain(previous: str, value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(f"{previous}\x00{data}".encode()).hexdigest()


def _text_of(value: Any) -> str:
    """The text a counter should count for a wire value (JSON for structures)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") == "text":
            return str(value.get("text", ""))
        if value.get("type") == "tool_result":
            return _text_of(value.get("content", ""))
        stripped = {k: v for k, v in value.items() if k != "cache_control"}
        return json.dumps(stripped, ensure_ascii=False, sort_keys=True)
    return json.dumps(value, ensure_ascii=False, default=str)


def _plain(value: Any) -> Any:
    """``value`` without its ``cache_control`` markers (they are not content)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _marked(value: Any) -> bool:
    return isinstance(value, dict) and "cache_control" in value


def anthropic_blocks(body: Mapping[str, Any], counter: TokenCounter) -> list[Block]:
    """The cache blocks of a Messages API body: tools, system, then message contents."""
    blocks: list[Block] = []
    key = ""

    def add(value: Any, tokens: int) -> None:
        nonlocal key
        key = _chain(key, _plain(value))
        blocks.append(Block(key, tokens, _marked(value)))

    for tool in body.get("tools") or []:
        add(tool, counter.count_text(_text_of(tool)))
    system = body.get("system")
    if isinstance(system, str) and system:
        add({"type": "text", "text": system}, counter.count_text(system))
    elif isinstance(system, list):
        for part in system:
            add(part, counter.count_text(_text_of(part)))
    # tool_choice is part of what the message blocks are cached under.
    key = _chain(key, {"tool_choice": body.get("tool_choice")})
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for i, part in enumerate(parts or []):
            framing = _MESSAGE_FRAMING if i == 0 else 0
            add({"role": message.get("role"), **part}, counter.count_text(_text_of(part)) + framing)
    return blocks


def openai_blocks(body: Mapping[str, Any], counter: TokenCounter) -> list[Block]:
    """The cache blocks of a Chat Completions body: the tool list, then each message."""
    blocks: list[Block] = []
    key = _chain("", body.get("tools") or [])
    if body.get("tools"):
        tools_tokens = counter.count_text(json.dumps(body["tools"], ensure_ascii=False))
        blocks.append(Block(key, tools_tokens))
    for message in body.get("messages") or []:
        key = _chain(key, message)
        text = _text_of(message.get("content") or "")
        calls = message.get("tool_calls") or []
        tokens = counter.count_text(text) + _MESSAGE_FRAMING
        tokens += sum(counter.count_text(json.dumps(c, ensure_ascii=False)) for c in calls)
        blocks.append(Block(key, tokens))
    return blocks


def llama_blocks(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec],
    tool_choice: ToolChoice | None,
    counter: TokenCounter,
) -> list[Block]:
    """The cache blocks of the embedded model's ChatML prompt: BOS and the tool turn, each
    message's turn, then the generation prompt (and a forced call's opening), each keyed
    by its text and sized by ``counter`` (exact with ``LlamaTokenCounter``)."""
    shown = tools if tools_shown(tools, tool_choice) else ()
    turns = [chatml_message(m) for m in messages]
    head = chatml_tools(shown) if shown else ""
    tail = chatml_prompt(messages, tools, tool_choice)[len(head) + sum(len(t) for t in turns) :]
    # What the counter adds to an empty prompt beside its text: BOS, at the very start.
    bos = max(counter.count_request(()) - counter.count_text(chatml_prompt(())), 0)
    blocks: list[Block] = []
    key = ""
    for text, extra in [(head, bos), *((t, 0) for t in turns), (tail, 0)]:
        key = _chain(key, text)
        blocks.append(Block(key, counter.count_text(text) + extra))
    return blocks


def _cumulative(blocks: Sequence[Block]) -> list[int]:
    total, out = 0, []
    for block in blocks:
        total += block.tokens
        out.append(total)
    return out


class AnthropicCache:
    """Explicit breakpoints, lookback, minimum length, writes and time to live."""

    kind: CacheKind = "anthropic"

    def __init__(
        self,
        *,
        ttl_seconds: float = 300,
        min_cacheable_tokens: int = 1024,
        max_breakpoints: int = 4,
        lookback_blocks: int = 20,
    ) -> None:
        self.ttl = ttl_seconds
        self.min_tokens = min_cacheable_tokens
        self.max_breakpoints = max_breakpoints
        self.lookback = lookback_blocks
        self._entries: dict[str, float] = {}  # prefix key -> expiry time

    def request(self, blocks: Sequence[Block], *, at: float) -> CacheUsage:
        cum = _cumulative(blocks)
        total = cum[-1] if cum else 0
        points = [i for i, b in enumerate(blocks) if b.breakpoint][: self.max_breakpoints]
        read_at = -1
        for point in points:
            for j in range(point, max(point - self.lookback, -1), -1):
                expiry = self._entries.get(blocks[j].key)
                if expiry is not None and expiry >= at:
                    read_at = max(read_at, j)
                    break
        read = cum[read_at] if read_at >= 0 else 0
        write = 0
        if points and points[-1] > read_at and cum[points[-1]] >= self.min_tokens:
            write = cum[points[-1]] - read
        for point in points:
            if cum[point] >= self.min_tokens:
                self._entries[blocks[point].key] = at + self.ttl
        if read_at >= 0:
            self._entries[blocks[read_at].key] = at + self.ttl
        return CacheUsage(uncached=total - read - write, write=write, read=read)


class OpenAICache:
    """Automatic prefix caching with a minimum length and an increment."""

    kind: CacheKind = "openai"

    def __init__(
        self,
        *,
        ttl_seconds: float = 300,
        min_cacheable_tokens: int = 1024,
        increment_tokens: int = 128,
    ) -> None:
        self.ttl = ttl_seconds
        self.min_tokens = min_cacheable_tokens
        self.increment = increment_tokens
        self._entries: dict[str, float] = {}

    def request(self, blocks: Sequence[Block], *, at: float) -> CacheUsage:
        cum = _cumulative(blocks)
        total = cum[-1] if cum else 0
        shared = 0
        for i, block in enumerate(blocks):
            expiry = self._entries.get(block.key)
            if expiry is None or expiry < at:
                break
            shared = cum[i]
        read = 0
        if shared >= self.min_tokens:
            read = self.min_tokens + (shared - self.min_tokens) // self.increment * self.increment
        if total >= self.min_tokens:
            for block in blocks:
                self._entries[block.key] = at + self.ttl
        return CacheUsage(uncached=total - read, write=0, read=read)


class LlamaCache:
    """One KV-cache slot: what the previous request shares with this one, in whole blocks.

    A request evicts every other prefix (a summary call in between breaks the agent's
    prefix), and however much is shared, the last token is evaluated again.
    """

    kind: CacheKind = "llama"

    def __init__(self) -> None:
        self._last: list[str] = []

    def request(self, blocks: Sequence[Block], *, at: float) -> CacheUsage:
        total = sum(b.tokens for b in blocks)
        shared = 0
        for key, block in zip(self._last, blocks, strict=False):
            if key != block.key:
                break
            shared += block.tokens
        self._last = [b.key for b in blocks]
        read = max(min(shared, total - 1), 0)
        return CacheUsage(uncached=total - read, write=0, read=read)


class NoCache:
    """Every input token at full price."""

    kind: CacheKind = "none"

    def request(self, blocks: Sequence[Block], *, at: float) -> CacheUsage:
        return CacheUsage(uncached=sum(b.tokens for b in blocks), write=0, read=0)


def cache_model(kind: CacheKind, rules: Mapping[str, Any]) -> CacheModel:
    """The cache model of ``kind`` with the rules of its ``pricing.json`` entry."""
    if kind == "anthropic":
        return AnthropicCache(
            ttl_seconds=float(rules.get("ttl_seconds", 300)),
            min_cacheable_tokens=int(rules.get("min_cacheable_tokens", 1024)),
            max_breakpoints=int(rules.get("max_breakpoints", 4)),
            lookback_blocks=int(rules.get("lookback_blocks", 20)),
        )
    if kind == "openai":
        return OpenAICache(
            ttl_seconds=float(rules.get("ttl_seconds", 300)),
            min_cacheable_tokens=int(rules.get("min_cacheable_tokens", 1024)),
            increment_tokens=int(rules.get("increment_tokens", 128)),
        )
    if kind == "llama":
        return LlamaCache()
    return NoCache()
