"""Middleware: hooks on the system prompt and wrappers around every stage of the agent loop.

The hooks of context-management.zh, section 概述 (Overview): ``on_system_prompt`` builds the
system prompt layer; wrappers run around each reply, model call, tool call and compression.
"""

from ._middleware import (
    CallNext,
    CompressionContext,
    Middleware,
    MiddlewareStack,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
    WrapperHook,
    compression_middleware,
    model_call_middleware,
    reply_middleware,
    system_prompt_middleware,
    tool_call_middleware,
)
from ._view import AgentView

__all__ = [
    "AgentView",
    "CallNext",
    "CompressionContext",
    "Middleware",
    "MiddlewareStack",
    "ModelCallContext",
    "ReplyContext",
    "ToolCallContext",
    "WrapperHook",
    "compression_middleware",
    "model_call_middleware",
    "reply_middleware",
    "system_prompt_middleware",
    "tool_call_middleware",
]
