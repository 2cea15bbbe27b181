"""Copy a message with new content; the stored original is never mutated."""

from __future__ import annotations

from ..message import ContentBlock, Msg

__all__ = ["replace_content"]


def replace_content(msg: Msg, content: str | list[ContentBlock]) -> Msg:
    """``msg`` with ``content`` replaced; same id, so offloaded copies still match.

    ``Msg.model_copy(update=...)`` starts the copy with an empty token cache, so the new
    content is counted afresh.
    """
    return msg.model_copy(update={"content": content})
