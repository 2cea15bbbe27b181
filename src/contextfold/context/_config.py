"""ContextConfig: every knob of the context engine, validated, grouped by concern.

The spec's ten fields (compress-context.zh, section 配置压缩, Configuring compression) keep
their names, meanings and defaults; what goes beyond the spec is grouped: the summary
layer (:class:`LayerConfig`), observation masking (:class:`MaskingConfig`), the saving a
compaction must bring, what truncation keeps, and redaction. What only a model summarizer
reads lives on :class:`~contextfold.context.ModelSummarizer`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

__all__ = [
    "DEFAULT_COMPRESSION_PROMPT",
    "DEFAULT_SUMMARY_TEMPLATE",
    "DEFAULT_SUMMARY_UPDATE_PROMPT",
    "DEFAULT_SUMMARY_UPDATE_TEMPLATE",
    "MIN_TOOL_RESULT_LIMIT",
    "ContextConfig",
    "LayerConfig",
    "MaskingConfig",
    "SummarizerOptions",
    "SummarySchema",
]


MIN_TOOL_RESULT_LIMIT = 100
"""The smallest ``tool_result_limit``: room for the truncation marker, the read-back hint
and a little of the result. A marker whose reference would take more than half the limit
is written without the reference (the truncation event still carries it)."""


class SummarySchema(BaseModel):
    """The five fields of a structured summary."""

    task_overview: str = Field(
        description="What the user asked for, the success criteria, and every constraint "
        "or clarification they gave."
    )
    current_state: str = Field(
        description="What is done so far: files created, changed or inspected (full paths), "
        "commands run, results and artifacts produced."
    )
    important_discoveries: str = Field(
        description="Facts learned, decisions and why, errors met (verbatim) and how they "
        "were resolved, approaches that failed and why."
    )
    next_steps: str = Field(
        description="Concrete remaining actions in priority order, open questions, blockers, "
        "and any tool calls still awaiting results."
    )
    context_to_preserve: str = Field(
        description="User preferences, promises made, identifiers, paths, names and numbers "
        "that must survive verbatim."
    )


DEFAULT_COMPRESSION_PROMPT = (
    "<system-reminder>The conversation above is about to be replaced by a summary you write now. "
    "You will continue the work from that summary alone, so make it complete, structured "
    "and actionable. The current time is {current_time}.\n"
    "The history it replaces will be gone, so every reference must stand on its own:\n"
    "- Write absolute dates and times, not 'today' or 'recently'.\n"
    "- Quote file paths, function and class names, ids, URLs, commands and error messages "
    "verbatim instead of 'that file' or 'the error above'.\n"
    "- List unfinished work with its status (done / pending / blocked) and whether the user "
    "asked for it or you decided it.\n"
    "If a previous summary is given, fold its facts into the new one; drop nothing that is "
    "still relevant.</system-reminder>"
)
"""Default instruction for the summarizer; ``{current_time}`` is filled in."""

DEFAULT_SUMMARY_TEMPLATE = (
    "<system-reminder>Summary of the earlier part of this session, which was compressed.\n"
    "# Task overview\n{task_overview}\n\n"
    "# Current state\n{current_state}\n\n"
    "# Important discoveries\n{important_discoveries}\n\n"
    "# Next steps\n{next_steps}\n\n"
    "# Context to preserve\n{context_to_preserve}\n\n"
    "{artifacts}</system-reminder>"
)
"""Default rendering of a summary; placeholders are the schema's field names, and
``{artifacts}`` is where the engine puts what it adds itself (the reference to the saved
messages and the ledger)."""

DEFAULT_SUMMARY_UPDATE_TEMPLATE = (
    "<system-reminder>Update to the summary above: what happened after it, which was "
    "compressed too. Where the two differ, this one is newer.\n"
    "{task_overview}"
    "# Current state\n{current_state}\n\n"
    "# Important discoveries\n{important_discoveries}\n\n"
    "# Next steps\n{next_steps}\n\n"
    "# Context to preserve\n{context_to_preserve}\n\n"
    "{artifacts}</system-reminder>"
)
"""How a part appended to the summary is shown (``summary_update="append"``). Its
``task_overview`` is empty unless the task changed; then it comes first, under a
``# Task changes`` heading the engine adds."""

