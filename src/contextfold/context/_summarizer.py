"""Who writes the summary: the ``Summarizer`` seam and the model-backed implementation.

The engine hands a summarizer the structured draft of one compression (the messages to
fold, the previous summary, the instructions and the schema) and gets the five fields of
compress-context.zh, section 自动压缩 (Automatic compression), step 生成摘要 (Generate the
summary), back. How the fields are produced is the summarizer's business: a chat model
prompted with a transcript (:class:`ModelSummarizer`), extraction without a model
(:class:`~contextfold.context.ExtractiveSummarizer`), or nothing at all
(:class:`~contextfold.context.EmptySummarizer`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, Protocol, runtime_checkable

from ..message import (
    MARKER_KEY,
    SUMMARY_TOOL,
    ContentBlock,
    DataBlock,
    HintBlock,
    Marker,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    marker_of,
)
from ..model import ChatModelBase, ModelSpeed
from ..token import TokenCounter
from ._config import DEFAULT_SUMMARY_UPDATE_PROMPT
from ._cut import HeadTailCut
from ._latency import SummaryLatencyModel
from ._layer import SummaryLayer, is_summary
from ._types import ModelInput

__all__ = [
    "SUMMARY_ASK",
    "ModelSummarizer",
    "Summarizer",
    "SummaryPrompt",
    "SummaryRequest",
    "SummaryResult",
    "prefix_prompt",
    "summary_prompt",
    "transcript_entry",
    "transcript_prompt",
]


SUMMARY_ASK = "Answer now with one JSON object"
"""How the instruction ending a prefix-form summary request starts (it then lists the
fields, one ``- name: description`` line each)."""

_SUMMARIZER_SYSTEM = (
    "You compress the history of an AI agent's session into a structured summary. The "
    "agent will continue its work from your summary alone."
)


@dataclass(frozen=True)
class SummaryRequest:
    """The structured draft of one compression, as the engine hands it to a summarizer."""

    messages: Sequence[Msg]
    """The messages to fold into the summary, oldest first."""
    previous: Msg | None
    """The current summary message, whose facts the new summary must keep."""
    instructions: str
    """The compression prompt (``ContextConfig.compression_prompt``, time filled in)."""
    hints: Sequence[HintBlock]
    """Instructions from the caller of this compression (``compress_context(instructions)``)."""
    schema: dict[str, Any]
    """JSON Schema the fields must satisfy (``ContextConfig.summary_schema``)."""
    max_attempts: int = 3
    """Attempts a summarizer that can fail may make (``ModelSummarizer(attempts=...)``
    overrides it)."""
    prefix: ModelInput | None = None
    """The request the agent was about to send, when the compression runs before a step:
    a summarizer on the agent's model can reuse it as a cached prefix."""
    previous_stays: bool = False
    """The previous summary stays in the layer word for word (``LayerConfig(update=
    "append")``): the fields cover only what ``messages`` add to it."""
    update_prompt: str | None = None
    """What a model summarizer tells its model when ``previous_stays``, when the config
    said so (the deprecated ``ContextConfig.summary_update_prompt``); ``None``: the
    summarizer's own."""

    @property
    def previous_fields(self) -> Mapping[str, Any] | None:
        """The previous summary's fields, when it was written by a summarizer."""
        if self.previous is None:
            return None
        return SummaryLayer.from_msg(self.previous).fields


@dataclass(frozen=True)
class SummaryResult:
    """A summarizer's answer: the fields, and what producing them took."""

    fields: dict[str, Any]
    attempts: int = 1
    """Attempts made (1 when the summarizer cannot fail)."""
    uncovered: int = 0
    """How many of the oldest messages the fields do not cover (they did not fit the
    summarizer's own window); the engine says so in the summary."""
    cut: bool = False
    """True when a covered message was only partly read: the oldest one a transcript
    shows, or (with ``uncovered`` 0) a message too long for a prefix-form request."""
    usage: Usage | None = field(default=None)
    """What the summarizer's model calls cost, when it used a model."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes the structured summary of one compression.

    Raise any exception to report failure: the engine then falls back to truncation (or
    raises :class:`~contextfold.CompressionError`, per ``ContextConfig``) and nothing is lost.
    """

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """The fields for ``request.messages`` (and ``request.previous``)."""
        ...


