"""The agent: a ReAct loop with tools, skills, middleware, tasks, permissions and state."""

from ..context import ContextConfig
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
from ._middleware import (
    CallNext,
    CompressionContext,
    CompressionTrigger,
    Middleware,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
    compression_middleware,
    model_call_middleware,
    reply_middleware,
    system_prompt_middleware,
    tool_call_middleware,
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
    "CallNext",
    "CompressContextTool",
    "CompressionContext",
    "CompressionTrigger",
    "ContextChangeEvent",
    "ContextConfig",
    "Decision",
    "Middleware",
    "ModelCallContext",
    "Permissions",
    "ReplyContext",
    "ReplyEvent",
    "Task",
    "TaskList",
    "TaskStatus",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolCallContext",
    "ToolCallEvent",
    "ToolResultEvent",
    "check_requests_valid",
    "compression_middleware",
    "model_call_middleware",
    "reply_middleware",
    "system_prompt_middleware",
    "tool_call_middleware",
]
