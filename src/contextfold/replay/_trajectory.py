"""A recorded run as the replay reads it, whatever format it was loaded from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..message import Msg

__all__ = ["Trajectory"]


class Trajectory(BaseModel):
    """One recorded run. ``messages`` excludes the system prompt, which is in ``system``."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    system: str | None = None
    messages: list[Msg]
    info: dict[str, Any] = Field(default_factory=dict)
    times: list[float | None] = Field(default_factory=list)
    """When each of ``messages`` was recorded (Unix seconds), one per message, ``None``
    where the recording does not say; empty when it has no timestamps. A timed replay
    (``ReplayTiming``) reads the time between calls from it."""
    format: str = ""
    """Where it came from: its format's name in ``FORMATS`` (a mini-swe-agent run's own
    ``trajectory_format``)."""

    def all_messages(self) -> list[Msg]:
        """The system prompt (as a system ``Msg``, when there is one) followed by
        ``messages``."""
        head = [] if self.system is None else [Msg("system", self.system, "system")]
        return head + list(self.messages)
