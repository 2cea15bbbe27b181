"""Codex rollouts (``rollout-*.jsonl``): Responses items; the ``token_count`` event after a
response carries its usage (``last_token_usage``)."""

from __future__ import annotations

import json
from typing import Any

from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
)
from .._trajectory import Trajectory
from ._fields import as_int, call, name_results, text_of
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["CODEX"]


class _Codex(ShapedLoader):
    """A rollout: leading developer messages as the system prompt, then the run."""

    name = "codex"
    kind: RecordingKind = "jsonl"

    def fits(self, parsed: Any) -> bool:
        """``{"timestamp", "type", "payload"}`` lines with ``response_item`` or
        ``session_meta``."""
        return any(
            r.get("type") in ("response_item", "session_meta") and "payload" in r for r in parsed
        )

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        rows: list[dict[str, Any]] = parsed
        system, msgs = _messages(rows)
        meta: Any = next((r["payload"] for r in rows if r.get("type") == "session_meta"), {})
        stem = recording.path.stem
        sid = str(meta.get("id") or stem) if isinstance(meta, dict) else stem
        return [Trajectory(instance_id=sid, system=system, messages=msgs, format=self.name)]


CODEX = _Codex()


def _messages(rows: list[dict[str, Any]]) -> tuple[str | None, list[Msg]]:
    msgs: list[Msg] = []
    system: list[str] = []
    seen_total: int | None = None
    for row in rows:
        payload = row.get("payload")
        if not isinstance(payload, dict):
            continue
        if row.get("type") == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                continue
            total = (info.get("total_token_usage") or {}).get("total_tokens")
            if total is not None and total == seen_total:
                continue  # the same count again, not a new call
            seen_total = total
            last = info.get("last_token_usage")
            target = next(
                (i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None
            )
            if isinstance(last, dict) and target is not None and msgs[target].usage is None:
                msgs[target] = msgs[target].model_copy(
                    update={
                        "usage": Usage(
                            input_tokens=as_int(last.get("input_tokens")),
                            output_tokens=as_int(last.get("output_tokens")),
                            cache_read_tokens=as_int(last.get("cached_input_tokens")),
                        )
                    }
                )
            continue
        if row.get("type") != "response_item":
            continue
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            text = text_of(payload.get("content"))
            if role in ("developer", "system"):
                if not msgs:
                    system.append(text)
                else:
                    msgs.append(Msg("developer", text, "user", metadata={"role": "developer"}))
            elif role == "assistant":
                _assistant_block(msgs, TextBlock(text=text))
            else:
                msgs.append(Msg("user", text, "user"))
        elif kind == "reasoning":
            summary = text_of(payload.get("summary"))
            if summary:
                _assistant_block(msgs, ThinkingBlock(thinking=summary))
        elif kind == "function_call":
            _assistant_block(
                msgs,
                call(
                    str(payload.get("call_id")), str(payload.get("name")), payload.get("arguments")
                ),
            )
        elif kind == "custom_tool_call":
            _assistant_block(
                msgs,
                ToolCallBlock(
                    id=str(payload.get("call_id")),
                    name=str(payload.get("name")),
                    input={"input": payload.get("input", "")},
                ),
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            text = output if isinstance(output, str) else text_of(output) or json.dumps(output)
            result = ToolResultBlock(id=str(payload.get("call_id")), name="", output=text)
            if msgs and msgs[-1].role == "user" and msgs[-1].tool_results and not msgs[-1].text:
                msgs[-1] = msgs[-1].model_copy(update={"content": [*msgs[-1].blocks(), result]})
            else:
                msgs.append(Msg("tool", [result], "user"))
    return ("\n\n".join(system) or None), name_results(msgs)


def _assistant_block(msgs: list[Msg], block: ContentBlock) -> None:
    """Add ``block`` to the open assistant turn, or open one (any other item ends a turn)."""
    if msgs and msgs[-1].role == "assistant" and msgs[-1].usage is None:
        msgs[-1] = msgs[-1].model_copy(update={"content": [*msgs[-1].blocks(), block]})
    else:
        msgs.append(Msg("assistant", [block], "assistant"))
