"""Named contracts between packages: metadata markers and the runtime-note tag.

The engine marks the messages and blocks it creates (the summary, the usage note, results
of the read-back tools) in their ``metadata``; counters, adapters, the demo and replay
recognise them. These names are the one place those strings are written.

Everything the runtime adds to what the model reads (usage notes, summaries, fallback
notes, hints, the compression instruction) is wrapped in one tag, ``<system-reminder>``,
the tag of the truncation marker in compress-context.zh, section 截断工具结果
(Truncating tool results).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from ._blocks import ToolResultBlock
from ._msg import Msg

__all__ = [
    "CACHE_POINT_KEY",
    "MARKER_KEY",
    "MASKED_KEY",
    "READBACK_KEY",
    "RUNTIME_TAG",
    "SUMMARY_TOOL",
    "Marker",
    "is_readback",
    "is_runtime_note",
    "is_summary_request",
    "marker_of",
    "runtime_note",
]

MARKER_KEY = "contextfold"
"""``Msg.metadata`` key whose value is a :class:`Marker`: what the engine made the message."""

READBACK_KEY = "contextfold_readback"
"""``ToolResultBlock.metadata`` key: true on results of the agent's read-back tools.

Such a result already shows workspace content, so when it is over the limit it is cut
without being offloaded again."""

MASKED_KEY = "contextfold_masked"
"""``ToolResultBlock.metadata`` key: the reference of the whole output, on a result the engine
replaced by a one-line placeholder (observation masking)."""

CACHE_POINT_KEY = "contextfold_cache_point"
"""``Msg.metadata`` key: true on the last message a change left as it was (the one before
the first masked result), where a prompt-cache breakpoint keeps the unchanged prefix
readable."""

SUMMARY_TOOL = "write_summary"
"""Name of the structured output a summarizer model answers through (a forced tool call,
or the JSON object as text when the request keeps the agent's tools on offer)."""

RUNTIME_TAG = "system-reminder"
"""The tag around every runtime note the model reads."""

_OPEN, _CLOSE = f"<{RUNTIME_TAG}>", f"</{RUNTIME_TAG}>"


class Marker(StrEnum):
    """What a message marked with :data:`MARKER_KEY` is."""

    SUMMARY = "summary"
    """The summary layer: compressed history."""
    USAGE_HINT = "usage_hint"
    """The context-usage note: sent as the request's last message, never stored."""
    SUMMARY_REQUEST = "summary_request"
    """The instruction ending a summary request that extends the agent's own request."""


def marker_of(msg: Msg) -> Marker | None:
    """The marker the engine put on ``msg``, if any."""
    value = msg.metadata.get(MARKER_KEY)
    try:
        return Marker(value) if isinstance(value, str) else None
    except ValueError:
        return None


def is_readback(block: ToolResultBlock) -> bool:
    """Whether ``block`` is a result of a read-back tool (see :data:`READBACK_KEY`)."""
    return block.metadata.get(READBACK_KEY) is True


def is_summary_request(messages: Sequence[Msg], tool_choice: str | None = None) -> bool:
    """Whether a request asks for a summary: it forces :data:`SUMMARY_TOOL`, or it holds
    the engine's :data:`Marker.SUMMARY_REQUEST` instruction (last, or before the notes of
    earlier attempts), which no stored message ever carries."""
    if tool_choice == SUMMARY_TOOL:
        return True
    return any(marker_of(m) is Marker.SUMMARY_REQUEST for m in reversed(messages))


def runtime_note(text: str) -> str:
    """``text`` wrapped in the runtime tag, once."""
    return text if is_runtime_note(text) else f"{_OPEN}{text}{_CLOSE}"


def is_runtime_note(text: str) -> bool:
    """Whether ``text`` is already one runtime note (starts and ends with the tag)."""
    stripped = text.strip()
    return stripped.startswith(_OPEN) and stripped.endswith(_CLOSE)
