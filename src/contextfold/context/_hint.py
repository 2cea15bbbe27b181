"""The context-usage note injected past the hint threshold."""

from __future__ import annotations

from ..message import HintBlock, Msg

__all__ = ["HINT_NAME", "usage_hint"]

HINT_NAME = "runtime"
"""``Msg.name`` of the injected note, which is never stored in the context."""


def usage_hint(*, tokens: int, context_size: int, trigger_ratio: float, tool_enabled: bool) -> Msg:
    """A trailing user-role message telling the model its context usage."""
    text = (
        f"<system-reminder>Context usage: {tokens} of {context_size} tokens "
        f"({tokens / context_size:.0%}). Older messages are summarized automatically at "
        f"{trigger_ratio:.0%}."
    )
    if tool_enabled:
        text += (
            " You may call the CompressContext tool now, at a natural break between tasks, "
            "to summarize older messages yourself before that happens."
        )
    text += "</system-reminder>"
    return Msg(HINT_NAME, [HintBlock(hint=text)], "user", metadata={"contextfold": "usage_hint"})
