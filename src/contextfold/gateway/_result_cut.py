"""Tool results cut to their head and tail in transparent mode: a pure function of their
content, so a result resent every turn is forwarded with the same bytes every time (only
new content is ever transformed), its whole text collected for offload when asked."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..token import TokenCounter, head_within, tail_within
from ._retrieval import Offload, item_id, offload_note

__all__ = ["TRUNCATION_NOTE", "ResultCut", "cut_message"]

TRUNCATION_NOTE = "\n\n[... {omitted} tokens of this tool result omitted by the gateway ...]\n\n"
"""What stands in the middle of a tool result cut to ``tool_result_limit``."""


def _cut_text(text: str, limit: int, counter: TokenCounter, offload: bool) -> str:
    """``text`` within about ``limit`` tokens: its head and tail around a note (naming
    the offloaded item with ``offload``)."""
    if len(text) * 3 // 2 <= limit:  # no counter gives more than 1.5 tokens a character
        return text
    return _cut_counted(text, limit, counter, offload)  # type: ignore[arg-type]  # counters hash by id


@lru_cache(maxsize=4096)
def _cut_counted(text: str, limit: int, counter: TokenCounter, offload: bool) -> str:
    """The cut, once per content: an agent resends each long result every turn."""
    total = counter.count_text(text)
    if total <= limit:
        return text
    if not offload:
        head = head_within(counter, text, limit * 2 // 3)
        tail = tail_within(counter, text, limit // 3 - 16)
        omitted = total - counter.count_text(head) - counter.count_text(tail)
        return head + TRUNCATION_NOTE.format(omitted=omitted) + tail
    # The offload note names the item and the offsets: its room is taken from the budget.
    widest = len(str(max(len(text), total)))
    room = counter.count_text(offload_note(text, "", "", 10**widest - 1).replace("0", "9"))
    budget = max(limit - room, 2)
    head = head_within(counter, text, budget * 2 // 3)
    tail = tail_within(counter, text, budget - budget * 2 // 3)
    omitted = total - counter.count_text(head) - counter.count_text(tail)
    return head + offload_note(text, head, tail, omitted) + tail


@dataclass(frozen=True)
class ResultCut:
    """How one request's tool results are cut: over ``limit`` tokens (``None``: never),
    and whether the cut parts are offloaded (collected in ``offloads``)."""

    limit: int | None
    counter: TokenCounter
    offload: bool
    offloads: dict[str, Offload]

    def text(self, text: str) -> str:
        assert self.limit is not None
        cut = _cut_text(text, self.limit, self.counter, self.offload)
        if self.offload and cut is not text:
            found = item_id(text)
            self.offloads.setdefault(found, Offload(found, text))
        return cut


def _cut_part(part: Any, cut: ResultCut) -> Any:
    if not isinstance(part, dict) or part.get("type") != "text":
        return part
    text = part.get("text")
    if not isinstance(text, str):
        return part
    done = cut.text(text)
    return part if done is text else {**part, "text": done}


def _cut_result(block: Any, cut: ResultCut) -> Any:
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return block
    content = block.get("content")
    if isinstance(content, str):
        done = cut.text(content)
        return block if done is content else {**block, "content": done}
    if isinstance(content, list):
        parts = [_cut_part(p, cut) for p in content]
        if any(a is not b for a, b in zip(parts, content, strict=True)):
            return {**block, "content": parts}
    return block


def cut_message(message: Any, cut: ResultCut) -> Any:
    """``message`` as forwarded: a pure function of its content (same bytes each turn)."""
    content = message.get("content") if isinstance(message, dict) else None
    if cut.limit is None or not isinstance(content, list):
        return message
    blocks = [_cut_result(b, cut) for b in content]
    if all(a is b for a, b in zip(blocks, content, strict=True)):
        return message
    return {**message, "content": blocks}