def transcript_entry(msg: Msg, *, header: bool = True) -> str:
    """One message as plain text a summarizer model can read (tool traffic included),
    after a ``[role name]`` line unless ``header`` is false."""
    parts: list[str] = []
    for block in msg.blocks():
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, HintBlock):
            parts.append(f"(runtime hint) {block.hint}")
        elif isinstance(block, ThinkingBlock):
            parts.append(f"(thinking) {block.thinking}")
        elif isinstance(block, ToolCallBlock):
            args = json.dumps(block.input, ensure_ascii=False)
            parts.append(f"(tool call {block.id}: {block.name}) {args}")
        elif isinstance(block, ToolResultBlock):
            status = " ERROR" if block.is_error else ""
            images = ""
            if not isinstance(block.output, str):
                n = sum(1 for b in block.output if isinstance(b, DataBlock))
                images = f" [{n} attachment(s)]" if n else ""
            parts.append(f"(tool result {block.id}: {block.name}{status}){images} {block.text()}")
        elif isinstance(block, DataBlock):
            parts.append(
                f"[{block.kind}: {block.media_type}{' ' + block.name if block.name else ''}]"
            )
    body = "\n".join(parts)
    return f"[{msg.role} {msg.name}]\n{body}" if header else body


@dataclass(frozen=True)
class SummaryPrompt:
    """The request a model summarizer sends: messages, the tools left on offer (``None``
    for the transcript form, which forces the summary tool instead), and what the
    transcript had to leave out."""

    messages: list[Msg]
    offered: tuple[ToolSpec, ...] | None
    uncovered: int = 0
    cut: bool = False


class ModelSummarizer:
    """A chat model writes the summary.

    When the request carries the agent's own prefix (``request="prefix"``, the default)
    and it fits this model's window, the summary request *is*
    that request plus one trailing instruction: same system prompt, summary, context and
    tools, so a provider's prompt cache (or llama.cpp's KV cache) serves it as a read, and
    the JSON answer comes as text (after an answer that ignores that format, the attempts
    force the summary tool). Otherwise the messages are rendered as a transcript,
    trimmed oldest first to fit the window (room is left for the answer, a tenth of the
    window, and the tool schema; what was left out is reported in
    :attr:`SummaryResult.uncovered`), and the answer is a forced tool call. Invalid output
    is retried with the validation error fed back, up to ``attempts`` attempts in all (or
    the request's ``max_attempts``). When the summary in place stays (``previous_stays``),
    ``update_prompt`` tells the model to write only what the new messages add.
    """

    def __init__(
        self,
        model: ChatModelBase,
        *,
        request: Literal["prefix", "transcript"] = "prefix",
        attempts: int | None = None,
        update_prompt: str = DEFAULT_SUMMARY_UPDATE_PROMPT,
    ) -> None:
        if request not in ("prefix", "transcript"):
            raise ValueError(f"request must be 'prefix' or 'transcript', got {request!r}")
        if attempts is not None and not 1 <= attempts <= 10:
            raise ValueError(f"attempts must be from 1 to 10, got {attempts}")
        self.model = model
        self.request = request
        """``"prefix"`` sends the agent's own request (same system prompt, summary, context
        and tools) plus a trailing instruction, so a prompt cache serves it as a read;
        ``"transcript"`` sends the folded messages as a fresh transcript (the only form
        when the request would not fit this model's window)."""
        self.attempts = attempts
        """Attempts before the engine falls back (``None``: the request's, 3 by default)."""
        self.update_prompt = update_prompt
        """Added to the instructions when the summary in place stays and only a part for
        the new messages is written."""

    def __repr__(self) -> str:
        return f"ModelSummarizer({self.model.model_name!r})"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """The fields, by one structured-output call with retries."""
        prompt = self.prompt(request)
        attempts = self.attempts if self.attempts is not None else request.max_attempts
        output = await self.model.structured_output(
            prompt.messages,
            request.schema,
            name=SUMMARY_TOOL,
            description="Write the structured summary of the conversation.",
            max_attempts=attempts,
            # Any failure of an attempt (an empty answer, a provider error that survived
            # the model's own retries) uses one up; the summary falls back after the last.
            retry_on=(Exception,),
            offered=prompt.offered,
        )
        return SummaryResult(
            fields=output.value,
            attempts=output.attempts,
            uncovered=prompt.uncovered,
            cut=prompt.cut,
        )

    async def measure_latency(
        self, sample: SummaryRequest, tokens: int
    ) -> SummaryLatencyModel | None:
        """This summarizer's latency, from its model's measured speed, when the model can
        measure it (``LocalChatModel.measure_speed``; a provider's model cannot without a
        paid call: ``None``). See :class:`MeasuresLatency`. Reading: what this
        summarizer would send for ``sample`` (:meth:`prompt`), by its model's tokenizer,
        at the prompt rate: its instructions and framing as a fixed part, and each token
        of usage the share the sample's messages take per token of the engine's count
        (``tokens``; a log's digits are several tokens each to a small model's
        tokenizer). Writing: ``max_tokens`` (when the model has one) at the output rate;
        both slower the deeper into the context (``ModelSpeed.depth_cost``).
        A second attempt is left to the caller's margin."""
        measure = getattr(self.model, "measure_speed", None)
        if not callable(measure):
            return None
        speed = await measure()
        if not isinstance(speed, ModelSpeed):
            return None
        counter = self.model.token_counter
        prompt = self.prompt(sample)
        tools = prompt.offered
        if tools is None:  # the transcript form: the summary tool is forced
            tools = (ToolSpec(name=SUMMARY_TOOL, parameters=sample.schema),)
        whole = counter.count_request(prompt.messages, tools)
        ours = sum(counter.count_message(m) for m in sample.messages)
        written = getattr(self.model, "max_tokens", 0)
        return SummaryLatencyModel(
            speed=speed,
            fixed_tokens=max(0, whole - ours),
            per_token=ours / tokens if tokens > 0 and ours > 0 else 1.0,
            written=written if isinstance(written, int) else 0,
        )

    def prompt(self, request: SummaryRequest) -> SummaryPrompt:
        """The request this summarizer sends first (the agent's prefix, or a transcript)."""
        if self.request == "transcript":
            request = replace(request, prefix=None)
        if request.previous_stays:
            hint = HintBlock(hint=request.update_prompt or self.update_prompt)
            request = replace(request, hints=(hint, *request.hints))
        return summary_prompt(request, self.model.token_counter, self.model.context_size)


