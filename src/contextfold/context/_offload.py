"""What leaves the context goes to the offloader, through the redaction hook.

compress-context.zh, section 卸载 (Offload): compressed messages and the whole text of a
truncated tool result are saved where the agent can read them back. Read-back results are
never saved again (their content is in the workspace already), and everything saved goes
through ``ContextConfig.redact`` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from .._structural import implements
from ..message import DataBlock, Msg, ToolResultBlock, is_readback
from ..workspace import DataOffloader, Offloader
from ._redact import redact_messages, redact_tool_result

__all__ = ["SessionOffload"]


class SessionOffload:
    """One session's offloads (nothing is saved without an offloader)."""

    def __init__(
        self,
        offloader: Offloader | None,
        session_id: str,
        redact: Callable[[], Callable[[str], str] | None],
    ) -> None:
        self.offloader = offloader
        self.session_id = session_id
        self._redact = redact  # read at each offload: the engine's config may be replaced

    async def context(self, msgs: list[Msg]) -> str | None:
        """Save compressed messages; their reference."""
        if self.offloader is None or not msgs:
            return None
        redact = self._redact()
        if redact is not None:
            msgs = redact_messages(msgs, redact)
        return await self.offloader.offload_context(self.session_id, msgs)

    async def result(self, block: ToolResultBlock) -> str | None:
        """Save the whole of a tool result; its reference (none for a read-back result:
        offloading it would copy workspace content again, and each later Read of the copy
        could be copied once more)."""
        if self.offloader is None or is_readback(block):
            return None
        redact = self._redact()
        if redact is not None:
            block = redact_tool_result(block, redact)
        return await self.offloader.offload_tool_result(self.session_id, block)

    async def image(self, block: DataBlock) -> str | None:
        """Save an image leaving the context, when the offloader keeps data."""
        if implements(self.offloader, DataOffloader):
            return await cast(DataOffloader, self.offloader).offload_data(self.session_id, block)
        return None
