"""Helpers shared by the cross-cutting integration tests."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from contextfold.agent import Agent
from contextfold.context import ContextEvent
from contextfold.message import Msg
from contextfold.middleware import Middleware
from contextfold.model import ScriptedModel, ScriptedRequest
from contextfold.workspace import LocalWorkspace, SQLiteWorkspace

SUMMARY_FIELDS = {
    "task_overview": "Run the checks and report the failing one.",
    "current_state": "Several checks ran; their output was long.",
    "important_discoveries": "One check failed; its code is in the saved history.",
    "next_steps": "Find the failure code and report it.",
    "context_to_preserve": "Nothing beyond the saved history.",
}
"""A summary that does not repeat the failure code: the agent must read it back."""

SAVED_IN = re.compile(r"The compressed messages are saved in '([^']+)'")
MARKER_REF = re.compile(r"You can refer to the file in '([^']+)'")
GREP_HIT = re.compile(r"^(?P<ref>[^\n:]+):(?P<line>\d+):", re.MULTILINE)


def summarizer() -> ScriptedModel:
    """A summarizer that answers every request with :data:`SUMMARY_FIELDS`."""
    return ScriptedModel(lambda request: dict(SUMMARY_FIELDS))


def is_summary(msg: Msg) -> bool:
    return msg.metadata.get("contextfold") == "summary"


def is_usage_hint(msg: Msg) -> bool:
    return msg.metadata.get("contextfold") == "usage_hint"


def dump(msg: Msg) -> str:
    """Everything a message carries, tool inputs and outputs included."""
    return msg.model_dump_json()


def last_tool_result_text(request: ScriptedRequest) -> tuple[str, str] | None:
    """(tool name, text) of the newest tool result in a request, if any."""
    for msg in reversed(request.messages):
        if msg.tool_results:
            result = msg.tool_results[-1]
            return result.name, result.text()
    return None


class EventLog(Middleware):
    """A middleware that records every context event the agent emits."""

    def __init__(self) -> None:
        self.events: list[ContextEvent] = []

    async def on_context_event(self, event: ContextEvent, agent: Agent) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


async def open_workspace(kind: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A real, initialized workspace of the given kind (``local`` or ``sqlite``)."""
    ws: LocalWorkspace | SQLiteWorkspace
    if kind == "local":
        ws = LocalWorkspace(workdir=tmp_path / "ws", fsync=False)
    else:
        ws = SQLiteWorkspace(tmp_path / "ws.sqlite3", fsync=False)
    await ws.initialize()
    try:
        yield ws
    finally:
        await ws.close()
