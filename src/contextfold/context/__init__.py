"""The context engine: compression, truncation, image limit, offload calls."""

from ._config import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    ContextConfig,
    SummarySchema,
)
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
from ._ledger import ArtifactLedger, extract_ledger
from ._summary import safe_format
from ._truncate import (
    READBACK_HINT,
    READBACK_KEY,
    TRUNCATION_MARKER,
    TRUNCATION_MARKER_WITH_REF,
    truncation_marker,
)

__all__ = [
    "DEFAULT_COMPRESSION_PROMPT",
    "DEFAULT_SUMMARY_TEMPLATE",
    "READBACK_HINT",
    "READBACK_KEY",
    "TRUNCATION_MARKER",
    "TRUNCATION_MARKER_WITH_REF",
    "ArtifactLedger",
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
    "extract_ledger",
    "safe_format",
    "truncation_marker",
]
