"""Summarizers without a model: extraction (deterministic) and the empty summary.

:class:`ExtractiveSummarizer` reads the messages to fold directly (no prompt round trip)
and keeps what a summary must: the first user request, the last commands, error lines,
file paths, the functions and classes defined, identifiers, and the last thing the
assistant said (not bare numbers: line numbers of a listing crowded out the commands).
The facts are found by the patterns the artifact ledger uses (:mod:`._facts`). No model,
no randomness; hundreds of runs replay in seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..message import HintBlock, Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock
from ._facts import command_of, extract_ledger, identifiers
from ._summarizer import SummaryRequest, SummaryResult

__all__ = ["EmptySummarizer", "ExtractiveSummarizer", "extractive_summary", "summarize_items"]

SUMMARY_FIELDS = (
    "task_overview",
    "current_state",
    "important_discoveries",
    "next_steps",
    "context_to_preserve",
)

# Character caps per field: generous, but finite like a real summary.
_FIELD_CHARS = {
    "task_overview": 1500,
    "current_state": 1500,
    "important_discoveries": 2500,
    "next_steps": 800,
    "context_to_preserve": 1500,
}
# Most recent distinct items kept per kind of fact.
_CAPS = {"errors": 12, "paths": 40, "functions": 30, "identifiers": 40}
_LAST_ACTIONS = 6
_TRIMMED = " [...trimmed]"

# Case-insensitive: other frameworks' templates title-case the headings ("# Task Overview").
_SECTION = re.compile(
    r"^# Task overview\n(.*?)(?=\n# |\Z|</system-info>|</system-reminder>)",
    re.DOTALL | re.MULTILINE | re.IGNORECASE,
)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_BLANKS = re.compile(r"\n\s*\n(?:\s*\n)+")
_PROMPTS = ("<system-hint>", "<system-reminder>")
_SUMMARY_TAGS = ("<system-info>", "<system-reminder>")


@dataclass
class _Entry:
    role: str
    name: str
    prose: str
    """Text outside tool traffic, thinking and hints."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(tool name, command or arguments) per call."""
    results: list[tuple[str, bool, str]] = field(default_factory=list)
    """(tool name, is_error, output) per result."""
    other: list[str] = field(default_factory=list)
    """Thinking and hints."""

    def text(self) -> str:
        """Everything readable, with commands decoded from their JSON arguments."""
        calls = [f"$ {command}" for _, command in self.calls]
        return "\n".join([self.prose, *self.other, *calls, *(r[2] for r in self.results)])


def _entry(msg: Msg) -> _Entry:
    prose: list[str] = []
    entry = _Entry(msg.role, msg.name, "")
    for block in msg.blocks():
        if isinstance(block, TextBlock):
            prose.append(block.text)
        elif isinstance(block, ToolCallBlock):
            command = command_of(block.input)
            entry.calls.append((block.name, command or json.dumps(block.input, ensure_ascii=False)))
        elif isinstance(block, ToolResultBlock):
            entry.results.append((block.name, block.is_error, block.text()))
        elif isinstance(block, ThinkingBlock):
            entry.other.append(block.thinking)
        elif isinstance(block, HintBlock):
            entry.other.append(block.hint)
    entry.prose = "\n".join(prose).strip()
    return entry


def _recent(values: Iterable[str], cap: int) -> list[str]:
    """The last ``cap`` distinct values, in order of their last mention."""
    last: dict[str, None] = {}
    for value in values:
        last.pop(value, None)
        last[value] = None
    return list(last)[-cap:]


def _clip(text: str, chars: int) -> str:
    text = text.strip()
    return text if len(text) <= chars else text[: chars - len(_TRIMMED)].rstrip() + _TRIMMED


def _one_line(text: str, chars: int) -> str:
    return _clip(" ".join(text.split()), chars)


def _facts(msgs: Sequence[Msg], previous: str | None, corpus: str) -> dict[str, list[str]]:
    """The facts the ledger finds in ``msgs`` and ``previous`` (read as a user message),
    plus identifiers anywhere in ``corpus``."""
    found = extract_ledger([Msg("user", previous, "user"), *msgs] if previous else msgs)
    return {
        "errors": [text for kind, text in found if kind == "error"],
        "paths": [text for kind, text in found if kind == "file"],
        "functions": [text for kind, text in found if kind == "symbol"],
        "identifiers": identifiers(corpus),
    }


def _tidy(text: str) -> str:
    return _BLANKS.sub("\n\n", _COMMENT.sub("", text)).strip()


