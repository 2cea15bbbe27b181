"""Chat models: one interface, adapters for providers and the embedded model."""

from ._base import ChatModelBase
from ._response import (
    ChatResponse,
    ModelStreamEvent,
    ResponseCompleted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from ._scripted import ScriptedModel, ScriptedReply, ScriptedRequest, text_reply, tool_reply

__all__ = [
    "ChatModelBase",
    "ChatResponse",
    "ModelStreamEvent",
    "ResponseCompleted",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "text_reply",
    "tool_reply",
]
