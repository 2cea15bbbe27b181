"""Claude Code sessions (``~/.claude/projects/**/<session>.jsonl``).

One API response spans several lines with the same ``message.id``; they become one message,
its usage counted once with ``output_tokens`` from the last line. Sub-agent (side-chain)
lines are left out of a session; a sub-agent's own file (``agent-*.jsonl``) is a run of its
own.
"""

from __future__ import annotations

from typing import Any

from ...message import (
    Base64Source,
    ContentBlock,
    DataBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    Usage,
)
from .._trajectory import Trajectory
from ._fields import as_int, call, name_results, text_of
from ._recording import Recording, RecordingKind, ShapedLoader, split_system

__all__ = ["CLAUDE_CODE"]


class _ClaudeCode(ShapedLoader):
    """The main chain of a session, one message per API response."""

    name = "claude-code"
    kind: RecordingKind = "jsonl"

    def fits(self, parsed: Any) -> bool:
        """Lines with ``type`` user/assistant, a ``sessionId`` and a ``message``."""
        return any(
            r.get("type") in ("user", "assistant") and "sessionId" in r and "message" in r
            for r in parsed
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        rows: list[dict[str, Any]] = parsed
        msgs = _messages(rows)
        sid = next((str(r["sessionId"]) for r in rows if "sessionId" in r), recording.path.stem)
        return [split_system(msgs, instance_id=sid, info={}, fmt=self.name)]


CLAUDE_CODE = _ClaudeCode()


def _messages(rows: list[dict[str, Any]]) -> list[Msg]:
    msgs: list[Msg] = []
    last_id: str | None = None
    chat = [r for r in rows if r.get("type") in ("user", "assistant")]
    # A sub-agent's own file is all side chain: keep it; in a session file, leave it out.
    sidechain_file = bool(chat) and all(r.get("isSidechain") for r in chat)
    for row in chat:
        if row.get("isSidechain") and not sidechain_file:
            continue
        message = row.get("message")
        if not isinstance(message, dict):
            continue
        if row["type"] == "assistant":
            blocks = _blocks(message.get("content"))
            mid = message.get("id")
            if mid is not None and mid == last_id and msgs and msgs[-1].role == "assistant":
                merged = [*msgs[-1].blocks(), *blocks]
                msgs[-1] = msgs[-1].model_copy(update={"content": merged, "usage": _usage(message)})
                continue
            msg = Msg("assistant", blocks, "assistant", usage=_usage(message))
            if message.get("model"):
                msg.metadata["model"] = message["model"]
            msgs.append(msg)
            last_id = mid
        else:
            last_id = None
            content = message.get("content")
            if isinstance(content, str):
                msg = Msg("user", content, "user")
            else:
                msg = Msg("user", _blocks(content), "user")
            if row.get("isCompactSummary"):
                msg.metadata["compact_summary"] = True
            msgs.append(msg)
    return name_results(msgs)


def _blocks(content: Any) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[ContentBlock] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            blocks.append(TextBlock(text=str(part.get("text", ""))))
        elif kind == "thinking":
            blocks.append(
                ThinkingBlock(
                    thinking=str(part.get("thinking", "")), signature=part.get("signature")
                )
            )
        elif kind == "redacted_thinking":
            blocks.append(ThinkingBlock(thinking="", redacted=str(part.get("data", ""))))
        elif kind == "tool_use":
            blocks.append(call(str(part.get("id")), str(part.get("name")), part.get("input", {})))
        elif kind == "tool_result":
            output = part.get("content")
            blocks.append(
                ToolResultBlock(
                    id=str(part.get("tool_use_id")),
                    name="",
                    output=text_of(output) if not isinstance(output, str) else output,
                    is_error=bool(part.get("is_error")),
                )
            )
        elif kind == "image":
            source = part.get("source") or {}
            if source.get("type") == "base64":
                blocks.append(
                    DataBlock(
                        source=Base64Source(
                            media_type=str(source.get("media_type")), data=str(source.get("data"))
                        )
                    )
                )
    return blocks


def _usage(message: dict[str, Any]) -> Usage | None:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    read = as_int(usage.get("cache_read_input_tokens"))
    write = as_int(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=as_int(usage.get("input_tokens")) + read + write,
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
