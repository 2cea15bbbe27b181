"""The context engine: compression, truncation, image limit, offload calls.

Usable without the agent: give :class:`ContextEngine` a token counter and a window, feed it
messages, and send what :meth:`ContextEngine.prepare` returns::

    engine = ContextEngine(counter=counter_for_model("gpt-4o"), context_size=128_000,
                           summarizer=ModelSummarizer(model), offloader=workspace)
    engine.append(Msg("user", "Fix the failing test.", "user"))
    model_input = await engine.prepare(system_prompt, tools)
    response = await model.generate(model_input.messages(), tools=model_input.tools)

Modules, one job each: ``_config`` (every knob), ``_types`` (model input, usage, events),
``_layer`` (:class:`SummaryLayer`, the typed summary layer and its budgets), ``_engine``
(the state, the step, the one commit), ``_accounting`` (what a request costs),
``_images`` (the image limit), ``_plan`` (the compaction planner, no I/O),
``_compaction`` (the tiers that execute a plan), ``_masking`` (observation masking),
``_hint`` (the usage note), ``_summarizer`` (the seam and the model-backed summarizer),
``_extractive`` (summarizers without a model), ``_summary`` (rendering a part),
``_ledger`` (facts kept beside the summary), ``_trim`` (truncation, split, escalation),
``_redact`` (the redaction hook applied to what leaves the context).
"""

from ._clock import Clock, SystemClock
from ._compaction import CompactionTier, CutKeptTier, Execution, MaskTier, Outcome, SummaryTier
from ._config import (
    DEFAULT_COMPRESSION_PROMPT,
    DEFAULT_SUMMARY_TEMPLATE,
    DEFAULT_SUMMARY_UPDATE_PROMPT,
    DEFAULT_SUMMARY_UPDATE_TEMPLATE,
    MIN_TOOL_RESULT_LIMIT,
    BackgroundConfig,
    ContextConfig,
    LayerConfig,
    MaskingConfig,
    SummarizerOptions,
    SummarySchema,
)
from ._engine import ContextEngine
from ._extractive import EmptySummarizer, ExtractiveSummarizer, extractive_summary, summarize_items
from ._hint import HINT_NAME
from ._latency import MeasuresLatency, SummaryLatencyModel
from ._layer import SUMMARY_NAME, PartBudget, SummaryLayer, is_summary
from ._ledger import ArtifactLedger, extract_ledger
from ._plan import CompactionPlan, SummaryPlan
from ._prefetch import Prefetch
from ._redact import REDACTED, Redactor, redact_credentials, redact_messages
from ._state import EngineState
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
from ._summary import render_summary, safe_format
from ._trim import (
    READBACK_HINT,
    TRUNCATION_MARKER,
    TRUNCATION_MARKER_WITH_REF,
    ToolResultTruncator,
    truncation_marker,
)
from ._types import (
    BackgroundCompactionEvent,
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
    "BackgroundCompactionEvent",
    "BackgroundConfig",
    "Clock",
    "CompactionPlan",
    "CompactionTier",
    "CompressionEvent",
    "CompressionHook",
    "CompressionRequest",
    "CompressionTrigger",
    "ContextConfig",
    "ContextEngine",
    "ContextEvent",
    "ContextEventHandler",
    "ContextUsage",
    "CutKeptTier",
    "EmptySummarizer",
    "EngineState",
    "Execution",
    "ExtractiveSummarizer",
    "ImageRemovalEvent",
    "LayerConfig",
    "MaskTier",
    "MaskingConfig",
    "MeasuresLatency",
    "ModelInput",
    "ModelSummarizer",
    "Outcome",
    "PartBudget",
    "Prefetch",
    "Redactor",
    "Summarizer",
    "SummarizerOptions",
    "SummaryLatencyModel",
    "SummaryLayer",
    "SummaryPlan",
    "SummaryPrompt",
    "SummaryRequest",
    "SummaryResult",
    "SummarySchema",
    "SummaryTier",
    "SystemClock",
    "ToolResultTruncator",
    "TruncationEvent",
    "UsageHintEvent",
    "extract_ledger",
    "extractive_summary",
    "is_summary",
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
