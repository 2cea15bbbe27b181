"""SWE-agent ``.traj``: 1.x native tool calls, 0.x text actions (``action`` of an assistant
turn, answered by the next user turn); usage is per run only (``info.model_stats``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..._exceptions import MessageFormatError
from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    from_openai_messages,
)
from .._trajectory import Trajectory
from ._fields import text_of
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["SWE_AGENT"]


class _SweAgent(ShapedLoader):
    """A trajectory; ``info["version"]`` says which of the two forms it had."""

    name = "swe-agent"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        """An object with ``history`` (messages) and ``trajectory`` (steps)."""
        return (
            isinstance(parsed, dict)
            and isinstance(parsed.get("history"), list)
            and isinstance(parsed.get("trajectory"), list)
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        data: dict[str, Any] = parsed
        system, msgs, version = _messages(data, recording.path)
        info = {"version": version, **(data.get("info") or {})}
        name = recording.path.name.removesuffix(".traj")
        return [
            Trajectory(instance_id=name, system=system, messages=msgs, info=info, format=self.name)
        ]


SWE_AGENT = _SweAgent()


def _messages(data: dict[str, Any], path: Path) -> tuple[str | None, list[Msg], str]:
    """``(system, messages, version)``: 1.x native tool calls, or 0.x text actions."""
    history = [m for m in data["history"] if isinstance(m, dict)]
    if any(m.get("role") == "tool" for m in history):
        return (*_native(history, path), "1.x")
    system: str | None = None
    msgs: list[Msg] = []
    pending: ToolCallBlock | None = None
    for k, m in enumerate(history):
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "system" and system is None and not msgs:
            system = text
        elif role == "assistant":
            action = m.get("action")
            blocks: list[ContentBlock] = [TextBlock(text=str(m.get("thought", text)))]
            pending = None
            if isinstance(action, str) and action.strip():
                pending = ToolCallBlock(
                    id=f"call_{k}", name=action.split()[0], input={"command": action.rstrip("\n")}
                )
                blocks.append(pending)
            msgs.append(Msg("assistant", blocks, "assistant"))
        elif pending is not None:
            msgs.append(
                Msg(
                    "tool", [ToolResultBlock(id=pending.id, name=pending.name, output=text)], "user"
                )
            )
            pending = None
        else:
            msgs.append(
                Msg("user", text, "user", metadata={"demo": True} if m.get("is_demo") else {})
            )
    return system, msgs, "0.x"


def _native(history: list[dict[str, Any]], path: Path) -> tuple[str | None, list[Msg]]:
    """1.x: OpenAI messages, except that one tool message may answer several calls."""
    wire: list[dict[str, Any]] = []
    for m in history:
        role = m.get("role")
        if role == "tool":
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            for call_id in ids:
                wire.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(call_id),
                        "content": m.get("content", ""),
                    }
                )
        elif role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if m.get("tool_calls"):
                entry["tool_calls"] = [{"type": "function", **c} for c in m["tool_calls"]]
            wire.append(entry)
        else:
            wire.append({"role": role, "content": text_of(m.get("content"))})
    try:
        converted = from_openai_messages(wire, strict=False)
    except MessageFormatError as exc:
        raise MessageFormatError(f"{path}: {exc}") from exc
    if converted and converted[0].role == "system":
        return converted[0].text, converted[1:]
    return None, converted