def summary_prompt(request: SummaryRequest, counter: TokenCounter, size: int) -> SummaryPrompt:
    """The request a model summarizer with a ``size``-token window sends first: the
    agent's prefix (:func:`prefix_prompt`) when the request carries one and it fits with a
    tenth of the window left for the answer, else the transcript (:func:`transcript_prompt`)."""
    prefixed = prefix_prompt(request)
    if prefixed is not None:
        room = size - size // 10
        needed = _size(prefixed, counter)
        if needed <= room:
            return prefixed
        fitted = _cut_newest(prefixed, counter, needed - room)
        if fitted is not None and _size(fitted, counter) <= room:
            return fitted
    return transcript_prompt(request, counter, size)


def _size(prompt: SummaryPrompt, counter: TokenCounter) -> int:
    return counter.count_request(prompt.messages, prompt.offered or ())


_KEPT_OF_CUT = 200
"""Tokens at least kept of a message cut to fit a summary request."""

_MESSAGE_CUT = HeadTailCut(
    head_share=Fraction(2, 3), marker="\n[... cut here to fit the summarizer's window ...]\n"
)
"""How the longest text of such a message is cut: two thirds head, one third tail."""

_HEAD = HeadTailCut()
_TAIL = HeadTailCut(head_share=Fraction(0))


def _cut_newest(prompt: SummaryPrompt, counter: TokenCounter, excess: int) -> SummaryPrompt | None:
    """``prompt`` (a prefix-form request) with the text of its newest messages cut, head
    and tail, until it is ``excess`` tokens smaller; ``None`` when that is not enough.

    What comes before the cut messages is the request the agent last sent, which the
    provider's cache holds: it goes out unchanged, where a transcript would be a new
    prompt, all of it written to the cache. An over-window request is usually one huge
    newest turn (a pasted file, a model's runaway answer), and cutting it costs less of
    what the summary reads than cutting the oldest messages of a transcript. The whole
    message is offloaded with the others, as always.
    """
    messages = list(prompt.messages)
    for i in range(len(messages) - 2, -1, -1):  # the trailing instruction stays
        msg = messages[i]
        if msg.role == "system" or is_summary(msg):
            break
        tokens = counter.count_message(msg)
        if tokens <= 2 * _KEPT_OF_CUT:
            continue
        cut = _cut_message(msg, counter, max(_KEPT_OF_CUT, tokens - excess))
        if cut is None:
            continue
        excess -= tokens - counter.count_message(cut)
        messages[i] = cut
        if excess <= 0:
            return SummaryPrompt(messages, prompt.offered, 0, True)
    return None


