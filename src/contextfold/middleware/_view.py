"""What middleware may use of the agent it runs in.

Middleware names this protocol, never the concrete ``Agent``: ``agent/`` imports
``middleware/``, so naming ``Agent`` here would close a cycle, even if only in type hints.
``Agent`` satisfies it structurally.
"""

from __future__ import annotations

from typing import Protocol

from ..context import ContextEngine
from ..model import ChatModelBase

__all__ = ["AgentView"]


class AgentView(Protocol):
    """The agent as its middleware sees it: who it is, its model and its context engine."""

    @property
    def name(self) -> str:
        """The agent's name."""
        ...

    @property
    def session_id(self) -> str:
        """The session the agent is in."""
        ...

    @property
    def model(self) -> ChatModelBase:
        """The model the agent calls."""
        ...

    @property
    def engine(self) -> ContextEngine:
        """The context engine holding the session's summary and context."""
        ...
