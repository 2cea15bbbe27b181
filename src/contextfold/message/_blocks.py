"""Content blocks: the typed parts a message is made of."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Base64Source",
    "ContentBlock",
    "DataBlock",
    "DataSource",
    "HintBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ToolResultContent",
    "URLSource",
]


class _Block(BaseModel):
    # Tool input and result metadata hold arbitrary JSON: keep Infinity/NaN (see ``Msg``).
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """Model reasoning. ``signature`` (Anthropic) or ``redacted`` data must be sent back
    unchanged for the provider to accept the turn, so both are kept verbatim."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    redacted: str | None = None


class Base64Source(_Block):
    """Inline data, base64 encoded."""

    type: Literal["base64"] = "base64"
    media_type: str
    data: str

    def decode(self) -> bytes:
        """The raw bytes; raises ``ValueError`` when ``data`` is not valid base64."""
        try:
            return base64.b64decode(self.data, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"invalid base64 data ({self.media_type}): {exc}") from exc


class URLSource(_Block):
    """Data referenced by URL (``https:``, ``file:`` or ``data:``)."""

    type: Literal["url"] = "url"
    url: str
    media_type: str | None = None


DataSource: TypeAlias = Annotated[Base64Source | URLSource, Field(discriminator="type")]


class DataBlock(_Block):
    """An image, audio clip or file."""

    type: Literal["data"] = "data"
    source: DataSource
    name: str | None = None
    width: int | None = None
    """Pixel width of an image, when known (used for exact image token counts)."""
    height: int | None = None

    @property
    def media_type(self) -> str:
        """The MIME type, or ``application/octet-stream`` when unknown."""
        return self.source.media_type or "application/octet-stream"

    @property
    def kind(self) -> Literal["image", "audio", "video", "file"]:
        """Coarse kind from the media type."""
        major = self.media_type.split("/", 1)[0]
        if major in ("image", "audio", "video"):
            return major  # type: ignore[return-value]
        return "file"


ToolResultContent: TypeAlias = Annotated[TextBlock | DataBlock, Field(discriminator="type")]


class ToolCallBlock(_Block):
    """A call the model asked for.

    ``raw_input`` keeps the provider's argument text verbatim (OpenAI sends a JSON string)
    so that converting back is byte-identical; it is ignored when it no longer parses to
    ``input``. ``input_error`` is set when the model's arguments were not a JSON object:
    the agent answers such a call with an error result instead of running the tool.
    """

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    raw_input: str | None = None
    input_error: str | None = None


class ToolResultBlock(_Block):
    """The result of a tool call, matched to it by ``id``."""

    type: Literal["tool_result"] = "tool_result"
    id: str
    name: str
    output: str | list[ToolResultContent]
    is_error: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        """The textual part of the output, blocks joined by newlines."""
        if isinstance(self.output, str):
            return self.output
        return "\n".join(b.text for b in self.output if isinstance(b, TextBlock))


class HintBlock(_Block):
    """An instruction to the model from the runtime (not from the user)."""

    type: Literal["hint"] = "hint"
    hint: str


ContentBlock: TypeAlias = Annotated[
    TextBlock | ThinkingBlock | DataBlock | ToolCallBlock | ToolResultBlock | HintBlock,
    Field(discriminator="type"),
]
