"""Plain records the workspace readers return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["GrepMatch", "ItemInfo", "ItemKind"]

ItemKind = Literal["context", "tool_result", "data"]


@dataclass(frozen=True)
class ItemInfo:
    """One offloaded item: a session's context log, a tool result or a data file."""

    ref: str
    """The reference to pass to ``read`` (what the offload call returned)."""
    path: str
    """The canonical workspace-relative path, e.g. ``sessions/s1/context.jsonl``."""
    kind: ItemKind
    size: int
    """Size in bytes of the stored content."""
    session_id: str | None
    """The owning session; ``None`` for data files listed outside a session."""


@dataclass(frozen=True)
class GrepMatch:
    """One matching line, with the context lines around it."""

    ref: str
    line_number: int
    """1-based."""
    line: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
