"""Making the context smaller without a summary.

Tool-result truncation (compress-context.zh, section 截断工具结果, Truncating tool results),
the pair-safe split point of a compression (section 自动压缩, Automatic compression: "tool
call / result pairs are kept together"), escalation when a compression leaves usage over
the trigger, and the image limit (section 限制图片数量, Limiting the number of images).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from .._logging import logger
from ..message import (
    ContentBlock,
    DataBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultContent,
    is_readback,
)
from ..token import TokenCounter
from ._cut import HeadTailCut
from ._redact_pieces import PIECE as OFF_LOOP_CHARS
from ._redact_pieces import redact_tool_result_off_loop
from ._types import TruncationEvent

__all__ = [
    "READBACK_HINT",
    "TRUNCATION_MARKER",
    "TRUNCATION_MARKER_WITH_REF",
    "Escalation",
    "ToolResultTruncator",
    "choose_split",
    "count_images",
    "escalate",
    "image_placeholder",
    "remove_images",
    "replace_content",
    "safe_boundaries",
    "truncate_results",
    "truncation_event",
    "truncation_marker",
]

# -- truncation -----------------------------------------------------------------------

TRUNCATION_MARKER = (
    "<<<TRUNCATED>>>\n"
    "<system-reminder>The remaining content has been omitted for limited context."
    "</system-reminder>"
)
"""The truncation marker of compress-context.zh, section 截断工具结果, byte for byte, when no
offloader holds the full output."""

TRUNCATION_MARKER_WITH_REF = (
    "<<<TRUNCATED>>>\n"
    "<system-reminder>The remaining content has been omitted for limited context. "
    "You can refer to the file in '{ref}' for the truncated content if needed."
    "</system-reminder>"
)
"""The same section's marker when the full output was offloaded; ``{ref}`` is its reference."""


READBACK_HINT = "[Read again with a larger offset, or a narrower Grep, to see the rest.]"
"""The line put before the marker of a cut read-back result."""


def truncation_marker(ref: str | None) -> str:
    """The exact marker, pointing at ``ref`` when there is one."""
    return TRUNCATION_MARKER if ref is None else TRUNCATION_MARKER_WITH_REF.replace("{ref}", ref)


def replace_content(msg: Msg, content: str | list[ContentBlock]) -> Msg:
    """``msg`` with ``content`` replaced; same id, so offloaded copies still match.

    ``Msg.model_copy(update=...)`` starts the copy with an empty token cache, so the new
    content is counted afresh.
    """
    return msg.model_copy(update={"content": content})