DEFAULT_SUMMARY_UPDATE_PROMPT = (
    "The summary at the start of this conversation stays in place this time, so do not fold "
    "it in: write only what the messages after it add, without repeating what it says. "
    "Leave task_overview empty unless the task itself changed."
)
"""Added to the summarizer's instructions when it writes a part to append."""


class LayerConfig(BaseModel):
    """How compactions build the summary layer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    update: Literal["rewrite", "append"] = "append"
    """What a compaction does with the summary already in place. ``"append"`` keeps it,
    word for word, as the first part of the layer and adds a part that covers only the
    newly compressed messages (``update_template``; its ledger lists only facts
    the layer does not list yet): the provider's cache still holds the old part, so the
    compaction writes only the new one, and the summarizer writes less. The layer stays
    within the summary's and the ledger's budgets: when less than a third of either is
    left, or the part could not list every fact of this compaction that a rewritten
    ledger would, the compaction rewrites instead. ``"rewrite"`` always folds the summary
    into one new summary. ``"append"`` was chosen by the options benchmark (BENCHMARKS.md,
    "Options: cache-preserving compaction"): on the 44 recorded SWE-bench runs under the
    Anthropic cache model it cost 0.8% less in total at a 16k window and 0.2% less at 32k
    (the median run, compressed at most once, costs the same), read 0.1 point more of the
    input from the cache at 16k, and kept every fact the grader checks."""

    update_template: str = DEFAULT_SUMMARY_UPDATE_TEMPLATE
    """How an appended part is shown; placeholders as in ``summary_template``."""

    ledger_ratio: float = Field(default=0.2, ge=0, le=0.3)
    """Share of the window the artifact ledger may take in the summary (files, commands
    with exit status, errors, names, the user's constraints) at the first compaction; 0
    keeps no ledger. A fact a rewrite drops is lost from every later request, so the
    ledger starts near its ceiling: from 0.1 the long runs lost their older commands at
    the early rewrites (whole-run commands at 16k on the 44 SWE-bench runs: 92.1% kept
    with ``none``, 97.5% from 0.2, 97.4% from 0.25; 1.1 points of cost more than 0.1 in
    the replay's Anthropic cache model, BENCHMARKS.md "Issue 27 points 1-2")."""

    ledger_max_ratio: float = Field(default=0.25, ge=0, le=0.4)
    """Share of the window the ledger grows to as the run goes on: each compaction adds a
    quarter of ``ledger_ratio`` until this share (never below ``ledger_ratio``, always
    within three quarters of the summary's budget). A long run has done more that the next
    step may need (files changed, commands run), and what the ledger leaves out is only
    in the saved messages."""

    request_ratio: float = Field(default=0.25, ge=0, le=0.5)
    """Share of the summary's budget the user's earlier messages take, word for word: what
    the user asked is kept as written, newest first, before any of it is left to the
    summarizer's words (a message longer than what is left keeps its head and tail); 0
    keeps none. The request in progress is never folded at all."""


class BackgroundConfig(BaseModel):
    """Compaction prepared off the critical path: shortly before the trigger (see
    ``start_ratio``), the summary of a snapshot is written in the background while the
    agent keeps working from the full context; at the first step it is ready (below the
    trigger when it frees ``reserve_ratio`` of the window and a typical step, else at the
    trigger) the prepared summary is swapped in and everything that arrived after the
    snapshot is kept, so the agent waits only for what is left of the summary, if
    anything. When the context grows fast the summaries chain: the next starts as soon as
    one is swapped in (still one in flight at a time); a step that jumps past the trigger
    with none in flight starts one there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_ratio: float = Field(default=0.6, gt=0, lt=1)
    """Between ``reserve_ratio`` and ``trigger_ratio``: a summary never starts below
    halfway between ``reserve_ratio`` and this mark, and starts past it while the rate
    the context grows at is not known yet (fewer than two steps added to it). Otherwise
    it starts as late as it can and still be ready in time: once, at that rate, the
    trigger comes within its latency and half a typical step (ready when usage crosses
    it), or the point where the agent would wait for it (``wait_ratio``) within 1.25
    times its latency and a typical step. Its latency: the slowest of the last five
    summaries timed (blocking ones too), scaled up to a larger input; until one is, the
    summarizer's own measure, else ``assumed_latency_s``. The later the snapshot, the
    more a summary folds; a summary ready early is swapped in at once (each step held
    would be a turn kept beside it)."""

    assumed_latency_s: float = Field(default=10.0, gt=0)
    """The summary's latency assumed until one has been measured (the first summary of a
    session), unless the summarizer measures its own (``MeasuresLatency``: a
    ``ModelSummarizer`` over the embedded model does, in the background, once the context
    has grown over two steps): a model writing a summary of a window takes seconds to a
    minute. A larger
    value starts the first summary earlier (it folds less, and more are discarded at the
    run's end); a smaller one risks a wait when the context grows fast."""

    wait_ratio: float = Field(default=0.9, gt=0, le=0.95)
    """Past the trigger, while a summary is being prepared, the agent goes on from the full
    context as long as usage plus the model's typical (median) recent reply stays within
    this share of the window; only then does it wait for the summary (a step's tool
    results come after the reply and are checked before the next request). The room
    above the trigger is kept for a compaction call; with one already in flight it is
    not needed. At or below ``trigger_ratio``: wait at the trigger."""

    idle: bool = True
    """Between turns, when the next turn would likely cross the trigger (the context plus
    the median growth of recent turns), prepare and apply the compaction before the
    provider's prompt cache expires (``ChatModel.cache_lifetime``), so the summary call
    reads the cached prefix instead of writing it again. Our :class:`Agent` does this; a
    model without a cache lifetime never triggers it."""
    idle_margin_s: float = Field(default=90.0, ge=0)
    """How long before the cache lifetime runs out the idle compaction starts. Waiting
    until then costs nothing if the user comes back sooner: their turn reads a warm cache
    anyway, and no compaction is spent on a guess. 90 s because the lifetime counts from
    the last request, not the last answer: in the recorded Claude Code sessions the
    longest pause after which Anthropic still read the cache was 241 s of the nominal 300,
    and every pause of 263 s or more found it cold."""


class MaskingConfig(BaseModel):
    """Observation masking: before summarizing, try replacing old tool results (outside
    the kept part) by a one-line placeholder naming where the whole output is saved, all
    in one batch: no summary call, and the prefix before the first masked result stays
    cached. The summary runs when masking cannot bring usage to halfway between reserve
    and trigger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_policies: dict[str, Literal["protect", "mask", "strip"]] = Field(default_factory=dict)
    """Per tool name: ``"protect"`` keeps its results from masking, ``"strip"`` masks them
    even in the kept part (all but the newest turn), ``"mask"`` (any tool not listed) masks
    them outside the kept part."""


_OLD_NAMES = {
    "summary_update": "ContextConfig(layer=LayerConfig(update=...))",
    "summary_update_template": "ContextConfig(layer=LayerConfig(update_template=...))",
    "ledger_ratio": "ContextConfig(layer=LayerConfig(ledger_ratio=...))",
    "observation_masking": "ContextConfig(masking=MaskingConfig())",
    "tool_policies": "ContextConfig(masking=MaskingConfig(tool_policies=...))",
    "summary_request": "ModelSummarizer(model, request=...)",
    "summary_attempts": "ModelSummarizer(model, attempts=...)",
    "summary_update_prompt": "ModelSummarizer(model, update_prompt=...)",
}
"""Beyond-spec fields of 0.1, by old name: where they are now."""

_LAYER_NAMES = {
    "summary_update": "update",
    "summary_update_template": "update_template",
    "ledger_ratio": "ledger_ratio",
}


@dataclass(frozen=True)
class SummarizerOptions:
    """What a config of 0.1 said about the model summarizer (deprecated spellings):
    the engine passes it on in each :class:`SummaryRequest`."""

    request: Literal["prefix", "transcript"] | None = None
    attempts: int | None = None
    update_prompt: str | None = None


def _moved(data: dict[str, Any]) -> SummarizerOptions:
    """Rewrite the old spellings in ``data`` (a ``ContextConfig``'s keywords) to their new
    places, warning once for each; what belongs to the summarizer is returned."""
    old = [k for k in data if k in _OLD_NAMES]
    if not old:
        return SummarizerOptions()
    for name in old:
        warnings.warn(
            f"ContextConfig({name}=...) is deprecated and will be removed in the next "
            f"release: use {_OLD_NAMES[name]}",
            DeprecationWarning,
            stacklevel=3,
        )
    layer = data.get("layer")
    layer_options = layer.model_dump() if isinstance(layer, LayerConfig) else dict(layer or {})
    for name, field in _LAYER_NAMES.items():
        if name in data:
            layer_options[field] = data.pop(name)
    data["layer"] = LayerConfig(**layer_options)
    masking_on = data.pop("observation_masking", None)
    policies = data.pop("tool_policies", None)
    if masking_on or (masking_on is None and data.get("masking") is not None and policies):
        data["masking"] = MaskingConfig(tool_policies=policies or {})
    elif masking_on is False:
        data["masking"] = None
    attempts = data.pop("summary_attempts", None)
    if attempts is not None and not (isinstance(attempts, int) and 1 <= attempts <= 10):
        raise ValueError(f"summary_attempts must be an integer from 1 to 10, got {attempts!r}")
    request = data.pop("summary_request", None)
    if request not in (None, "prefix", "transcript"):
        raise ValueError(f"summary_request must be 'prefix' or 'transcript', got {request!r}")
    return SummarizerOptions(
        request=request, attempts=attempts, update_prompt=data.pop("summary_update_prompt", None)
    )


class ContextConfig(BaseModel):
    """How the agent keeps its model input inside the context window.

    Every ratio is of the model's ``context_size``. Out-of-range values raise
    ``ValueError`` (pydantic's ``ValidationError``) naming the field; the check that
    ``context_buffer_ratio < trigger_ratio`` runs when an agent is built
    (:meth:`check_buffer`), so a one-off override for ``compress_context`` need not
    carry a buffer.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    trigger_ratio: float = Field(default=0.8, gt=0, le=0.9)
    """Compress when the model input exceeds this share of the window (at most 0.9: the
    rest is room for the compression call itself)."""

    reserve_ratio: float = Field(default=0.05, gt=0, lt=0.9)
    """After compression, recent messages within this share of the window stay verbatim
    (the newest turn always does): the low-water mark compression goes down to. 0.05, not
    AgentScope's 0.1, was chosen by the options benchmark (BENCHMARKS.md, "Options:
    cache-preserving compaction"): on the 44 recorded SWE-bench runs under the Anthropic
    cache model it cost least per run (median 2.3% below 0.1 at a 16k window, equal at
    32k) with retention as high and no request over the window; 0.2 and 0.3 cost more."""

    tool_result_limit: int = Field(default=50_000, ge=MIN_TOOL_RESULT_LIMIT)
    """Largest tool result kept in context, in tokens; longer ones are truncated. The
    effective limit is also bounded by the window: a result is never kept larger than what
    ``trigger_ratio x context_size`` leaves after the system prompt, the tools and the
    summary (as of the last step), so the model always sees a fresh result before any
    summary covers it. At least :data:`MIN_TOOL_RESULT_LIMIT`, so the truncation marker
    always fits with some content."""

    max_image_num: int = Field(default=5, ge=0)
    """Most images kept in context; older ones leave with a placeholder. 0 keeps none."""

    context_buffer_ratio: float = Field(default=0.2, ge=0, le=1)
    """Usage hints start at ``trigger_ratio - context_buffer_ratio``, which is also the
    threshold of the ``CompressContext`` tool."""

    compression_tool_enabled: bool = False
    """Offer the agent a ``CompressContext`` tool."""

    compression_fallback_to_truncation: bool = True
    """When every summary attempt fails, drop the oldest messages instead of raising."""

    compression_prompt: str = DEFAULT_COMPRESSION_PROMPT
    """Instruction to the summarizer; may contain ``{current_time}``."""

    summary_template: str = DEFAULT_SUMMARY_TEMPLATE
    """How a summary is shown to the model; ``{field}`` placeholders name schema fields.
    Other braces are kept literally."""

    summary_schema: dict[str, Any] = Field(default_factory=SummarySchema.model_json_schema)
    """JSON Schema of the structured summary."""

    # Beyond compress-context.zh, section 配置压缩 (Configuring compression), by concern.
    layer: LayerConfig = Field(default_factory=lambda: LayerConfig())
    """The summary layer: how a compaction updates it, and the ledger's share."""

    masking: MaskingConfig | None = None
    """Observation masking before any summary; ``None`` (the default) is off."""

    min_compaction_saving: float = Field(default=0.0, ge=0, lt=1)
    """An automatic compaction that would free less than this share of the window is
    skipped (the context is left as it is until the next step), so a compaction always
    pays for the cache it breaks. 0 compacts whenever over the trigger."""

    background: BackgroundConfig | None = None
    """Compaction prepared in the background before the trigger (:class:`BackgroundConfig`);
    ``None`` (the default) compacts at the trigger, the agent waiting for the summary."""

    truncation_keep: Literal["head_tail", "head"] = "head_tail"
    """What a truncated tool result keeps: its head and tail (default, since errors and
    final lines usually sit at the end) or its head only, as AgentScope does."""

    redact: Callable[[str], str] | None = None
    """Applied to every text before it is offloaded or summarized (compressed messages,
    truncated tool results, the summarizer's request); ``None`` keeps content as it is.
    ``contextfold.context.redact_credentials`` masks common credential shapes. The live
    context is not changed: the model has seen it already."""

    _summarizer: SummarizerOptions = PrivateAttr(default_factory=SummarizerOptions)

    def __init__(self, **data: Any) -> None:
        summarizer = _moved(data)
        super().__init__(**data)
        self._summarizer = summarizer

    @property
    def summarizer_options(self) -> SummarizerOptions:
        """What this config said about the model summarizer under a deprecated name."""
        return self._summarizer

    @model_validator(mode="after")
    def _reserve_below_trigger(self) -> ContextConfig:
        if self.reserve_ratio >= self.trigger_ratio:
            raise ValueError(
                f"reserve_ratio ({self.reserve_ratio}) must be smaller than trigger_ratio "
                f"({self.trigger_ratio}), or compression could not bring usage under the trigger"
            )
        start = self.background.start_ratio if self.background is not None else None
        if start is not None and not self.reserve_ratio < start < self.trigger_ratio:
            raise ValueError(
                f"background.start_ratio ({start}) must be between reserve_ratio "
                f"({self.reserve_ratio}) and trigger_ratio ({self.trigger_ratio})"
            )
        return self

    @property
    def hint_ratio(self) -> float:
        """Where usage hints and the ``CompressContext`` tool's threshold start."""
        return self.trigger_ratio - self.context_buffer_ratio

    def check_buffer(self) -> None:
        """Raise ``ValueError`` unless ``context_buffer_ratio < trigger_ratio``."""
        if self.context_buffer_ratio >= self.trigger_ratio:
            raise ValueError(
                f"context_buffer_ratio ({self.context_buffer_ratio}) must be smaller than "
                f"trigger_ratio ({self.trigger_ratio}): usage hints must start before "
                "automatic compression does"
            )

    def __getattr__(self, name: str) -> Any:
        # Reads of the old spellings, for one release (pydantic calls this only for names
        # it does not know).
        if name in _OLD_NAMES:
            warnings.warn(
                f"ContextConfig.{name} is deprecated and will be removed in the next "
                f"release: use {_OLD_NAMES[name]}",
                DeprecationWarning,
                stacklevel=2,
            )
            return _old_value(self, name)
        return super().__getattr__(name)  # type: ignore[misc]


def _old_value(config: ContextConfig, name: str) -> Any:
    if name in _LAYER_NAMES:
        return getattr(config.layer, _LAYER_NAMES[name])
    if name == "observation_masking":
        return config.masking is not None
    if name == "tool_policies":
        return dict(config.masking.tool_policies) if config.masking is not None else {}
    options = config.summarizer_options
    if name == "summary_request":
        return options.request or "prefix"
    if name == "summary_attempts":
        return options.attempts or 3
    return options.update_prompt or DEFAULT_SUMMARY_UPDATE_PROMPT
