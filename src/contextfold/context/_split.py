"""Where to split the context: pair-safe boundaries, found in one linear pass."""

from __future__ import annotations

from collections.abc import Sequence

from ..message import Msg, ToolCallBlock, ToolResultBlock

__all__ = ["choose_split", "safe_boundaries"]


def safe_boundaries(msgs: Sequence[Msg]) -> list[bool]:
    """``safe[i]`` is True when cutting before ``msgs[i]`` separates no call from its result.

    A boundary is safe when no tool call before it is still open (its result comes later or
    has not arrived yet). Thinking blocks live in the message of their calls, so they move
    with them. ``len(safe) == len(msgs) + 1``; the last entry is False while a call waits.
    """
    safe = [True] * (len(msgs) + 1)
    open_calls: set[str] = set()
    for i, msg in enumerate(msgs):
        safe[i] = not open_calls
        if isinstance(msg.content, str):
            continue
        for block in msg.content:
            if isinstance(block, ToolCallBlock):
                open_calls.add(block.id)
            elif isinstance(block, ToolResultBlock):
                open_calls.discard(block.id)
    safe[len(msgs)] = not open_calls
    return safe


def choose_split(tokens: Sequence[int], safe: Sequence[bool], budget: int) -> int:
    """The smallest safe ``k`` whose suffix ``tokens[k:]`` fits ``budget``.

    Messages before ``k`` are compressed, the rest kept. When no safe boundary leaves a
    suffix within budget (a call still waiting for a huge result), the last safe boundary
    is returned, keeping as little as pairing allows. Linear in ``len(tokens)``.
    """
    n = len(tokens)
    suffix = 0
    best: int | None = None
    for i in range(n, -1, -1):
        if i < n:
            suffix += tokens[i]
        if suffix > budget:
            break
        if safe[i]:
            best = i
    if best is not None:
        return best
    return next((i for i in range(n, 0, -1) if safe[i]), 0)
