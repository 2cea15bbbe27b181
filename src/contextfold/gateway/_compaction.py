"""``compact_20260112`` emulated: earlier compaction blocks applied, and a new summary
written by a library :class:`~contextfold.context.Summarizer` when the trigger is passed.

Anthropic's rules, as the gateway keeps them: every block before the last compaction
block is ignored (its ``content`` stands for them); a block whose ``content`` is null is
a no-op. An upstream that knows no compaction block gets the summary as the first user
message's text instead.

The summary covers the whole prompt (so the next request, which drops everything before
the block, loses nothing); the request sent now keeps its newest turn word for word
after the summary (the last user message, with the assistant message whose tool calls
it answers), so the model answers the question it was asked. A summarizer that fails
gives Anthropic's failed compaction: a block whose ``content`` is null, the request sent
as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._logging import logger
from ..context import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    Summarizer,
    SummaryRequest,
    SummarySchema,
    render_summary,
    safe_format,
)
from ..message import Usage
from ._count import message_of
from ._edits import Compact

__all__ = ["SUMMARY_PREFIX", "CompactionDone", "PendingCompaction", "apply_blocks", "compact"]

SUMMARY_PREFIX = "This conversation continues from an earlier part that was compacted. Summary:\n\n"
"""What precedes a compaction block's summary in the user message the upstream receives."""


@dataclass(frozen=True)
class PendingCompaction:
    """A compaction the trigger asks for: the edit and the messages it summarizes."""

    edit: Compact
    messages: tuple[Any, ...]


@dataclass(frozen=True)
class CompactionDone:
    """A written compaction: the block for the client and the messages for the upstream."""

    block: dict[str, Any]
    messages: list[Any]
    iteration: dict[str, Any]
    """The ``usage.iterations`` entry of the summary (zeros when no model was called)."""


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _is_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "compaction"


def _summary_text(block: Any) -> str | None:
    content = block.get("content")
    return content if isinstance(content, str) and content else None


def _with_summary(summary: str, rest: list[Any]) -> list[Any]:
    """``rest`` after a user message holding the summary (merged into ``rest``'s first
    message when that is a user message, as two user messages in a row are not valid)."""
    text = {"type": "text", "text": SUMMARY_PREFIX + summary}
    if rest and isinstance(rest[0], dict) and rest[0].get("role") == "user":
        first = rest[0]
        content = first.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _blocks(first)
        return [{**first, "content": [text, *blocks]}, *rest[1:]]
    return [{"role": "user", "content": [text]}, *rest]


def apply_blocks(messages: list[Any]) -> list[Any]:
    """The messages as the upstream should see them: everything before the last
    compaction block with content replaced by its summary; null blocks dropped."""
    if not any(_is_block(b) for m in messages for b in _blocks(m)):
        return messages
    last: tuple[int, int] | None = None
    for i, message in enumerate(messages):
        for j, block in enumerate(_blocks(message)):
            if _is_block(block) and _summary_text(block) is not None:
                last = (i, j)
    summary = None
    if last is not None:
        i, j = last
        summary = _summary_text(messages[i]["content"][j])
        after = messages[i]["content"][j + 1 :]
        messages = [{**messages[i], "content": after}, *messages[i + 1 :]]
    out: list[Any] = []
    for message in messages:
        blocks = _blocks(message)
        if any(_is_block(b) for b in blocks):
            kept = [b for b in blocks if not _is_block(b)]
            if not kept:
                continue
            message = {**message, "content": kept}
        out.append(message)
    return _with_summary(summary, out) if summary is not None else out


def _iteration(usage: Usage | None) -> dict[str, Any]:
    return {
        "type": "compaction",
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cache_read_input_tokens": usage.cache_read_tokens if usage else 0,
        "cache_creation_input_tokens": usage.cache_write_tokens if usage else 0,
    }


def _newest_turn(messages: list[Any]) -> int:
    """Where the newest turn starts: the last message, and the assistant message before
    it when the last one answers its tool calls."""
    if not messages:
        return 0
    k = len(messages) - 1
    answers = any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in _blocks(messages[k])
    )
    before = messages[k - 1] if k > 0 else None
    if answers and isinstance(before, dict) and before.get("role") == "assistant":
        k -= 1
    return max(k, 0)


async def compact(
    pending: PendingCompaction,
    summarizer: Summarizer,
    *,
    spent: Callable[[], Usage] | None = None,
) -> CompactionDone:
    """Write the summary of ``pending.messages`` and build what goes upstream now.
    ``spent`` gives what the summarizer's model calls cost when its result does not say."""
    messages = list(pending.messages)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    instructions = pending.edit.instructions or safe_format(
        DEFAULT_COMPRESSION_PROMPT, {"current_time": now}
    )
    request = SummaryRequest(
        messages=[message_of(m) for m in messages],
        previous=None,
        instructions=instructions,
        hints=(),
        schema=SummarySchema.model_json_schema(),
    )
    try:
        result = await summarizer.summarize(request)
    except Exception as exc:  # Anthropic's failed compaction: a null block, a no-op
        logger.warning("gateway: compaction summary failed (%s)", type(exc).__name__)
        failed = {"type": "compaction", "content": None, "encrypted_content": None}
        return CompactionDone(failed, messages, _iteration(spent() if spent else None))
    summary = render_summary(DEFAULT_SUMMARY_TEMPLATE, result.fields)
    usage = result.usage if result.usage is not None else spent() if spent else None
    iteration = _iteration(usage)
    block = {"type": "compaction", "content": summary, "encrypted_content": None}
    upstream = _with_summary(summary, messages[_newest_turn(messages) :])
    return CompactionDone(block, upstream, iteration)