def _fields(
    msgs: Sequence[Msg], *, previous: str | None, previous_task: str | None
) -> dict[str, str]:
    entries = [_entry(m) for m in msgs]
    task = previous_task or ""
    if not task and previous:
        section = _SECTION.search(previous)
        task = section.group(1).strip() if section else ""
    if not task:
        first = next((e for e in entries if e.role == "user" and e.prose), None)
        task = first.prose if first is not None else ""
    if not task:
        task = "(not in the compressed part of the history)"

    calls = [c for e in entries for c in e.calls]
    failed = sum(1 for e in entries for r in e.results if r[1])
    actions = [f"- {name}: {_one_line(command, 240)}" for name, command in calls]
    state = [
        f"{len(entries)} message(s) were compressed, with {len(calls)} tool call(s) "
        f"({failed} failed)."
    ]
    if actions:
        state.append("Last actions, oldest first:")
        state.extend(actions[-_LAST_ACTIONS:])

    corpus = "\n".join([previous or "", *(e.text() for e in entries)])
    facts = _facts(msgs, previous, corpus)
    kept = {kind: _recent(values, _CAPS[kind]) for kind, values in facts.items()}
    discoveries: list[str] = []
    if kept["errors"]:
        discoveries.append("Errors seen:")
        discoveries.extend(f"- {e}" for e in kept["errors"])
    if kept["paths"]:
        discoveries.append("Files: " + ", ".join(kept["paths"]))
    if kept["functions"]:
        discoveries.append("Functions: " + ", ".join(kept["functions"]))

    last = next((e for e in reversed(entries) if e.role == "assistant" and e.prose), None)
    next_steps = (
        "Continue from the assistant's last reasoning: " + last.prose
        if last is not None
        else "Continue from the most recent messages."
    )
    preserve = "Identifiers: " + (", ".join(kept["identifiers"]) or "none")
    fields = {
        "task_overview": _tidy(task),
        "current_state": "\n".join(state),
        "important_discoveries": "\n".join(discoveries) or "Nothing extracted.",
        "next_steps": next_steps,
        "context_to_preserve": preserve,
    }
    return {k: _clip(v, _FIELD_CHARS[k]) for k, v in fields.items()}


def extractive_summary(
    msgs: Sequence[Msg],
    *,
    previous: str | None = None,
    previous_task: str | None = None,
) -> dict[str, str]:
    """The five summary fields of ``msgs``, by extraction.

    ``previous`` is the previous summary's text: its facts compete with the new ones for
    the capped lists (most recent wins); its task overview (``previous_task``, or the
    ``# Task overview`` section of its text) is kept.
    """
    return _fields(msgs, previous=previous, previous_task=previous_task)


def summarize_items(items: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The five fields for neutral ``(role, text)`` pairs, oldest first.

    For callers that flatten their own message types (e.g. benchmarks comparing
    frameworks with one summarizer). Roles are ``user``, ``assistant``, ``system`` and
    ``tool`` (a tool's output, read as a tool result, so its error lines are reported).
    System items and runtime prompts (``<system-hint>``, ``<system-reminder>``) are
    skipped; the first item holding a rendered summary (a ``# Task overview`` heading, any
    case, inside ``<system-info>`` or ``<system-reminder>``) is the previous summary.
    """
    previous: str | None = None
    msgs: list[Msg] = []
    for role, text in items:
        if (
            previous is None
            and not msgs
            and any(tag in text for tag in _SUMMARY_TAGS)
            and _SECTION.search(text) is not None
        ):
            previous = text
            continue
        if role == "system" or not text or text.lstrip().startswith(_PROMPTS):
            continue
        if role == "tool":
            result = ToolResultBlock(id=f"item-{len(msgs)}", name="tool", output=text)
            msgs.append(Msg("tool", [result], "user"))
        else:
            msgs.append(Msg(role, text.strip(), "assistant" if role == "assistant" else "user"))
    return _fields(msgs, previous=previous, previous_task=None)


class ExtractiveSummarizer:
    """A deterministic :class:`~contextfold.context.Summarizer` that needs no model.

    It extracts what a summary must keep from the messages themselves: the first user
    request (or the previous summary's task), the last commands, error lines from tool
    output, file paths, the functions and classes defined, identifiers, and the last thing
    the assistant said. Every field has a size cap, so the summary is
    bounded as a model's would be. Properties of a custom schema that are not one of the
    five fields receive the whole rendered summary.
    """

    def __init__(self) -> None:
        self.calls = 0
        """Summaries written so far."""

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """The fields of ``request.messages``, folding in ``request.previous`` unless it
        stays in place (``request.previous_stays``)."""
        self.calls += 1
        if request.previous_stays:
            # The summary in place stays: the fields cover the new messages alone, and the
            # task is the one it states.
            fields = {**extractive_summary(request.messages), "task_overview": ""}
        else:
            previous_fields = request.previous_fields or {}
            task = previous_fields.get("task_overview")
            fields = extractive_summary(
                request.messages,
                previous=request.previous.text if request.previous is not None else None,
                previous_task=task if isinstance(task, str) else None,
            )
        rendered = "\n\n".join(f"{k}: {v}" for k, v in fields.items())
        return SummaryResult(fields=_fit_schema(request.schema, fields, rendered))


class EmptySummarizer:
    """A :class:`~contextfold.context.Summarizer` whose fields are all empty.

    What remains in the summary is what the engine adds itself (the offload reference and
    the artifact ledger), so a replay with it measures those alone.
    """

    def __repr__(self) -> str:
        return "EmptySummarizer()"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Every property of the schema, empty."""
        properties = request.schema.get("properties")
        names = properties if isinstance(properties, dict) and properties else SUMMARY_FIELDS
        return SummaryResult(fields=dict.fromkeys(names, ""))


def _fit_schema(schema: dict[str, Any], fields: dict[str, str], rendered: str) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return dict(fields)
    return {name: fields.get(name, rendered) for name in properties}
