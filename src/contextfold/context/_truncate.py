"""Tool-result truncation: keep a part within the limit, marker included."""

from __future__ import annotations

from typing import Literal

from ..message import DataBlock, TextBlock, ToolResultBlock, ToolResultContent
from ..token import TokenCounter

__all__ = [
    "READBACK_HINT",
    "READBACK_KEY",
    "TRUNCATION_MARKER",
    "TRUNCATION_MARKER_WITH_REF",
    "ToolResultTruncator",
    "head_within",
    "is_readback",
    "tail_within",
    "truncation_marker",
]

TRUNCATION_MARKER = (
    "<<<TRUNCATED>>>\n"
    "<system-reminder>The remaining content has been omitted for limited context."
    "</system-reminder>"
)
"""The spec's marker when no offloader holds the full output."""

TRUNCATION_MARKER_WITH_REF = (
    "<<<TRUNCATED>>>\n"
    "<system-reminder>The remaining content has been omitted for limited context. "
    "You can refer to the file in '{ref}' for the truncated content if needed."
    "</system-reminder>"
)
"""The spec's marker when the full output was offloaded; ``{ref}`` is its reference."""


READBACK_KEY = "contextfold_readback"
"""``ToolResultBlock.metadata`` key: true on results of the agent's read-back tools.

Such a result already shows workspace content, so when it is over the limit it is cut
without being offloaded again (the marker has no path; :data:`READBACK_HINT` precedes it).
"""

READBACK_HINT = "[Read again with a larger offset, or a narrower Grep, to see the rest.]"
"""The line put before the marker of a cut read-back result."""


def is_readback(block: ToolResultBlock) -> bool:
    """Whether ``block`` is marked as a read-back result (see :data:`READBACK_KEY`)."""
    return block.metadata.get(READBACK_KEY) is True


def truncation_marker(ref: str | None) -> str:
    """The exact spec marker, pointing at ``ref`` when there is one."""
    return TRUNCATION_MARKER if ref is None else TRUNCATION_MARKER_WITH_REF.replace("{ref}", ref)


def head_within(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (exact, by the counter)."""
    head = getattr(counter, "head", None)
    if callable(head):
        return str(head(text, max_tokens))
    return _search(counter, text, max_tokens, from_end=False)


def tail_within(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest suffix of ``text`` within ``max_tokens`` (exact, by the counter)."""
    tail = getattr(counter, "tail", None)
    if callable(tail):
        return str(tail(text, max_tokens))
    return _search(counter, text, max_tokens, from_end=True)


def _search(counter: TokenCounter, text: str, max_tokens: int, *, from_end: bool) -> str:
    # Fallback for counters without slicing: binary search on a window that grows
    # geometrically, so a 2 MB text costs a few counts of ~max_tokens each, not of 2 MB.
    if max_tokens <= 0 or not text:
        return ""

    def piece(chars: int) -> str:
        return text[len(text) - chars :] if from_end else text[:chars]

    hi = min(len(text), max_tokens * 8 + 16)
    while hi < len(text) and counter.count_text(piece(hi)) <= max_tokens:
        hi = min(len(text), hi * 2)
    if counter.count_text(piece(hi)) <= max_tokens:
        return piece(hi)
    lo = 0
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if counter.count_text(piece(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return piece(lo)


class ToolResultTruncator:
    """Cuts tool results over a token limit; the kept part ends with the spec's marker.

    ``keep="head_tail"`` (the default of :class:`ContextConfig`) keeps the start and the
    end, since errors and summaries usually come last; ``"head"`` keeps the start only, as
    the reference does. The marker counts against the limit.
    """

    def __init__(
        self, counter: TokenCounter, *, limit: int, keep: Literal["head_tail", "head"]
    ) -> None:
        self.counter = counter
        self.limit = limit
        self.keep = keep

    def tokens(self, block: ToolResultBlock) -> int:
        """Tokens of the result's text."""
        return self.counter.count_text(block.text())

    def cut(
        self, block: ToolResultBlock, *, ref: str | None, limit: int | None = None
    ) -> ToolResultBlock:
        """A copy of ``block`` whose text fits ``limit`` tokens (marker included).

        Non-text parts (images) are kept; the image limit handles them. A read-back result
        (:func:`is_readback`) gets :data:`READBACK_HINT` on the line before the marker, so
        the model learns how to see the rest; the marker itself stays exact and last.
        """
        limit = self.limit if limit is None else limit
        marker = truncation_marker(ref)
        if is_readback(block):
            marker = f"{READBACK_HINT}\n{marker}"
        text = self._cut_text(block.text(), limit, marker)
        output: str | list[ToolResultContent]
        if isinstance(block.output, str):
            output = text
        else:
            data: list[ToolResultContent] = [b for b in block.output if isinstance(b, DataBlock)]
            output = [TextBlock(text=text), *data]
        return block.model_copy(update={"output": output})

    def _cut_text(self, text: str, limit: int, marker: str) -> str:
        count = self.counter.count_text
        total = count(text)
        budget = limit - count("\n" + marker)
        for _ in range(4):
            if budget <= 0:
                return marker
            body = self._body(text, budget, total)
            result = f"{body}\n{marker}" if body else marker
            over = count(result) - limit
            if over <= 0:
                return result
            # Tokens can merge across the joins; shrink by the overshoot and retry.
            budget -= over
        return marker

    def _body(self, text: str, budget: int, total: int) -> str:
        if self.keep == "head":
            return head_within(self.counter, text, budget)
        note_budget = 16
        half = (budget - note_budget) // 2
        if half <= 0:
            return head_within(self.counter, text, budget)
        head = head_within(self.counter, text, half)
        tail = tail_within(self.counter, text[len(head) :], half)
        omitted = max(total - self.counter.count_text(head) - self.counter.count_text(tail), 0)
        return f"{head}\n\n[... {omitted} tokens omitted ...]\n\n{tail}"
