"""Messages as data: typed blocks, one JSON form, converters to provider formats."""

from ._blocks import (
    Base64Source,
    ContentBlock,
    DataBlock,
    DataSource,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultContent,
    URLSource,
)
from ._msg import Msg, Role, Usage, msgs_from_jsonl, msgs_to_jsonl
from ._toolspec import ToolChoice, ToolSpec

__all__ = [
    "Base64Source",
    "ContentBlock",
    "DataBlock",
    "DataSource",
    "HintBlock",
    "Msg",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ToolChoice",
    "ToolResultContent",
    "ToolSpec",
    "URLSource",
    "Usage",
    "msgs_from_jsonl",
    "msgs_to_jsonl",
]
