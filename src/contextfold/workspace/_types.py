"""Plain records the workspace readers return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["GrepMatch", "ItemInfo", "ItemKind", "ItemPage", "SearchHit", "SkippedEntry"]

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
class ItemPage:
    """The first items matching a glob, in path order (``WorkspaceGlob.glob_items``)."""

    items: tuple[ItemInfo, ...]
    more: bool
    """Whether further items match (not listed: the listing stopped at the cap)."""


@dataclass(frozen=True)
class GrepMatch:
    """One matching line, with the context lines around it."""

    ref: str
    line_number: int
    """1-based."""
    line: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    path: str | None = None
    """The canonical workspace-relative path of ``ref`` (``None`` from a reader that does
    not say; the ``Grep`` tool then looks it up)."""


@dataclass(frozen=True)
class SearchHit:
    """One ranked search result: an offloaded message or a tool result."""

    ref: str
    """The reference to pass to ``read`` / the ``Read`` tool (a tool result's names its
    tool-call id: ``.../tool_result-<id>.txt``)."""
    offset: int
    """The line to read from: ``Read(ref, offset=offset, limit=1)`` shows the message of a
    context-log hit; 0 for a tool result."""
    score: float
    """The engine's relevance, higher is better; comparable within one search only."""
    snippet: str
    """Text around the matched terms, which are in ``**bold**``."""
    kind: ItemKind
    path: str
    """The canonical workspace-relative path."""
    session_id: str | None

    def __str__(self) -> str:
        return self.ref if self.kind != "context" else f"{self.ref} (line {self.offset + 1})"


@dataclass(frozen=True)
class SkippedEntry:
    """Something in a workspace's directory passed over rather than fail on (a session
    folder whose name does not decode, a corrupt search index moved aside)."""

    path: str
    """Workspace-relative, e.g. ``sessions/%FF``."""
    reason: str
