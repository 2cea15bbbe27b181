"""Middleware: hooks around the system prompt, model calls, tools, replies and compression.

Defined with the agent (``contextfold.agent``); re-exported here under the name the
spec uses.
"""

from ..agent._middleware import (
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

__all__ = [
    "CallNext",
    "CompressionContext",
    "CompressionTrigger",
    "Middleware",
    "ModelCallContext",
    "ReplyContext",
    "ToolCallContext",
    "compression_middleware",
    "model_call_middleware",
    "reply_middleware",
    "system_prompt_middleware",
    "tool_call_middleware",
]
