"""Summary generation: summarizer input that fits its window, retries, rendering."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._logging import logger
from ..message import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
)
from ..model import ChatModelBase
from ._config import ContextConfig
from ._truncate import head_within, tail_within

__all__ = [
    "SUMMARY_TOOL",
    "SummaryDraft",
    "SummaryWriter",
    "render_summary",
    "safe_format",
    "transcript_entry",
]

SUMMARY_TOOL = "write_summary"
"""Name of the forced tool the summarizer answers through."""

_SUMMARIZER_SYSTEM = (
    "You compress the history of an AI agent's session into a structured summary. The "
    "agent will continue its work from your summary alone."
)
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")


def safe_format(template: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders; never raises.

    Unknown placeholders become empty, other braces (JSON examples, lone ``{``) stay as
    they are, and ``{{`` / ``}}`` become single braces as in ``str.format``.
    """

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = values.get(match.group(1), "")
        return value if isinstance(value, str) else _as_text(value)

    return _PLACEHOLDER.sub(fill, template)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(f"- {_as_text(v)}" for v in value)
    return json.dumps(value, ensure_ascii=False, indent=1)


def render_summary(template: str, fields: Mapping[str, Any]) -> str:
    """The summary as the model will see it."""
    return safe_format(template, {k: _as_text(v) for k, v in fields.items()})


def transcript_entry(msg: Msg) -> str:
    """One message as plain text the summarizer can read (tool traffic included)."""
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
    return f"[{msg.role} {msg.name}]\n" + "\n".join(parts)


@dataclass(frozen=True)
class SummaryDraft:
    """The summarizer's request and what had to be left out of it."""

    messages: list[Msg]
    omitted: int
    """How many of the oldest messages did not fit the summarizer's window."""
    cut: bool
    """True when the oldest included message was cut to fit."""


class SummaryWriter:
    """Asks a model for a structured summary of messages, with retries."""

    def __init__(self, summarizer: ChatModelBase) -> None:
        self.summarizer = summarizer

    def draft(
        self,
        msgs: Sequence[Msg],
        *,
        previous: Msg | None,
        config: ContextConfig,
        instructions: HintBlock | None,
    ) -> SummaryDraft:
        """The request, trimmed oldest first to fit the summarizer's window.

        Room is left for the answer (a tenth of the window) and the summary tool schema.
        """
        counter = self.summarizer.token_counter
        size = self.summarizer.context_size
        prompt = safe_format(
            config.compression_prompt,
            {"current_time": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")},
        )
        hints = [HintBlock(hint=prompt)]
        if instructions is not None:
            hints.append(instructions)
        system = Msg("system", _SUMMARIZER_SYSTEM, "system")
        tool = ToolSpec(name=SUMMARY_TOOL, parameters=config.summary_schema)
        fixed = (
            counter.count_message(system)
            + counter.count_message(Msg("user", list(hints), "user"))
            + counter.count_tools([tool])
            + counter.count_request([], ())
            + size // 10
        )
        budget = size - fixed - 64  # JSON framing of the transcript block
        pieces: list[str] = []
        if previous is not None:
            old = previous.text
            old_budget = max(budget // 2, 0)
            if counter.count_text(old) > old_budget:
                old = head_within(counter, old, old_budget)
            pieces.append(f"<previous-summary>\n{old}\n</previous-summary>")
            budget -= counter.count_text(pieces[0]) + 4
        entries: list[str] = []
        omitted, cut = 0, False
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
                omitted = i
            else:
                omitted = i + 1
            break
        entries.reverse()
        if omitted or cut:
            entries.insert(
                0,
                f"[{omitted} older message(s) were left out to fit the summarizer's window"
                f"{' and the oldest one shown was cut' if cut else ''}.]",
            )
        pieces.append("<conversation>\n" + "\n\n".join(entries) + "\n</conversation>")
        request = Msg("user", [TextBlock(text="\n\n".join(pieces)), *hints], "user")
        return SummaryDraft([system, request], omitted, cut)

    async def write(
        self, draft: SummaryDraft, *, config: ContextConfig
    ) -> tuple[dict[str, Any], int]:
        """The summary fields and the attempts used; raises the last error when all fail.

        Each attempt is one structured-output call; cancellation is never swallowed.
        """
        error: Exception | None = None
        for attempt in range(1, config.summary_attempts + 1):
            try:
                fields = await self.summarizer.structured(
                    draft.messages,
                    config.summary_schema,
                    name=SUMMARY_TOOL,
                    description="Write the structured summary of the conversation.",
                    max_attempts=1,
                )
            except Exception as exc:  # any failure of the summarizer triggers the fallback
                error = exc
                logger.warning(
                    "summary attempt %d/%d failed: %s: %s",
                    attempt,
                    config.summary_attempts,
                    type(exc).__name__,
                    exc,
                )
                continue
            return fields, attempt
        assert error is not None
        raise error
