"""The spec's custom offloader satisfies the protocol structurally (no inheritance)."""

from __future__ import annotations

from typing import Any

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import Offloader


class S3Offloader:
    """The spec's example, with the upload recorded instead of sent."""

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.uploads: dict[str, str] = {}

    async def _upload(self, bucket: str, key: str, content: str) -> None:
        self.uploads[f"{bucket}/{key}"] = content

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        key = f"{self.prefix}/sessions/{session_id}/context.jsonl"
        content = "\n".join(m.model_dump_json() for m in msgs)
        await self._upload(self.bucket, key, content)
        return f"s3://{self.bucket}/{key}"

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        key = f"{self.prefix}/sessions/{session_id}/tool_result-{tool_result.id}.txt"
        await self._upload(self.bucket, key, tool_result.text())
        return f"s3://{self.bucket}/{key}"


async def test_spec_s3_offloader_is_an_offloader() -> None:
    offloader: Offloader = S3Offloader("b", "p")  # also checked by mypy
    assert isinstance(offloader, Offloader)
    ref = await offloader.offload_context("s1", [Msg("user", "hi", "user")])
    assert ref == "s3://b/p/sessions/s1/context.jsonl"
