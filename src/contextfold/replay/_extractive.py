"""ExtractiveSummarizer: a deterministic, model-free summarizer for replays and tests.

It answers the engine's forced ``write_summary`` call by extracting, with regular
expressions, what a summary must keep from the transcript the engine sends: the first
user request, the last commands, error lines, file paths, function names, identifiers and
numbers, and the last thing the assistant said. No model, no randomness: the same
transcript always gives the same summary, and every field has a size cap, so the summary
is bounded as a model's would be. Hundreds of runs replay in seconds with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..message import Msg, TextBlock, ToolCallBlock, ToolChoice, ToolSpec, Usage
from ..model import ChatModelBase, ChatResponse
from ..token import TokenCounter

__all__ = ["ExtractiveSummarizer", "extractive_summary", "summarize_items"]

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
_CAPS = {"errors": 12, "paths": 40, "functions": 30, "identifiers": 40, "numbers": 30}
_LAST_ACTIONS = 6

# `transcript_entry` writes "[<role> <name>]" on a line of its own before each message.
_HEADER = re.compile(r"^\[(user|assistant|system) ([^\]\n]*)\]$", re.MULTILINE)
_PREVIOUS = re.compile(r"<previous-summary>\n(.*?)\n</previous-summary>", re.DOTALL)
_CONVERSATION = re.compile(r"<conversation>\n(.*)\n</conversation>", re.DOTALL)
# Case-insensitive: other frameworks' templates title-case the headings ("# Task Overview").
_SECTION = re.compile(
    r"^# Task overview\n(.*?)(?=\n# |\Z|</system-info>)",
    re.DOTALL | re.MULTILINE | re.IGNORECASE,
)
_CALL = re.compile(r"^\(tool call ([^:\n]*): ([^)\n]*)\) (.*)$", re.MULTILINE)
_RESULT = re.compile(
    r"^\(tool result ([^:\n]*): ([^)\n]*?)( ERROR)?\)(?: \[[^\]]*\])? ", re.MULTILINE
)
_MARKED = re.compile(r"^\((?:tool call|tool result|thinking|runtime hint)\b", re.MULTILINE)

_PATH = re.compile(r"(?<![\w/.:-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,7}\b")
_FUNC = re.compile(r"\b(?:def|class|func|fn|function)\s+([A-Za-z_]\w*)|\b([A-Za-z_][\w.]*)\(")
# Lines that report an error (a traceback's last line, test failures, compiler errors),
# not source lines that merely mention an exception class.
_ERROR = re.compile(
    r"^\s*((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b:?[^\n]{0,200}"
    r"|Traceback \(most recent call last\)"
    r"|[^\n]*\b(?:FAILED|error:|fatal:|[Ee]rror code)[^\n]{0,200})",
    re.MULTILINE,
)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_BLANKS = re.compile(r"\n\s*\n(?:\s*\n)+")
_IDENT = re.compile(
    r"\b(?:[A-Za-z]+_[A-Za-z0-9_]*[A-Za-z0-9]"  # snake_case, user ids like mia_li_3668
    r"|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"  # CamelCase
    r"|(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*[0-9])[A-Z0-9]{5,12})\b"  # codes like ZFA04Y, HAT136
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_PROMPTS = ("<system-hint>", "<system-reminder>")
_KEYWORDS = frozenset({"def", "class", "print", "if", "for", "while", "return", "and", "or", "not"})


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


def _entries(conversation: str) -> list[_Entry]:
    heads = list(_HEADER.finditer(conversation))
    out: list[_Entry] = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(conversation)
        body = conversation[head.end() + 1 : end].rstrip("\n")
        marks = list(_MARKED.finditer(body))
        prose = body if not marks else body[: marks[0].start()]
        entry = _Entry(head.group(1), head.group(2), prose.strip())
        for j, mark in enumerate(marks):
            segment = body[mark.start() : marks[j + 1].start() if j + 1 < len(marks) else None]
            call = _CALL.match(segment)
            result = _RESULT.match(segment)
            if call is not None:
                entry.calls.append((call.group(2), _command(call.group(3).rstrip())))
            elif result is not None:
                output = segment[result.end() :].rstrip()
                entry.results.append((result.group(2), bool(result.group(3)), output))
            else:
                entry.other.append(segment.split(") ", 1)[-1].rstrip())
        out.append(entry)
    return out


def _command(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict):
        for key in ("command", "cmd", "script", "code"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return arguments


def _recent(values: Iterable[str], cap: int) -> list[str]:
    """The last ``cap`` distinct values, in order of their last mention."""
    last: dict[str, None] = {}
    for value in values:
        last.pop(value, None)
        last[value] = None
    return list(last)[-cap:]


def _clip(text: str, chars: int) -> str:
    text = text.strip()
    return text if len(text) <= chars else text[: chars - 12].rstrip() + " [...trimmed]"


def _one_line(text: str, chars: int = 200) -> str:
    return _clip(" ".join(text.split()), chars)


def _facts(text: str, reported: str) -> dict[str, list[str]]:
    """Facts in ``text``; errors only from ``reported`` (tool output, user messages)."""
    functions = [a or b for a, b in _FUNC.findall(text)]
    return {
        "errors": [_one_line(m) for m in _ERROR.findall(reported)],
        "paths": _PATH.findall(text),
        "functions": [f for f in functions if f not in _KEYWORDS and len(f) > 2],
        "identifiers": _IDENT.findall(text),
        "numbers": [n for n in _NUMBER.findall(text) if len(n.lstrip("-")) >= 3],
    }


def _tidy(text: str) -> str:
    return _BLANKS.sub("\n\n", _COMMENT.sub("", text)).strip()


def extractive_summary(transcript: str, *, previous: str | None = None) -> dict[str, str]:
    """The five summary fields of a transcript written by the engine's summary writer.

    ``previous`` is the previous summary's text: its task overview is kept, and its facts
    compete with the new ones for the capped lists (most recent wins).
    """
    entries = _entries(transcript)
    task = ""
    if previous:
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
    reported = "\n".join(
        [previous or ""]
        + [r[2] for e in entries for r in e.results]
        + [e.prose for e in entries if e.role == "user"]
    )
    facts = _facts(corpus, reported)
    kept = {kind: _recent(values, _CAPS[kind]) for kind, values in facts.items()}
    discoveries: list[str] = []
    if kept["errors"]:
        discoveries.append("Errors seen:")
        discoveries.extend(f"- {e}" for e in kept["errors"])
    if kept["paths"]:
        discoveries.append("Files: " + ", ".join(kept["paths"]))
    if kept["functions"]:
        discoveries.append("Functions: " + ", ".join(kept["functions"]))
    if kept["numbers"]:
        discoveries.append("Numbers: " + ", ".join(kept["numbers"]))

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


def summarize_items(items: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The five fields for neutral ``(role, text)`` pairs, oldest first.

    For callers that flatten their own message types (e.g. benchmarks comparing
    frameworks with one summarizer). Roles are ``user``, ``assistant``, ``system`` and
    ``tool`` (a tool's output, read as a tool result, so its error lines are reported).
    System items and runtime prompts (``<system-hint>``, ``<system-reminder>``) are
    skipped; the first item holding a rendered summary (``<system-info>`` with a
    ``# Task overview`` heading, any case) is the previous summary.
    """
    previous: str | None = None
    entries: list[str] = []
    for role, text in items:
        if role == "system" or not text or text.lstrip().startswith(_PROMPTS):
            continue
        if (
            previous is None
            and not entries
            and "<system-info>" in text
            and _SECTION.search(text) is not None
        ):
            previous = text
            continue
        if role == "tool":
            entries.append(f"[user tool]\n(tool result tool: tool) {text}")
        else:
            entries.append(f"[{role} {role}]\n{text}")
    return extractive_summary("\n\n".join(entries), previous=previous)


