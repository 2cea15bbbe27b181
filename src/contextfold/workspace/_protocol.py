"""The seams: where content that leaves the context goes, and how it is read back."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..message import DataBlock, Msg, ToolResultBlock
from ._types import GrepMatch, ItemInfo, ItemPage, SearchHit

__all__ = [
    "DataOffloader",
    "Offloader",
    "SessionStore",
    "WorkspaceGlob",
    "WorkspaceReader",
    "WorkspaceSearch",
]


@runtime_checkable
class Offloader(Protocol):
    """Persists what leaves the context and returns a reference to it.

    Structural: any object with these two methods is an offloader; no inheritance
    needed. The reference returned is shown to the model (in the summary or the
    truncation marker), so it should be something the agent's read-back tools accept.
    """

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        """Persist compressed messages; return a reference to them."""
        ...

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        """Persist a truncated tool result, whole; return a reference to it."""
        ...


@runtime_checkable
class DataOffloader(Protocol):
    """Optional third method: persist one image, audio clip or file."""

    async def offload_data(self, session_id: str, data: DataBlock, **kwargs: Any) -> str:
        """Persist the block's bytes; return a reference to them."""
        ...


@runtime_checkable
class WorkspaceReader(Protocol):
    """The reading side every workspace backend implements (used by the read-back tools).

    References are the strings the offload methods return; every backend also accepts the
    canonical workspace-relative form (``sessions/<session>/context.jsonl``,
    ``sessions/<session>/tool_result-<id>.txt``, ``data/<sha256>.<ext>``). Anything else,
    or anything that would leave the workspace, raises ``UnsafePathError``.
    """

    async def list_sessions(self) -> list[str]:
        """The ids of every session with stored content or state, sorted."""
        ...

    async def list_items(self, session_id: str | None = None) -> list[ItemInfo]:
        """The items of one session (with the data files it references), or of all."""
        ...

    async def read(self, ref: str, *, offset: int = 0, limit: int | None = None) -> str:
        """The text of an item, from line ``offset`` (0-based), at most ``limit`` lines."""
        ...

    async def read_bytes(self, ref: str) -> bytes:
        """The raw stored bytes of an item."""
        ...

    async def grep(
        self,
        pattern: str,
        *,
        session_id: str | None = None,
        glob: str | None = None,
        context: int = 0,
        max_results: int = 100,
        time_limit: float = 5.0,
    ) -> list[GrepMatch]:
        """Lines of text items matching the regex ``pattern``, in path order; ``TimeoutError``
        past ``time_limit`` seconds, ``ValueError`` for an invalid pattern."""
        ...

    async def purge(self, session_id: str) -> None:
        """Delete everything a session stored (data still used by others is kept)."""
        ...


@runtime_checkable
class WorkspaceSearch(Protocol):
    """Optional: ranked full-text search over what a reader holds (the ``Search`` tool).

    A protocol of its own rather than a method of ``WorkspaceReader``, so that readers
    written before it still are readers; every built-in workspace implements both.
    """

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        time_limit: float = 5.0,
    ) -> list[SearchHit]:
        """Offloaded messages and tool results ranked for ``query``, best first; each hit's
        ``ref`` and ``offset`` open it with ``read``. ``ValueError`` for a query that is too
        long or has no words, ``TimeoutError`` past ``time_limit`` seconds."""
        ...


@runtime_checkable
class WorkspaceGlob(Protocol):
    """Optional: a glob over a reader's items that stops at its cap (the ``Glob`` tool), so
    a workspace of 100,000 sessions is not listed whole to show 200 items."""

    async def glob_items(
        self,
        pattern: str = "**",
        *,
        session_id: str | None = None,
        max_results: int = 200,
        time_limit: float = 5.0,
    ) -> ItemPage:
        """The first ``max_results`` items whose path matches ``pattern``, in path order,
        and whether more match. ``ValueError`` for a bad pattern, ``TimeoutError`` past
        ``time_limit`` seconds of matching."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """Saves an agent's state (JSON) per session, so a session can resume elsewhere."""

    async def save_state(self, session_id: str, state_json: str) -> None:
        """Replace the session's saved state atomically."""
        ...

    async def load_state(self, session_id: str) -> str | None:
        """The last saved state, or ``None`` if the session has none."""
        ...
