"""``clear_thinking_20251015``: thinking blocks of older assistant turns removed.

A turn is the assistant's work between two user messages that say something (a user
message holding only tool results continues the turn, as in Anthropic's tool loop, whose
thinking must stay). The newest ``keep`` turns that have thinking keep it. A message whose
only content is thinking keeps it (Anthropic rejects an empty assistant message).
"""

from __future__ import annotations

from typing import Any

from ._count import Tally
from ._edits import CLEAR_THINKING, ClearThinking

__all__ = ["clear_thinking"]

_THINKING = frozenset({"thinking", "redacted_thinking"})


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in _THINKING


def _turns(messages: list[Any]) -> list[list[int]]:
    """Indexes of the assistant messages of each turn, oldest turn first."""
    turns: list[list[int]] = [[]]
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            turns[-1].append(i)
            continue
        blocks = _blocks(message)
        only_results = bool(blocks) and all(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
        )
        if not only_results and turns[-1]:
            turns.append([])
    return [t for t in turns if t]


def clear_thinking(
    messages: list[Any], edit: ClearThinking, tally: Tally
) -> tuple[list[Any], dict[str, Any] | None]:
    """The messages with older turns' thinking removed, and the ``applied_edits`` entry
    (``None`` when nothing was removed). ``tally`` is updated when it applies."""
    if edit.keep is None:
        return messages, None
    with_thinking = [
        t for t in _turns(messages) if any(_is_thinking(b) for i in t for b in _blocks(messages[i]))
    ]
    older = with_thinking[: max(len(with_thinking) - edit.keep, 0)]
    out = list(messages)
    counts: dict[int, int] = {}
    cleared_turns = 0
    saved = 0
    for turn in older:
        cleared = False
        for i in turn:
            blocks = _blocks(messages[i])
            kept = [b for b in blocks if not _is_thinking(b)]
            if len(kept) == len(blocks) or not kept:
                continue
            out[i] = {**messages[i], "content": kept}
            counts[i] = tally.measure(out[i])
            saved += tally.count(i) - counts[i]
            cleared = True
        cleared_turns += cleared
    if not cleared_turns:
        return messages, None
    tally.update(counts)
    applied = {
        "type": CLEAR_THINKING,
        "cleared_thinking_turns": cleared_turns,
        "cleared_input_tokens": max(saved, 0),
    }
    return out, applied
