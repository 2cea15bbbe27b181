"""Pydantic AI message histories
(``ModelMessagesTypeAdapter.dump_json(result.all_messages())``): requests (system prompt,
user prompts, tool returns, retry prompts) and responses (text, thinking, tool calls) with
each response's usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..._exceptions import MessageFormatError
from ...message import ContentBlock, Msg, TextBlock, ThinkingBlock, ToolResultBlock, Usage
from .._trajectory import Trajectory
from ._fields import as_dict, as_int, call, name_results
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["PYDANTIC_AI"]


class _PydanticAi(ShapedLoader):
    """Requests become user turns (tool returns and retry prompts of a request in one tool
    message), responses assistant turns with their usage; system prompts and instructions
    the system prompt."""

    name = "pydantic-ai"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        """A list of messages: objects of ``kind`` request or response with parts."""
        return (
            isinstance(parsed, list)
            and bool(parsed)
            and all(
                isinstance(m, dict)
                and m.get("kind") in ("request", "response")
                and isinstance(m.get("parts"), list)
                for m in parsed
            )
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        system, msgs = _messages(parsed, recording.path)
        return [
            Trajectory(
                instance_id=recording.path.stem, system=system, messages=msgs, format=self.name
            )
        ]


PYDANTIC_AI = _PydanticAi()


def _json_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _messages(data: list[dict[str, Any]], path: Path) -> tuple[str | None, list[Msg]]:
    system: list[str] = []
    msgs: list[Msg] = []
    for i, message in enumerate(data):
        parts = [p for p in message["parts"] if isinstance(p, dict)]
        if message["kind"] == "response":
            msgs.append(_response(parts, as_dict(message.get("usage")), path, i))
            continue
        instructions = message.get("instructions")
        if isinstance(instructions, str) and instructions and instructions not in system:
            system.append(instructions)
        results: list[ContentBlock] = []
        prompts: list[str] = []
        for part in parts:
            kind = part.get("part_kind")
            if kind == "system-prompt":
                system.append(_json_text(part.get("content", "")))
            elif kind == "user-prompt":
                content = part.get("content")
                texts = content if isinstance(content, list) else [content]
                prompts.append("\n".join(t for t in texts if isinstance(t, str)))
            elif kind in ("tool-return", "retry-prompt") and part.get("tool_call_id"):
                results.append(
                    ToolResultBlock(
                        id=str(part["tool_call_id"]),
                        name=str(part.get("tool_name") or ""),
                        output=_json_text(part.get("content", "")),
                        # 2.x records a retry as a tool return with its outcome
                        is_error=kind == "retry-prompt"
                        or part.get("outcome") not in (None, "success"),
                    )
                )
            elif kind == "retry-prompt":  # a retry of the final answer, not of a tool
                prompts.append(_json_text(part.get("content", "")))
        if results:
            msgs.append(Msg("tool", results, "user"))
        msgs.extend(Msg("user", text, "user") for text in prompts if text)
    return ("\n\n".join(system) or None), name_results(msgs)


def _response(parts: list[dict[str, Any]], usage: dict[str, Any], path: Path, i: int) -> Msg:
    blocks: list[ContentBlock] = []
    for part in parts:
        kind = part.get("part_kind")
        if kind == "text":
            blocks.append(TextBlock(text=_json_text(part.get("content", ""))))
        elif kind == "thinking":
            blocks.append(ThinkingBlock(thinking=_json_text(part.get("content", ""))))
        elif kind == "tool-call":
            if not part.get("tool_call_id") or not part.get("tool_name"):
                raise MessageFormatError(
                    f"{path}: message {i}: a tool-call part needs a name and an id"
                )
            blocks.append(call(str(part["tool_call_id"]), str(part["tool_name"]), part.get("args")))
    recorded = Usage(
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_tokens")),
        cache_write_tokens=as_int(usage.get("cache_write_tokens")),
    )
    return Msg("assistant", blocks, "assistant", usage=recorded if usage else None)
