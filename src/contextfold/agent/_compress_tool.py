"""The CompressContext tool: lets the agent compress at a boundary of its own choosing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._logging import logger
from ..context import CompressionEvent
from ..message import HintBlock, ToolResultBlock

__all__ = ["COMPRESS_TOOL_NAME", "CompressContextTool"]

COMPRESS_TOOL_NAME = "CompressContext"

Compressor = Callable[[HintBlock | None], Awaitable[CompressionEvent | None]]


class CompressContextTool:
    """Runs the agent's compression at the hint threshold (``trigger - buffer``).

    Below the threshold nothing changes. A failure is returned as an error result and
    the context is left as it was.
    """

    name = COMPRESS_TOOL_NAME
    description = (
        "Compress the conversation so far into a structured summary to free context space. "
        "Call it between two pieces of work (after finishing one step, before starting the "
        "next) once you are told the context is filling up. It does nothing while usage is "
        "below that point."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - read-only schema shared by instances
        "type": "object",
        "properties": {
            "instructions": {
                "type": "string",
                "description": "What the summary must keep verbatim (paths, ids, decisions).",
            }
        },
        "additionalProperties": False,
    }

    def __init__(self, compress: Compressor) -> None:
        self._compress = compress

    async def __call__(self, instructions: str | None = None) -> ToolResultBlock | str:
        hint = HintBlock(hint=instructions) if instructions else None
        try:
            event = await self._compress(hint)
        except Exception as exc:
            logger.warning("CompressContext tool failed: %s", exc)
            return ToolResultBlock(
                id="",
                name=self.name,
                output=f"Compression failed ({type(exc).__name__}: {exc}); the context is "
                "unchanged. Continue working.",
                is_error=True,
            )
        if event is None:
            return "Nothing was compressed: context usage is below the compression threshold."
        return (
            f"Compressed {event.messages_removed} earlier messages into a summary "
            f"({event.tokens_before} -> {event.tokens_after} tokens); "
            f"{event.messages_kept} recent messages kept."
        )
