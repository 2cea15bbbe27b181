"""What a model call returns, whole or streamed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, Field

from ..message import ContentBlock, Msg, TextBlock, ToolCallBlock, Usage

__all__ = [
    "ChatResponse",
    "ModelStreamEvent",
    "ResponseCompleted",
    "StructuredOutput",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
]


class ChatResponse(BaseModel):
    """One model answer: content blocks plus the usage the provider reported."""

    content: list[ContentBlock] = Field(default_factory=list)
    usage: Usage | None = None
    stop_reason: str | None = None
    """``end_turn``, ``tool_use``, ``max_tokens`` or the provider's own word."""
    model: str | None = None

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool calls, in order."""
        return [b for b in self.content if isinstance(b, ToolCallBlock)]

    def to_msg(self, name: str) -> Msg:
        """This answer as an assistant message with its usage attached."""
        return Msg.of_blocks(name, self.content, "assistant", usage=self.usage)


class TextDelta(BaseModel):
    """A piece of streamed answer text."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(BaseModel):
    """A piece of streamed reasoning."""

    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call; ``arguments`` is a fragment of the JSON text."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class ResponseCompleted(BaseModel):
    """The last event of a stream: the whole answer, as ``generate`` would return it."""

    type: Literal["completed"] = "completed"
    response: ChatResponse


ModelStreamEvent: TypeAlias = TextDelta | ThinkingDelta | ToolCallDelta | ResponseCompleted


@dataclass(frozen=True)
class StructuredOutput:
    """Output valid against the requested schema, and the attempts it took (1: the first)."""

    value: dict[str, Any]
    attempts: int
