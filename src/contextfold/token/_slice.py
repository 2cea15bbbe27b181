"""Cutting text to a token budget, with any counter."""

from __future__ import annotations

from ._protocol import TokenCounter, TokenSlicer

__all__ = ["head_within", "tail_within"]


def head_within(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` found within ``max_tokens`` tokens of ``counter``."""
    if isinstance(counter, TokenSlicer):
        return counter.head(text, max_tokens)
    return _search(counter, text, max_tokens, from_end=False)


def tail_within(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest suffix of ``text`` found within ``max_tokens`` tokens of ``counter``."""
    if isinstance(counter, TokenSlicer):
        return counter.tail(text, max_tokens)
    return _search(counter, text, max_tokens, from_end=True)


def _search(counter: TokenCounter, text: str, max_tokens: int, *, from_end: bool) -> str:
    # For counters that cannot slice: binary search on a window that grows geometrically,
    # so a 2 MB text costs a few counts of ~max_tokens each, not of 2 MB.
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
