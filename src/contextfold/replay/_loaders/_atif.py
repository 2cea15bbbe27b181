"""ATIF v1.7 trajectories (``schema_version: ATIF-v1.x``): steps with tool calls,
observations and per-step metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..._exceptions import MessageFormatError
from ...message import ContentBlock, Msg, TextBlock, ThinkingBlock, ToolResultBlock, Usage
from .._trajectory import Trajectory
from ._fields import as_dict, as_int, call, name_results, text_of
from ._recording import Recording, RecordingKind, ShapedLoader

__all__ = ["ATIF"]


class _Atif(ShapedLoader):
    """User and agent messages, tool calls with their observations, metrics as usage."""

    name = "atif"
    kind: RecordingKind = "json"

    def fits(self, parsed: Any) -> bool:
        """An object whose ``schema_version`` starts with ``ATIF``."""
        return isinstance(parsed, dict) and str(parsed.get("schema_version", "")).startswith("ATIF")

    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        data: dict[str, Any] = parsed
        system, msgs = _messages(data, recording.path)
        info: dict[str, Any] = {k: data[k] for k in ("agent", "final_metrics") if k in data}
        sid = str(data.get("session_id") or recording.path.stem)
        return [
            Trajectory(instance_id=sid, system=system, messages=msgs, info=info, format=self.name)
        ]


ATIF = _Atif()


def _messages(data: dict[str, Any], path: Path) -> tuple[str | None, list[Msg]]:
    system: list[str] = []
    msgs: list[Msg] = []
    for step in _steps(data, path):
        source, text = step.get("source"), step.get("message")
        text = text if isinstance(text, str) else text_of(text)
        if source == "system":
            system.append(text)
            continue
        if source != "agent":
            msgs.append(Msg("user", text, "user"))
            continue
        blocks: list[ContentBlock] = []
        if step.get("reasoning_content"):
            blocks.append(ThinkingBlock(thinking=str(step["reasoning_content"])))
        if text:
            blocks.append(TextBlock(text=text))
        for tool_call in step.get("tool_calls") or []:
            blocks.append(
                call(
                    str(tool_call.get("tool_call_id")),
                    str(tool_call.get("function_name")),
                    tool_call.get("arguments", {}),
                )
            )
        msg = Msg("assistant", blocks, "assistant", usage=_usage(step.get("metrics")))
        msgs.append(msg)
        results = ((step.get("observation") or {}).get("results")) or []
        if results:
            msgs.append(
                Msg(
                    "tool",
                    [
                        ToolResultBlock(
                            id=str(r.get("source_call_id")),
                            name="",
                            output=text_of(r.get("content")),
                        )
                        for r in results
                        if isinstance(r, dict)
                    ],
                    "user",
                )
            )
    return ("\n\n".join(system) or None), name_results(msgs)


def _steps(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise MessageFormatError(f"{path}: an ATIF trajectory needs a 'steps' list")
    return [s for s in steps if isinstance(s, dict)]


def _usage(metrics: Any) -> Usage | None:
    if not isinstance(metrics, dict):
        return None
    extra = as_dict(metrics.get("extra"))
    return Usage(
        input_tokens=as_int(metrics.get("prompt_tokens")),
        output_tokens=as_int(metrics.get("completion_tokens")),
        cache_read_tokens=as_int(metrics.get("cached_tokens")),
        cache_write_tokens=as_int(extra.get("cache_creation_input_tokens")),
    )
