"""AgentState: everything needed to resume a session in another process."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..message import Msg
from ._tasks import Task

__all__ = ["AgentState"]


class AgentState(BaseModel):
    """A session's summary, context and tasks; JSON via ``model_dump_json``.

    Restore with ``Agent.from_state(state, model=..., ...)`` or ``agent.load_state(state)``.
    Tools, middleware and the model are code, not state: pass them again.
    """

    format_version: int = 1
    session_id: str
    name: str
    summary: Msg | None = None
    context: list[Msg] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free for the application (e.g. a title or the user's id)."""
