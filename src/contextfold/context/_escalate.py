"""Escalation after a compression that left usage over the trigger: never compress twice.

Fixed order: first cut the largest tool results in the kept part, then drop its oldest
messages (pair-safe, offloaded, noted in the summary).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._logging import logger
from ..message import Msg, ToolResultBlock
from ..token import TokenCounter
from ._compose import ledger_of, summary_msg
from ._events import TruncationEvent
from ._replace import replace_content
from ._split import choose_split, safe_boundaries
from ._truncate import ToolResultTruncator

__all__ = ["Escalation", "escalate", "truncation_event"]

MIN_KEPT_RESULT = 256
"""Escalation never cuts a kept tool result below this many tokens."""

_NOTE_ROOM = 80
"""Tokens left for the note a shrink adds to the summary."""


@dataclass
class Escalation:
    """What escalation produced: the new context and summary, and what it removed."""

    context: list[Msg]
    summary: Msg
    dropped: int = 0
    truncations: list[TruncationEvent] = field(default_factory=list)


def truncation_event(
    block: ToolResultBlock,
    tokens: int,
    cut: ToolResultBlock,
    counter: TokenCounter,
    ref: str | None,
) -> TruncationEvent:
    """The event for one cut tool result."""
    return TruncationEvent(
        tool_call_id=block.id,
        tool_name=block.name,
        tokens_before=tokens,
        tokens_after=counter.count_text(cut.text()),
        offload_ref=ref,
    )


async def escalate(
    context: list[Msg],
    summary: Msg,
    *,
    fixed: int,
    target: int,
    counter: TokenCounter,
    truncator: ToolResultTruncator,
    offload_result: Callable[[ToolResultBlock], Awaitable[str | None]],
    offload_context: Callable[[list[Msg]], Awaitable[str | None]],
) -> Escalation:
    """Bring ``fixed + summary + context`` to ``target`` tokens or below, if it can be done.

    ``context`` is not modified; a new list is returned.
    """
    context = list(context)
    count = counter.count_message
    total = fixed + count(summary) + sum(count(m) for m in context)
    result = Escalation(context, summary)
    if total <= target:
        return result
    candidates = sorted(
        (
            (truncator.tokens(block), i, j)
            for i, msg in enumerate(context)
            for j, block in enumerate(msg.blocks())
            if isinstance(block, ToolResultBlock)
        ),
        reverse=True,
    )
    for tokens, i, j in candidates:
        excess = total - target
        if excess <= 0 or tokens <= MIN_KEPT_RESULT:
            break
        blocks = context[i].blocks()
        block = blocks[j]
        assert isinstance(block, ToolResultBlock)
        ref = await offload_result(block)
        cut = truncator.cut(block, ref=ref, limit=max(MIN_KEPT_RESULT, tokens - excess))
        blocks[j] = cut
        new = replace_content(context[i], blocks)
        total += count(new) - count(context[i])
        context[i] = new
        result.truncations.append(truncation_event(block, tokens, cut, counter, ref))
    if total <= target:
        return result
    budget = target - fixed - count(summary) - _NOTE_ROOM
    k = choose_split([count(m) for m in context], safe_boundaries(context), max(budget, 0))
    if k == 0:
        logger.warning(
            "context still over the trigger after compression (%d > %d tokens): the "
            "system prompt, tools or a pending tool exchange do not fit",
            total,
            target,
        )
        return result
    ref = await offload_context(context[:k])
    where = f" They are saved in '{ref}'." if ref else " They were discarded."
    note = (
        f"\n\n[{k} more recent message(s) were removed without a summary to fit the "
        f"context window.{where}]"
    )
    fields: Any = summary.metadata.get("fields")
    result.summary = summary_msg(
        summary.text + note, ledger_of(summary), fields if isinstance(fields, dict) else None
    )
    result.context = context[k:]
    result.dropped = k
    return result
