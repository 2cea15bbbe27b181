"""The context-usage note: a trailing user message in the model input, never stored.

compress-context.zh, section 自主压缩 (Agent-initiated compression): past
``trigger_ratio - context_buffer_ratio`` the model is told how full its window is, so it
can compress at a natural break (with the ``CompressContext`` tool, when enabled).
"""

from __future__ import annotations

from ..message import MARKER_KEY, HintBlock, Marker, Msg, runtime_note

__all__ = ["HINT_NAME", "usage_hint"]

HINT_NAME = "runtime"
"""``Msg.name`` of the context-usage note, which is never stored in the context."""


def usage_hint(
    *,
    tokens: int,
    context_size: int,
    trigger_ratio: float,
    tool_enabled: bool,
    readback: bool = True,
) -> Msg:
    """The context-usage note: a trailing user-role message, never stored. Without
    ``readback`` (the model has no read-back tools) it names none."""
    text = (
        f"Context usage: {tokens} of {context_size} tokens ({tokens / context_size:.0%}). "
        f"Older messages are summarized automatically at {trigger_ratio:.0%}"
    )
    text += (
        "; summarized messages stay readable in the workspace: find them with Search "
        "(a few words), then Read."
        if readback
        else "; only their summary stays in the context."
    )
    if tool_enabled:
        text += (
            " You may call the CompressContext tool now, at a natural break between tasks, "
            "to summarize older messages yourself before that happens."
        )
    return Msg.of_blocks(
        HINT_NAME,
        [HintBlock(hint=runtime_note(text))],
        "user",
        metadata={MARKER_KEY: Marker.USAGE_HINT.value},
    )