class ToolResultTruncator:
    """Cuts tool results over a token limit; the kept part ends with the truncation marker.

    ``keep="head_tail"`` (the default of :class:`ContextConfig`) keeps the start and the
    end, since errors and summaries usually come last; ``"head"`` keeps the start only, as
    AgentScope does. The marker counts against the limit.
    """

    def __init__(
        self,
        counter: TokenCounter,
        *,
        limit: int,
        keep: Literal["head_tail", "head"],
        readback: bool = True,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.counter = counter
        self.limit = limit
        self.keep = keep
        self.readback = readback
        """Whether the model can read the offloaded original; without, the marker is the
        one that names no file (the content was omitted, as far as the model can tell)."""
        self.redact = redact
        """``ContextConfig.redact``: the whole text passes it before the cut, so a secret
        the cut falls inside (no longer of a shape the redactor knows) is not kept in part."""

    def tokens(self, block: ToolResultBlock) -> int:
        """Tokens of the result's text."""
        return self.counter.count_text(block.text())

    def cut(
        self,
        block: ToolResultBlock,
        *,
        ref: str | None,
        limit: int | None = None,
        redacted: bool = False,
        tokens: int | None = None,
    ) -> ToolResultBlock:
        """A copy of ``block`` whose text fits ``limit`` tokens (marker included);
        ``redacted``: ``block`` has been through :attr:`redact` already; ``tokens``: its
        text's count, when the caller has it.

        Non-text parts (images) are kept; the image limit handles them. A read-back result
        (:func:`is_readback`) gets :data:`READBACK_HINT` on the line before the marker, so
        the model learns how to see the rest; the marker itself stays exact and last.
        """
        limit = self.limit if limit is None else limit
        marker = self.marker(ref, readback=is_readback(block), limit=limit)
        text = block.text() if self.redact is None or redacted else self.redact(block.text())
        text = self._cut_text(text, limit, marker, tokens)
        output: str | list[ToolResultContent]
        if isinstance(block.output, str):
            output = text
        else:
            data: list[ToolResultContent] = [b for b in block.output if isinstance(b, DataBlock)]
            output = [TextBlock(text=text), *data]
        return block.model_copy(update={"output": output})

    def marker(self, ref: str | None, *, readback: bool, limit: int) -> str:
        """The marker a result cut to ``limit`` ends with.

        A reference so long that the marker would take more than half the limit is left
        out (the truncation event still names it), so every limit the config accepts keeps
        the marker and some content within it.
        """
        marker = truncation_marker(ref if self.readback else None)
        if ref is not None and self.counter.count_text(marker) > limit // 2:
            marker = truncation_marker(None)
        hinted = f"{READBACK_HINT}\n{marker}"
        return hinted if readback and self.counter.count_text(hinted) <= limit // 2 else marker

    def _cut_text(self, text: str, limit: int, marker: str, tokens: int | None) -> str:
        if self.keep == "head":
            policy = HeadTailCut(end="\n" + marker)
        else:
            policy = HeadTailCut(
                head_share=Fraction(1, 2),
                marker=_omitted,
                marker_room=_OMITTED_ROOM,
                end="\n" + marker,
            )
        return policy.cut(self.counter, text, limit, tokens=tokens)


_OMITTED_ROOM = 16
"""Tokens set aside for the note that stands between a cut result's head and tail."""


def _omitted(tokens: int) -> str:
    return f"\n\n[... {tokens} tokens omitted ...]\n\n"


# -- the split point ---------------------------------------------------------------------


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


# -- escalation ------------------------------------------------------------------------

MIN_KEPT_RESULT = 256
"""Escalation never cuts a kept tool result below this many tokens."""

_NOTE_ROOM = 80
"""Tokens left for the note a shrink adds to the summary."""


@dataclass
class Escalation:
    """What escalation produced: the new context, and what it removed."""

    context: list[Msg]
    dropped: int = 0
    """Oldest kept messages dropped (offloaded) without a summary."""
    note: str | None = None
    """What to add to the summary about the dropped messages."""
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


async def truncate_results(
    msg: Msg,
    truncator: ToolResultTruncator,
    offload: Callable[[ToolResultBlock], Awaitable[str | None]],
) -> tuple[Msg, list[TruncationEvent]]:
    """``msg`` with each tool result over the truncator's limit cut (its whole original
    offloaded first, through ``offload``, which is given it already redacted), and an
    event per cut; ``msg`` itself when nothing was over."""
    events: list[TruncationEvent] = []
    blocks: list[ContentBlock] = []
    for block in msg.blocks():
        if isinstance(block, ToolResultBlock):
            # A long result is counted and cut in a worker thread: counting 20 MB took
            # 0.75 s. Once over the limit it is redacted once, here, and both the offload
            # (``offload`` must not redact again) and the cut take the redacted text.
            big = len(block.text()) > OFF_LOOP_CHARS
            tokens = (
                await asyncio.to_thread(truncator.tokens, block) if big else truncator.tokens(block)
            )
            if tokens > truncator.limit:
                whole = block
                if truncator.redact is not None:
                    whole = await redact_tool_result_off_loop(block, truncator.redact)
                ref = await offload(whole)
                cut_it = functools.partial(truncator.cut, whole, ref=ref, redacted=True)
                if whole is block:
                    cut_it = functools.partial(cut_it, tokens=tokens)
                cut = await asyncio.to_thread(cut_it) if big else cut_it()
                events.append(truncation_event(block, tokens, cut, truncator.counter, ref))
                blocks.append(cut)
                continue
        blocks.append(block)
    return (replace_content(msg, blocks) if events else msg), events


async def escalate(
    context: list[Msg],
    *,
    summary_tokens: int,
    fixed: int,
    target: int,
    counter: TokenCounter,
    truncator: ToolResultTruncator,
    offload_result: Callable[[ToolResultBlock], Awaitable[str | None]],
    offload_context: Callable[[list[Msg]], Awaitable[str | None]],
    keep_from: int | None = None,
) -> Escalation:
    """Bring ``fixed + summary + context`` to ``target`` tokens or below, if it can be done.

    Fixed order: first cut the largest tool results in the kept part (never below
    :data:`MIN_KEPT_RESULT`), then drop its oldest messages (pair-safe, offloaded, noted in
    the summary), never from ``keep_from`` on (the newest turn). ``context`` is not
    modified; a new list is returned.
    """
    context = list(context)
    count = counter.count_message
    total = fixed + summary_tokens + sum(count(m) for m in context)
    result = Escalation(context)
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
    budget = target - fixed - summary_tokens - _NOTE_ROOM
    k = choose_split([count(m) for m in context], safe_boundaries(context), max(budget, 0))
    if keep_from is not None:
        k = min(k, keep_from)
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
    result.note = (
        f"[{k} more recent message(s) were removed without a summary to fit the "
        f"context window.{where}]"
    )
    result.context = context[k:]
    result.dropped = k
    return result


# -- the image limit -------------------------------------------------------------------


def _is_image(block: object) -> bool:
    return isinstance(block, DataBlock) and block.kind == "image"


def count_images(msg: Msg) -> int:
    """Images in a message, including those inside tool results."""
    if isinstance(msg.content, str):
        return 0
    return sum(1 for b in msg.iter_data() if b.kind == "image")


def image_placeholder(*, limit: int, ref: str | None, readback: bool = True) -> str:
    """What stands in for a removed image (``readback``: the model can read ``ref``)."""
    if ref is not None and not readback:
        return (
            f"[An image was removed from the context: at most {limit} images are kept. "
            "It was saved outside this conversation.]"
        )
    if ref is None:
        return (
            f"[An image was removed from the context: at most {limit} images are kept, "
            "and no offloader was set, so it was discarded.]"
        )
    return (
        f"[An image was removed from the context: at most {limit} images are kept. "
        f"It was saved to '{ref}'; read it from there if you need it again.]"
    )


async def remove_images(
    msg: Msg,
    count: int,
    *,
    limit: int,
    persist: Callable[[DataBlock], Awaitable[str | None]],
    readback: bool = True,
) -> tuple[Msg, list[str]]:
    """A copy of ``msg`` without its first ``count`` images, and the offload references."""
    refs: list[str] = []
    left = count

    async def swap(block: DataBlock) -> TextBlock:
        nonlocal left
        left -= 1
        ref = await persist(block)
        if ref is not None:
            refs.append(ref)
        return TextBlock(text=image_placeholder(limit=limit, ref=ref, readback=readback))

    new_blocks: list[ContentBlock] = []
    for block in msg.blocks():
        if left > 0 and isinstance(block, DataBlock) and _is_image(block):
            new_blocks.append(await swap(block))
        elif left > 0 and isinstance(block, ToolResultBlock) and not isinstance(block.output, str):
            output: list[ToolResultContent] = []
            for part in block.output:
                if left > 0 and isinstance(part, DataBlock) and _is_image(part):
                    output.append(await swap(part))
                else:
                    output.append(part)
            new_blocks.append(block.model_copy(update={"output": output}))
        else:
            new_blocks.append(block)
    return replace_content(msg, new_blocks), refs
