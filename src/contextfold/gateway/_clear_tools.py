"""``clear_tool_uses_20250919``: the oldest tool results replaced by a placeholder.

A pure function of the request: the same history gives the same bytes. The tool use and
its result stay paired (ids, names and block types are kept; only the result's content,
and with ``clear_tool_inputs`` the use's input, are replaced). Tools named in
``exclude_tools`` are never cleared and do not count toward ``keep``. A result no longer
than the placeholder is left as it is (replacing it would grow the prompt); a use counts
as cleared when its result or its input was replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._count import Tally
from ._edits import CLEAR_TOOL_USES, ClearToolUses

__all__ = ["CLEARED_RESULT", "clear_tool_uses"]

CLEARED_RESULT = "[Tool result cleared to save context]"
"""What a cleared result's content becomes."""


@dataclass(frozen=True)
class _Use:
    message: int
    block: int
    id: str
    name: str


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _uses_and_results(messages: list[Any]) -> tuple[list[_Use], dict[str, list[tuple[int, int]]]]:
    uses: list[_Use] = []
    results: dict[str, list[tuple[int, int]]] = {}
    for i, message in enumerate(messages):
        for j, block in enumerate(_blocks(message)):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and message.get("role") == "assistant":
                uses.append(_Use(i, j, str(block.get("id")), str(block.get("name"))))
            elif block.get("type") == "tool_result" and message.get("role") == "user":
                results.setdefault(str(block.get("tool_use_id")), []).append((i, j))
    return uses, results


def _longer_than_placeholder(content: Any) -> bool:
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return len(text) > len(CLEARED_RESULT)


def clear_tool_uses(
    messages: list[Any], edit: ClearToolUses, tally: Tally
) -> tuple[list[Any], dict[str, Any] | None]:
    """The messages with the edit applied, and its ``applied_edits`` entry (``None`` and
    the messages unchanged when the trigger is not reached, nothing can be cleared, or
    less than ``clear_at_least`` would be saved). ``tally`` is updated when it applies."""
    uses, results = _uses_and_results(messages)
    reached = (
        len(uses) > edit.trigger_value
        if edit.trigger == "tool_uses"
        else tally.total > edit.trigger_value
    )
    if not reached:
        return messages, None
    clearable = [u for u in uses if u.name not in edit.exclude_tools and u.id in results]
    chosen = clearable[: max(len(clearable) - edit.keep, 0)]
    if not chosen:
        return messages, None
    edited: dict[int, list[Any]] = {}

    def block_list(i: int) -> list[Any]:
        if i not in edited:
            edited[i] = list(_blocks(messages[i]))
        return edited[i]

    cleared = 0
    for use in chosen:
        changed = False
        for i, j in results[use.id]:
            if _longer_than_placeholder(messages[i]["content"][j].get("content")):
                blocks = block_list(i)
                blocks[j] = {**blocks[j], "content": CLEARED_RESULT}
                changed = True
        call = messages[use.message]["content"][use.block]
        if edit.clears_input_of(use.name) and call.get("input") != {}:
            blocks = block_list(use.message)
            blocks[use.block] = {**blocks[use.block], "input": {}}
            changed = True
        cleared += changed
    if not cleared:
        return messages, None
    out = list(messages)
    counts: dict[int, int] = {}
    saved = 0
    for i, blocks in edited.items():
        out[i] = {**messages[i], "content": blocks}
        counts[i] = tally.measure(out[i])
        saved += tally.count(i) - counts[i]
    if edit.clear_at_least is not None and saved < edit.clear_at_least:
        return messages, None
    tally.update(counts)
    applied = {
        "type": CLEAR_TOOL_USES,
        "cleared_tool_uses": cleared,
        "cleared_input_tokens": saved,
    }
    return out, applied
