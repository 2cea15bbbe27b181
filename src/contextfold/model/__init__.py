"""Chat models: one interface, adapters for providers and the embedded model."""

from typing import TYPE_CHECKING, Any

from .._embedded import embedded_model_path
from ._base import ChatModelBase, ModelCall, ModelCallListener
from ._registry import model_from_string
from ._response import (
    ChatResponse,
    ModelStreamEvent,
    ResponseCompleted,
    StructuredOutput,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from ._scripted import ScriptedModel, ScriptedReply, ScriptedRequest, text_reply, tool_reply
from ._speed import ModelSpeed

if TYPE_CHECKING:
    from ._anthropic import AnthropicChatModel
    from ._local import LocalChatModel
    from ._local_kvcache import KVCacheStats
    from ._openai import OpenAIChatModel

# Adapters import their provider SDK, an optional extra: load them on first use.
_LAZY = {
    "OpenAIChatModel": "._openai",
    "AnthropicChatModel": "._anthropic",
    "LocalChatModel": "._local",
    "KVCacheStats": "._local_kvcache",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicChatModel",
    "ChatModelBase",
    "ChatResponse",
    "KVCacheStats",
    "LocalChatModel",
    "ModelCall",
    "ModelCallListener",
    "ModelSpeed",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "ResponseCompleted",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "StructuredOutput",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "embedded_model_path",
    "model_from_string",
    "text_reply",
    "tool_reply",
]
