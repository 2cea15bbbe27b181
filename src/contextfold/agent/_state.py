"""AgentState: everything needed to resume a session in another process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..context import redact_messages
from ..message import Msg
from ._tasks import Task

__all__ = ["AgentState"]


class AgentState(BaseModel):
    """A session's summary, context and tasks; JSON via ``model_dump_json``.

    Restore with ``Agent.from_state(state, model=..., ...)`` or ``agent.load_state(state)``.
    Tools, middleware and the model are code, not state: pass them again.
    """

    # The outermost model's setting governs a dump: without this, Infinity/NaN kept in a
    # message's metadata would be written as null and a restored session would differ.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    format_version: int = 1
    session_id: str
    name: str
    summary: Msg | None = None
    context: list[Msg] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free for the application (e.g. a title or the user's id)."""

    def redacted(self, redact: Callable[[str], str] | None) -> AgentState:
        """This state with every message's text passed through ``redact`` (what is stored
        holds no secret the live context still shows); itself when ``redact`` is ``None``."""
        if redact is None:
            return self
        summary = None if self.summary is None else redact_messages([self.summary], redact)[0]
        return self.model_copy(
            update={"summary": summary, "context": redact_messages(self.context, redact)}
        )