def _cut_message(msg: Msg, counter: TokenCounter, target: int) -> Msg | None:
    """``msg`` with its longest text (a text block or a tool result's text) cut to bring
    the message to about ``target`` tokens; ``None`` if it has no text to cut."""
    blocks = msg.blocks()
    texts = [_text_of(b) for b in blocks]
    sizes = [-1 if t is None else counter.count_text(t) for t in texts]
    j = max(range(len(blocks)), key=sizes.__getitem__, default=None)
    text = None if j is None else texts[j]
    if j is None or text is None or sizes[j] <= 0:
        return None
    keep = max(sizes[j] - (counter.count_message(msg) - target), 0)
    text = _MESSAGE_CUT.cut(counter, text, keep, tokens=sizes[j])
    block = blocks[j]
    new = (
        block.model_copy(update={"text": text})
        if isinstance(block, TextBlock)
        else block.model_copy(update={"output": text})
    )
    return msg.model_copy(update={"content": [*blocks[:j], new, *blocks[j + 1 :]]})


def _text_of(block: ContentBlock) -> str | None:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolResultBlock):
        return block.text()
    return None


def prefix_prompt(request: SummaryRequest) -> SummaryPrompt | None:
    """The agent's own request plus a trailing instruction to answer with the fields as
    one JSON object, or ``None`` without a prefix."""
    if request.prefix is None:
        return None
    messages = [m for m in request.prefix.messages() if marker_of(m) is not Marker.USAGE_HINT]
    fields = request.schema.get("properties")
    lines = []
    if isinstance(fields, dict):
        for name, spec in fields.items():
            about = spec.get("description", "") if isinstance(spec, dict) else ""
            lines.append(f"- {name}: {about}".rstrip(": "))
    ask = SUMMARY_ASK + " and nothing else (call no tool), with these string fields:\n"
    ask += "\n".join(lines)
    hints = [HintBlock(hint=request.instructions), HintBlock(hint=ask), *request.hints]
    instruction = Msg(
        "user", list(hints), "user", metadata={MARKER_KEY: Marker.SUMMARY_REQUEST.value}
    )
    return SummaryPrompt([*messages, instruction], request.prefix.tools)


def transcript_prompt(request: SummaryRequest, counter: TokenCounter, size: int) -> SummaryPrompt:
    """A system turn, then the folded messages as a transcript (newest kept first, within
    ``size``), then the instructions; answered through the forced summary tool."""
    hints = [HintBlock(hint=request.instructions), *request.hints]
    system = Msg("system", _SUMMARIZER_SYSTEM, "system")
    tool = ToolSpec(name=SUMMARY_TOOL, parameters=request.schema)
    fixed = (
        counter.count_message(system)
        + counter.count_message(Msg("user", list(hints), "user"))
        + counter.count_tools([tool])
        + counter.count_request([], ())
        + size // 10
    )
    budget = size - fixed - 64  # JSON framing of the transcript block
    pieces: list[str] = []
    if request.previous is not None:
        old = request.previous.text
        old_budget = max(budget // 2, 0)
        old = _HEAD.cut(counter, old, old_budget)
        pieces.append(f"<previous-summary>\n{old}\n</previous-summary>")
        budget -= counter.count_text(pieces[0]) + 4
    entries: list[str] = []
    msgs = request.messages
    uncovered, cut = 0, False
    for i in range(len(msgs) - 1, -1, -1):
        entry = transcript_entry(msgs[i])
        cost = counter.count_text(entry) + 2
        if cost <= budget:
            entries.append(entry)
            budget -= cost
            continue
        if budget > 64:
            entries.append(_TAIL.cut(counter, entry, budget - 8, tokens=cost - 2))
            cut = True
            uncovered = i
        else:
            uncovered = i + 1
        break
    entries.reverse()
    if uncovered or cut:
        entries.insert(
            0,
            f"[{uncovered} older message(s) were left out to fit the summarizer's window"
            f"{' and the oldest one shown was cut' if cut else ''}.]",
        )
    pieces.append("<conversation>\n" + "\n\n".join(entries) + "\n</conversation>")
    user = Msg("user", [TextBlock(text="\n\n".join(pieces)), *hints], "user")
    return SummaryPrompt([system, user], None, uncovered, cut)
