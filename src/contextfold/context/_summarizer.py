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
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..message import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
)
from ..model import ChatModelBase
from ..token import head_within, tail_within
from ._types import ModelInput

__all__ = [
    "SUMMARY_TOOL",
    "ModelSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "transcript_entry",
]

SUMMARY_TOOL = "write_summary"
"""Name of the forced tool a model summarizer answers through."""

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
    """Attempts a summarizer that can fail may make (``ContextConfig.summary_attempts``)."""
    prefix: ModelInput | None = None
    """The request the agent was about to send, when the compression runs before a step:
    a summarizer on the agent's model can reuse it as a cached prefix."""

    @property
    def previous_fields(self) -> Mapping[str, Any] | None:
        """The previous summary's fields, when it was written by a summarizer."""
        fields = self.previous.metadata.get("fields") if self.previous is not None else None
        return fields if isinstance(fields, Mapping) else None


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
    """True when the oldest covered message was only partly read."""
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
class _Prompt:
    messages: list[Msg]
    uncovered: int
    cut: bool


class ModelSummarizer:
    """A chat model writes the summary from a transcript, through a forced tool call.

    The transcript is trimmed oldest first to fit the model's own window (room is left for
    the answer, a tenth of the window, and the tool schema); what was left out is reported
    in :attr:`SummaryResult.uncovered`. Invalid output is retried with the validation error
    fed back, up to ``request.max_attempts`` attempts in all.
    """

    def __init__(self, model: ChatModelBase) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"ModelSummarizer({self.model.model_name!r})"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """The fields, by one structured-output call with retries."""
        prompt = self.prompt(request)
        output = await self.model.structured_output(
            prompt.messages,
            request.schema,
            name=SUMMARY_TOOL,
            description="Write the structured summary of the conversation.",
            max_attempts=request.max_attempts,
            # Any failure of an attempt (an empty answer, a provider error that survived
            # the model's own retries) uses one up; the summary falls back after the last.
            retry_on=(Exception,),
        )
        return SummaryResult(
            fields=output.value,
            attempts=output.attempts,
            uncovered=prompt.uncovered,
            cut=prompt.cut,
        )

    def prompt(self, request: SummaryRequest) -> _Prompt:
        """The summarizer's messages: a system turn, then transcript and instructions."""
        counter = self.model.token_counter
        size = self.model.context_size
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
            if counter.count_text(old) > old_budget:
                old = head_within(counter, old, old_budget)
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
                entries.append(tail_within(counter, entry, budget - 8))
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
        return _Prompt([system, user], uncovered, cut)
