"""The Offloader protocol: where content that leaves the context goes."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..message import DataBlock, Msg, ToolResultBlock

__all__ = ["DataOffloader", "Offloader"]


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
