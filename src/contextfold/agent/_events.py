"""Events ``Agent.stream`` yields, for UIs that show the agent working."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, Field

from ..context import ContextEvent
from ..message import Msg, ToolCallBlock, ToolResultBlock

__all__ = [
    "AgentEvent",
    "ContextChangeEvent",
    "ReplyEvent",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolCallEvent",
    "ToolResultEvent",
]


class _AgentEventBase(BaseModel):
    agent: str
    """The name of the agent that emitted the event (nested agents have their own)."""


class TextDeltaEvent(_AgentEventBase):
    """A piece of the model's answer text, as it streams."""

    type: Literal["text_delta"] = "text_delta"
    text: str
    step: int


class ThinkingDeltaEvent(_AgentEventBase):
    """A piece of the model's reasoning, as it streams."""

    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str
    step: int


class ToolCallEvent(_AgentEventBase):
    """The model asked for a tool call; it is about to run."""

    type: Literal["tool_call"] = "tool_call"
    call: ToolCallBlock
    step: int


class ToolResultEvent(_AgentEventBase):
    """A tool result as stored in the context (after any truncation)."""

    type: Literal["tool_result"] = "tool_result"
    result: ToolResultBlock
    step: int


class ContextChangeEvent(_AgentEventBase):
    """The context engine changed the context (compression, truncation, ...)."""

    type: Literal["context"] = "context"
    event: ContextEvent


class ReplyEvent(_AgentEventBase):
    """The agent's final reply; always the last event of a stream."""

    type: Literal["reply"] = "reply"
    msg: Msg


AgentEvent: TypeAlias = Annotated[
    TextDeltaEvent
    | ThinkingDeltaEvent
    | ToolCallEvent
    | ToolResultEvent
    | ContextChangeEvent
    | ReplyEvent,
    Field(discriminator="type"),
]
