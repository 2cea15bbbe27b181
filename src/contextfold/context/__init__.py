"""The context engine: compression, truncation, image limit, offload calls."""

from ._config import DEFAULT_COMPRESSION_PROMPT, DEFAULT_SUMMARY_TEMPLATE, ContextConfig, SummarySchema
from ._engine import ContextEngine
from ._events import (
    CompressionEvent,
    ContextEvent,
    ContextEventHandler,
    ImageRemovalEvent,
    TruncationEvent,
    UsageHintEvent,
)
from ._input import ContextUsage, ModelInput

__all__ = [
    "DEFAULT_COMPRESSION_PROMPT",
    "DEFAULT_SUMMARY_TEMPLATE",
    "CompressionEvent",
    "ContextConfig",
    "ContextEngine",
    "ContextEvent",
    "ContextEventHandler",
    "ContextUsage",
    "ImageRemovalEvent",
    "ModelInput",
    "SummarySchema",
    "TruncationEvent",
    "UsageHintEvent",
]
