"""The context engine: compression, truncation, image limit, offload calls.

Usable without the agent: give :class:`ContextEngine` a token counter and a window, feed it
messages, and send what :meth:`ContextEngine.prepare` returns::

    engine = ContextEngine(counter=counter_for_model("gpt-4o"), context_size=128_000,
                           summarizer=ModelSummarizer(model), offloader=workspace)
    engine.append(Msg("user", "Fix the failing test.", "user"))
    model_input = await engine.prepare(system_prompt, tools)
    response = await model.generate(model_input.messages(), tools=model_input.tools)

Modules, one job each: ``_config`` (every knob), ``_types`` (model input, usage, events),
``_engine`` (the state and the step), ``_summarizer`` (the seam and the model-backed
summarizer), ``_extractive`` (summarizers without a model), ``_summary`` (the rendered
summary layer), ``_ledger`` (facts kept beside the summary), ``_trim`` (truncation, split,
escalation, image limit), ``_redact`` (the redaction hook applied to what leaves the context).
"""

from ._config import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    DEFAULT_SUMMARY_UPDATE_PROMPT,
    DEFAULT_SUMMARY_UPDATE_TEMPLATE,
    MIN_TOOL_RESULT_LIMIT,
    ContextConfig,
    SummarySchema,
)
from ._engine import HINT_NAME, ContextEngine
from ._extractive import EmptySummarizer, ExtractiveSummarizer, extractive_summary, summarize_items
from ._ledger import ArtifactLedger, extract_ledger
from ._redact import REDACTED, Redactor, redact_credentials, redact_messages
from ._summarizer import (
    SUMMARY_ASK,
    ModelSummarizer,
    Summarizer,
    SummaryPrompt,
    SummaryRequest,
    SummaryResult,
    prefix_prompt,
    summary_prompt,
    transcript_entry,
    transcript_prompt,
)
from ._summary import SUMMARY_NAME, render_summary, safe_format
from ._trim import (
    READBACK_HINT,
    TRUNCATION_MARKER,
    TRUNCATION_MARKER_WITH_REF,
    ToolResultTruncator,
    truncation_marker,
)
from ._types import (
    CompressionEvent,
    CompressionHook,
    CompressionRequest,
    CompressionTrigger,
    ContextEvent,
    ContextEventHandler,
    ContextUsage,
    ImageRemovalEvent,
    ModelInput,
    TruncationEvent,
    UsageHintEvent,
)

__all__ = [
    "DEFAULT_COMPRESSION_PROMPT",
    "DEFAULT_SUMMARY_TEMPLATE",
    "DEFAULT_SUMMARY_UPDATE_PROMPT",
    "DEFAULT_SUMMARY_UPDATE_TEMPLATE",
    "HINT_NAME",
    "MIN_TOOL_RESULT_LIMIT",
    "READBACK_HINT",
    "REDACTED",
    "SUMMARY_ASK",
    "SUMMARY_NAME",
    "TRUNCATION_MARKER",
    "TRUNCATION_MARKER_WITH_REF",
    "ArtifactLedger",
    "CompressionEvent",
    "CompressionHook",
    "CompressionRequest",
    "CompressionTrigger",
    "ContextConfig",
    "ContextEngine",
    "ContextEvent",
    "ContextEventHandler",
    "ContextUsage",
    "EmptySummarizer",
    "ExtractiveSummarizer",
    "ImageRemovalEvent",
    "ModelInput",
    "ModelSummarizer",
    "Redactor",
    "Summarizer",
    "SummaryPrompt",
    "SummaryRequest",
    "SummaryResult",
    "SummarySchema",
    "ToolResultTruncator",
    "TruncationEvent",
    "UsageHintEvent",
    "extract_ledger",
    "extractive_summary",
    "prefix_prompt",
    "redact_credentials",
    "redact_messages",
    "render_summary",
    "safe_format",
    "summarize_items",
    "summary_prompt",
    "transcript_entry",
    "transcript_prompt",
    "truncation_marker",
]
