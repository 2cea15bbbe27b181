"""The agent: a ReAct loop with tools, skills, middleware, tasks, permissions and state.

Its configuration (``ContextConfig``) lives in :mod:`contextfold.context` and its hooks in
:mod:`contextfold.middleware`; both are also re-exported from :mod:`contextfold`.
"""

from ._agent import Agent
from ._compress_tool import COMPRESS_TOOL_NAME, CompressContextTool
from ._events import (
    AgentEvent,
    ContextChangeEvent,
    ReplyEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ._permissions import AskCallback, Decision, Permissions
from ._state import AgentState
from ._tasks import Task, TaskList, TaskStatus
from ._validity import check_requests_valid

__all__ = [
    "COMPRESS_TOOL_NAME",
    "Agent",
    "AgentEvent",
    "AgentState",
    "AskCallback",
    "CompressContextTool",
    "ContextChangeEvent",
    "Decision",
    "Permissions",
    "ReplyEvent",
    "Task",
    "TaskList",
    "TaskStatus",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolCallEvent",
    "ToolResultEvent",
    "check_requests_valid",
]