def _request_text(messages: Sequence[Msg]) -> str:
    return "\n".join(
        b.text for m in messages if m.role == "user" for b in m.blocks() if isinstance(b, TextBlock)
    )


class ExtractiveSummarizer(ChatModelBase):
    """A :class:`ChatModelBase` that answers forced summary calls by extraction.

    Give it to :class:`~contextfold.context.ContextEngine` as ``summarizer``. Any forced
    tool call is answered with :func:`extractive_summary` of the transcript in the
    request; properties of a custom schema that are not one of the five fields receive the
    whole rendered summary. A call without a forced tool gets the summary as text.
    ``context_size`` bounds the transcript the engine sends (older messages beyond it are
    left out by the engine, as with a real model).
    """

    def __init__(
        self,
        *,
        context_size: int = 128_000,
        token_counter: TokenCounter | None = None,
        model_name: str = "extractive",
    ) -> None:
        super().__init__(
            model_name, context_size=context_size, max_retries=0, token_counter=token_counter
        )
        self.calls = 0
        """Summaries written so far."""

    @property
    def token_counter(self) -> TokenCounter:
        """The counter given, else exact ``o200k_base``."""
        if self._token_counter is None:
            from ..token import OpenAITokenCounter

            self._token_counter = OpenAITokenCounter("o200k_base")
        return self._token_counter

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        self.calls += 1
        text = _request_text(messages)
        previous = _PREVIOUS.search(text)
        conversation = _CONVERSATION.search(text)
        fields = extractive_summary(
            conversation.group(1) if conversation else text,
            previous=previous.group(1) if previous else None,
        )
        rendered = "\n\n".join(f"{k}: {v}" for k, v in fields.items())
        usage = Usage(output_tokens=self.token_counter.count_text(rendered))
        forced = next((t for t in tools if t.name == tool_choice), None)
        if forced is None:
            return ChatResponse(
                content=[TextBlock(text=rendered)], usage=usage, stop_reason="end_turn"
            )
        answer = _fit_schema(forced.parameters, fields, rendered)
        call = ToolCallBlock(id=f"extractive-{self.calls}", name=forced.name, input=answer)
        return ChatResponse(content=[call], usage=usage, stop_reason="tool_use")


def _fit_schema(schema: dict[str, Any], fields: dict[str, str], rendered: str) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return dict(fields)
    return {name: fields.get(name, rendered) for name in properties}
